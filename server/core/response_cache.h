// Triton's response cache: `--cache-config local,size=N` gives kilnd one LRU cache of N bytes;
// a model with `response_cache { enable: true }` answers a request whose key it has seen from
// the cache without running (a model enabling it on a kilnd without a cache fails its load).
//
// Key: model name, version, and for every input in request order its name, datatype, shape and
// bytes (raw, or the typed contents' values), then the requested outputs in order -- so identical
// requests (whatever their id) hit, and anything that changes the answer misses. Entries are
// charged their key plus their outputs' bytes; past N the least recently used go. An entry
// larger than N is not kept. Only successful responses are stored.
// Statistics and metrics (Triton's): a hit counts as a successful request and in cache_hit
// (count, lookup ns) / nv_cache_num_hits_per_model, nv_cache_hit_duration_per_model, but in no
// inference or execution count; a miss runs normally and adds cache_miss (lookup + insert ns) /
// nv_cache_num_misses_per_model, nv_cache_miss_duration_per_model.
// Thread safety: every method may be called from any thread (one mutex).
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/core/infer_request.h"
#include "server/core/model_repository.h"
#include "server/core/observer.h"

namespace kiln::server {

// Parses --cache-config values ("local,size=N"; Triton's syntax). The cache size in bytes;
// INVALID_ARGUMENT naming the flag for another cache or a bad size. Empty list = 0 (no cache).
absl::StatusOr<int64_t> ParseCacheConfig(const std::vector<std::string>& specs);

class ResponseCache {
 public:
  explicit ResponseCache(int64_t max_bytes) : max_bytes_(max_bytes) {}

  static std::string Key(const ModelVersion& version, const InferRequest& request);

  std::optional<InferResponse> Lookup(const std::string& key);
  void Insert(const std::string& key, const InferResponse& response);
  int64_t bytes() const;

 private:
  struct Entry {
    std::string key;
    InferResponse response;
    int64_t bytes = 0;
  };
  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  absl::flat_hash_map<std::string, std::list<Entry>::iterator> index_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// InferenceServer's hooks (one each side of the execution). ProbeCache: null `cache` or a model
// without response_cache.enable = no probe; a hit is returned (with the request's id) after its
// statistics and observation were recorded. StoreInCache: after a successful execution.
struct CacheProbe {
  bool enabled = false;
  std::string key;
  std::chrono::steady_clock::time_point start;
  uint64_t lookup_ns = 0;
  std::optional<InferResponse> hit;
};
CacheProbe ProbeCache(ResponseCache* cache, const ModelVersion& version,
                      const InferRequest& request, std::chrono::steady_clock::time_point arrival,
                      InferObservation* obs);
void StoreInCache(ResponseCache* cache, const CacheProbe& probe, const ModelVersion& version,
                  const absl::StatusOr<InferResponse>& response, InferObservation* obs);

}  // namespace kiln::server
