#include "server/core/model_control.h"

#include <algorithm>
#include <chrono>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "server/core/inference_server.h"
#include "server/core/model_config.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

constexpr int kMaxScanDepth = 4;          // <model>/<version>/<file> and a little below
constexpr int kMaxScanEntries = 10000;    // per model folder; beyond it the signature stops

bool CountsForReadiness(const RepositoryIndexEntry& row) {
  return !row.state.empty() && row.state != "READY" && row.reason != "unloaded";
}

}  // namespace

absl::StatusOr<ModelControlMode> ParseModelControlMode(std::string_view text) {
  const std::string mode = absl::AsciiStrToLower(std::string(text));
  if (mode.empty()) return ModelControlMode::kDefault;
  if (mode == "none") return ModelControlMode::kNone;
  if (mode == "poll") return ModelControlMode::kPoll;
  if (mode == "explicit") return ModelControlMode::kExplicit;
  return absl::InvalidArgumentError(absl::StrCat("--model-control-mode: '", mode.substr(0, 32),
                                                 "' is not none, poll or explicit"));
}

absl::Status ModelControlRefused() {
  return absl::UnavailableError(
      "explicit model load / unload is not allowed: kilnd runs with --model-control-mode none or "
      "poll (start it with --model-control-mode=explicit to load and unload models by request)");
}

bool AllModelsReady(const std::vector<RepositoryIndexEntry>& rows) {
  return std::none_of(rows.begin(), rows.end(), CountsForReadiness);
}

absl::Status LoadStartupModels(InferenceServer& server, const std::vector<std::string>& models) {
  std::vector<std::string> names;
  for (const std::string& m : models) {
    if (m == "*") {
      for (const RepositoryIndexEntry& row : server.RepositoryIndex(false)) {
        if (names.empty() || names.back() != row.name) names.push_back(row.name);
      }
    } else if (!m.empty()) {
      names.push_back(m);
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<std::string> errors;
  LoadOptions options;
  options.internal = true;
  for (const std::string& name : names) {
    absl::Status s = server.LoadModel(name, options);
    if (s.ok()) {
      spdlog::info("model '{}' loaded", name);
    } else {
      spdlog::warn("model '{}' failed to load: {}", name, std::string(s.message()));
      errors.push_back(std::string(s.message()));
    }
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
}

RepositoryPoller::RepositoryPoller(InferenceServer* server, std::filesystem::path root,
                                   bool follow_links)
    : server_(server), root_(std::move(root)), follow_links_(follow_links) {}

RepositoryPoller::~RepositoryPoller() { Stop(); }

void RepositoryPoller::Start(std::chrono::milliseconds period) {
  PollOnce();  // the baseline: the repository as start-up loaded it
  thread_ = std::thread([this, period] {
    while (!stop_.WaitForNotificationWithTimeout(absl::FromChrono(period))) PollOnce();
  });
}

void RepositoryPoller::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

std::map<std::string, std::string> RepositoryPoller::Scan() const {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (const RepositoryIndexEntry& row : server_->RepositoryIndex(false)) {
    if (out.count(row.name) || !IsValidModelName(row.name)) continue;
    const std::filesystem::path folder = root_ / row.name;
    if (!std::filesystem::is_directory(std::filesystem::symlink_status(folder, ec)) &&
        !(follow_links_ && std::filesystem::is_directory(folder, ec))) {
      if (std::filesystem::exists(std::filesystem::symlink_status(folder, ec))) out[row.name] = "";
      continue;  // loaded but its folder is gone: not in `out`
    }
    std::string signature;
    int entries = 0;
    auto options = follow_links_ ? std::filesystem::directory_options::follow_directory_symlink
                                 : std::filesystem::directory_options::none;
    std::filesystem::recursive_directory_iterator it(folder, options, ec), end;
    for (; !ec && it != end && entries < kMaxScanEntries; it.increment(ec), ++entries) {
      if (it.depth() >= kMaxScanDepth) it.disable_recursion_pending();
      const std::filesystem::directory_entry& e = *it;
      std::error_code fec;
      const auto size = e.is_regular_file(fec) ? e.file_size(fec) : 0;
      const auto mtime = e.last_write_time(fec).time_since_epoch().count();
      absl::StrAppend(&signature, e.path().lexically_relative(folder).string(), ":", size, ":",
                      mtime, "\n");
    }
    out[row.name] = std::move(signature);
  }
  return out;
}

void RepositoryPoller::PollOnce() {
  std::map<std::string, std::string> now = Scan();
  if (!primed_) {
    seen_ = std::move(now);
    primed_ = true;
    return;
  }
  LoadOptions options;
  options.internal = true;
  for (const auto& [name, signature] : now) {
    auto it = seen_.find(name);
    if (it != seen_.end() && it->second == signature) continue;
    absl::Status s = server_->LoadModel(name, options);
    if (s.ok()) {
      spdlog::info("poll: model '{}' {}", name, it == seen_.end() ? "loaded" : "reloaded");
    } else {
      spdlog::warn("poll: {}", std::string(s.message()));
    }
  }
  for (const auto& [name, signature] : seen_) {
    if (now.count(name)) continue;
    absl::Status s = server_->UnloadModel(name, /*internal=*/true);
    spdlog::info("poll: model '{}' folder removed: {}", name,
                 s.ok() ? std::string("unloaded") : std::string(s.message()));
  }
  seen_ = std::move(now);
}

}  // namespace kiln::server
