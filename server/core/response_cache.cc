#include "server/core/response_cache.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/core/statistics.h"

namespace kiln::server {
namespace {

void AppendSized(std::string* out, std::string_view bytes) {
  absl::StrAppend(out, bytes.size(), ":");
  out->append(bytes.data(), bytes.size());
}

template <typename T>
void AppendSpan(std::string* out, absl::Span<const T> values) {
  AppendSized(out, std::string_view(reinterpret_cast<const char*>(values.data()),
                                    values.size() * sizeof(T)));
}

}  // namespace

absl::StatusOr<int64_t> ParseCacheConfig(const std::vector<std::string>& specs) {
  int64_t size = 0;
  for (const std::string& spec : specs) {
    if (spec.empty()) continue;
    std::vector<std::string> parts = absl::StrSplit(spec, ',');
    if (parts[0] != "local") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--cache-config: cache '", parts[0].substr(0, 32), "' is not implemented (kilnd has 'local')"));
    }
    for (size_t i = 1; i < parts.size(); ++i) {
      std::pair<std::string, std::string> kv = absl::StrSplit(parts[i], absl::MaxSplits('=', 1));
      if (kv.first != "size" || !absl::SimpleAtoi(kv.second, &size) || size < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--cache-config: '", parts[i].substr(0, 64),
            "' is not size=<bytes> (local takes one setting, size)"));
      }
    }
  }
  return size;
}

std::string ResponseCache::Key(const ModelVersion& version, const InferRequest& request) {
  std::string key;
  AppendSized(&key, version.name);
  absl::StrAppend(&key, version.version, ";");
  for (const InferInput& in : request.inputs) {
    AppendSized(&key, in.name);
    AppendSized(&key, in.datatype);
    AppendSpan(&key, in.shape);
    if (in.has_contents) {
      key += 'T';
      AppendSpan(&key, in.typed.bools);
      AppendSpan(&key, in.typed.ints);
      AppendSpan(&key, in.typed.int64s);
      AppendSpan(&key, in.typed.uints);
      AppendSpan(&key, in.typed.uint64s);
      AppendSpan(&key, in.typed.fp32s);
      AppendSpan(&key, in.typed.fp64s);
    } else {
      key += 'R';
      AppendSized(&key, in.raw);
    }
  }
  key += "|outputs";
  for (const std::string& out : request.requested_outputs) AppendSized(&key, out);
  key += "|classification";
  for (int64_t k : request.classification) absl::StrAppend(&key, k, ",");
  return key;
}

std::optional<InferResponse> ResponseCache::Lookup(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->response;
}

void ResponseCache::Insert(const std::string& key, const InferResponse& response) {
  int64_t bytes = static_cast<int64_t>(key.size());
  for (const InferOutput& out : response.outputs) {
    bytes += static_cast<int64_t>(out.raw.size() + out.name.size() + out.shape.size() * 8);
  }
  if (bytes > max_bytes_) return;
  absl::MutexLock lock(&mu_);
  if (index_.contains(key)) return;
  while (bytes_ + bytes > max_bytes_ && !lru_.empty()) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  lru_.push_front({key, response, bytes});
  lru_.front().response.id.clear();
  index_[key] = lru_.begin();
  bytes_ += bytes;
}

int64_t ResponseCache::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

CacheProbe ProbeCache(ResponseCache* cache, const ModelVersion& version,
                      const InferRequest& request, std::chrono::steady_clock::time_point arrival,
                      InferObservation* obs) {
  CacheProbe probe;
  if (cache == nullptr || !version.config->response_cache().enable()) return probe;
  probe.enabled = true;
  probe.start = std::chrono::steady_clock::now();
  probe.key = ResponseCache::Key(version, request);
  probe.hit = cache->Lookup(probe.key);
  probe.lookup_ns = NanosSince(probe.start);
  if (probe.hit.has_value()) {
    probe.hit->id = request.id;
    version.stats->RecordCacheHit(NanosSince(arrival), probe.lookup_ns);
    obs->cache_hit = true;
    obs->cache_ns = probe.lookup_ns;
  }
  return probe;
}

void StoreInCache(ResponseCache* cache, const CacheProbe& probe, const ModelVersion& version,
                  const absl::StatusOr<InferResponse>& response, InferObservation* obs) {
  if (!probe.enabled || probe.hit.has_value() || !response.ok()) return;
  const auto start = std::chrono::steady_clock::now();
  cache->Insert(probe.key, *response);
  const uint64_t ns = probe.lookup_ns + NanosSince(start);
  version.stats->RecordCacheMiss(ns);
  obs->cache_miss = true;
  obs->cache_ns = ns;
}

}  // namespace kiln::server
