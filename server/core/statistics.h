// Triton-style per model-version statistics (the `statistics` protocol extension).
//
// ModelStats is updated by the request path and read by ModelStatistics; every method is
// thread-safe (one mutex, held for a few additions). Durations are nanoseconds. Semantics follow
// Triton: inference_count counts batch elements (a batch of n counts n), execution_count counts
// model executions, success/fail count requests that reached a model version.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/api/clock.h"

namespace kiln::server {

// NanosSince(start): kiln::NanosSince (engine/api/clock.h), the one steady-clock helper.
using ::kiln::NanosSince;

struct Duration {
  uint64_t count = 0;
  uint64_t ns = 0;
  void Add(uint64_t duration_ns) {
    ++count;
    ns += duration_ns;
  }
};

struct BatchStats {
  Duration compute_input;
  Duration compute_infer;
  Duration compute_output;
};

// A copy of the counters at one instant.
struct ModelStatsSnapshot {
  uint64_t last_inference_ms = 0;  // ms since the epoch; 0 = never
  uint64_t inference_count = 0;
  uint64_t execution_count = 0;
  Duration success;
  Duration fail;
  Duration queue;
  Duration compute_input;
  Duration compute_infer;
  Duration compute_output;
  Duration cache_hit;
  Duration cache_miss;
  std::map<uint64_t, BatchStats> batch;  // by batch size
};

// Timings of one successful execution.
struct ExecutionTimes {
  uint64_t batch_size = 1;
  uint64_t queue_ns = 0;
  uint64_t compute_input_ns = 0;
  uint64_t compute_infer_ns = 0;
  uint64_t compute_output_ns = 0;
};

class ModelStats {
 public:
  // A request that succeeded end to end in `total_ns`, after `times` (times.batch_size: the
  // request's own rows; the compute times: those of the execution that ran it).
  void RecordRequest(uint64_t total_ns, const ExecutionTimes& times);
  // One model execution of times.batch_size rows (a dynamic batch counts once, however many
  // requests it merged): execution_count and the per-batch-size statistics.
  void RecordExecution(const ExecutionTimes& times);
  // A request that failed after reaching this version (validation, platform, execution).
  void RecordFailure(uint64_t total_ns);
  // A request answered from the response cache (response_cache.h): a success and a cache hit,
  // no inference or execution.
  void RecordCacheHit(uint64_t total_ns, uint64_t lookup_ns);
  // A cache miss: its lookup and insertion time (the execution is recorded by RecordSuccess).
  void RecordCacheMiss(uint64_t ns);
  ModelStatsSnapshot Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  ModelStatsSnapshot stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
