// TraceCache: captured JITs keyed by (model, input signature), a bounded LRU (DESIGN.md §2: "the JIT's trace cache,
// keyed by (graph or model version, input signature, device)"). The server keeps one per engine and runs each
// request's model function through it.
//
// Run(model, args, fn): the key is the model string plus, per input in JitArgs order, its name, shape, dtype and
// device, plus the names (not the values) of the call's Variables (and, under BEAM, the background-search generation: engine/realize/beam.h). A miss creates a TinyJit over `fn` (counted as a miss; when the cache is full the least recently used
// entry is evicted and counted); a hit reuses the entry's TinyJit (counted as a hit), which runs, captures or
// replays according to its own call count. `fn` is used only when the entry is created: a model's function must not
// change under the same model string (bump a version in the string instead).
//
// Bounded by entries and by bytes: an entry's bytes are the memory its captured plan allocated
// (ExecPlan::allocated_bytes: intermediates and outputs; weights and inputs are not the trace's), known after the
// capture call. After each Run the least recently used entries (never the one just run, which becomes the most
// recent) are evicted while the total exceeds `max_bytes` (0 = no byte bound) or the count exceeds `capacity`;
// evictions are counted. The bookkeeping is engine/base's LruCache.
//
// Thread safety: all methods are thread-safe. Calls of one entry are serialized by the entry's mutex; different
// entries run concurrently. An evicted entry that is running finishes its call (entries are shared_ptrs).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/lru_cache.h"
#include "engine/jit/tiny_jit.h"

namespace kiln::jit {

// What one Run did, for callers that account kernels (engine/api): whether the entry existed, the
// entry's TinyJit call count before the call (0 = plain run, 1 = capture, >= 2 = replay) and, once
// captured, the kernel names of its plan in launch order (replays launch exactly these, untimed).
struct TraceRunInfo {
  bool time_launches = false;  // in: time every launch of the plan (plan_seconds)
  bool hit = false;
  int call = 0;
  std::vector<std::string> plan_kernels;
  std::vector<double> plan_seconds;  // with time_launches: per plan call (plan_kernels order; < 0 = untimed)
  std::vector<int64_t> plan_start_ns;  // with time_launches: ExecPlan::call_start_ns()
  std::vector<ExecPlan::CallCost> plan_costs;  // once captured: ExecPlan::CallCosts()
  std::vector<bool> plan_skipped;  // once captured: ExecPlan::SkippedInLastRun() (constant calls not launched)
};

struct TraceCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;
  int64_t size = 0;
  int64_t bytes = 0;      // over every entry (as last measured after its Run)
  int64_t max_bytes = 0;  // the byte bound (0 = none)
};

class TraceCache {
 public:
  // capacity >= 1 (0 is treated as 1); max_bytes 0 = no byte bound.
  explicit TraceCache(size_t capacity, size_t max_bytes = 0);
  // New bounds; evicts down to them at once (entries running finish their call).
  void SetLimits(size_t capacity, size_t max_bytes);

  absl::StatusOr<std::vector<Tensor>> Run(const std::string& model, const JitArgs& args,
                                          const JitFunction& fn, TraceRunInfo* info = nullptr);

  TraceCacheStats stats() const;
  size_t capacity() const {
    absl::MutexLock l(&mu_);
    return cache_.max_entries();
  }
  // Appends the device buffers the traces of `model` keep alive (TinyJit::CollectBuffers; may repeat a buffer).
  // Waits for a running call of each such entry to finish.
  void CollectBuffers(const std::string& model, std::vector<const runtime::Buffer*>* out) const;
  // Drops every entry whose model is `model` (e.g. on unload); returns how many.
  int Erase(const std::string& model);
  // Drops the one entry with cache key `key` (KeyOf); whether it was there.
  bool EraseKey(const std::string& key);
  void Clear();
  // The cache key of a call (for tests and logs): "model|name:(shape=..., dtype=..., device=...)|...".
  static absl::StatusOr<std::string> KeyOf(const std::string& model, const JitArgs& args);

 private:
  struct Entry {
    std::string key;
    std::string model;
    absl::Mutex mu;
    std::unique_ptr<TinyJit> jit ABSL_GUARDED_BY(mu);
  };

  mutable absl::Mutex mu_;
  // Entries by key; an entry's bytes are what its plan allocated, set after each Run (LruCache:
  // the newest entry -- the one just run -- always stays).
  LruCache<std::string, std::shared_ptr<Entry>> cache_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::jit
