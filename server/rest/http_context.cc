// HttpContext (http_connection.h): the registry of a server's open connections and its caps.
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/rest/http_connection.h"

namespace kiln::server {

std::string HttpContext::Admit(const std::string& client) {
  std::lock_guard<std::mutex> l(mu_);
  if (stopping()) return "the server is shutting down";
  if (open_ >= limits_.max_connections) {
    return absl::StrCat("too many connections (the limit is ", limits_.max_connections,
                        ", --http-max-connections)");
  }
  const int per_client = limits_.max_connections_per_client;
  auto it = per_client_.find(client);
  if (per_client > 0 && it != per_client_.end() && it->second >= per_client) {
    return absl::StrCat("too many connections from ", client, " (the limit is ", per_client,
                        ", --http-max-connections-per-client)");
  }
  ++per_client_[client];
  ++open_;
  return "";
}

void HttpContext::Register(ConnectionBase* c, std::weak_ptr<ConnectionBase> self) {
  std::lock_guard<std::mutex> l(mu_);
  live_.emplace(c, std::move(self));
}

void HttpContext::Remove(ConnectionBase* c, const std::string& client) {
  std::lock_guard<std::mutex> l(mu_);
  live_.erase(c);
  auto it = per_client_.find(client);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  --open_;
}

bool HttpContext::BeginRefusal() {
  if (refusing_.fetch_add(1) >= kMaxRefusing) {
    refusing_.fetch_sub(1);
    return false;
  }
  return true;
}

void HttpContext::StopAll() {
  stopping_.store(true, std::memory_order_release);
  std::vector<std::shared_ptr<ConnectionBase>> open;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [raw, weak] : live_) {
      if (auto c = weak.lock()) open.push_back(std::move(c));
    }
  }
  for (auto& c : open) c->Stop();
}

int HttpContext::open() const {
  std::lock_guard<std::mutex> l(mu_);
  return open_;
}

}  // namespace kiln::server
