#include "server/core/statistics.h"

#include <chrono>

namespace kiln::server {
namespace {

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

void ModelStats::RecordRequest(uint64_t total_ns, const ExecutionTimes& times) {
  const uint64_t now = NowMs();
  absl::MutexLock lock(&mu_);
  stats_.last_inference_ms = now;
  stats_.inference_count += times.batch_size;
  stats_.success.Add(total_ns);
  stats_.queue.Add(times.queue_ns);
  stats_.compute_input.Add(times.compute_input_ns);
  stats_.compute_infer.Add(times.compute_infer_ns);
  stats_.compute_output.Add(times.compute_output_ns);
}

void ModelStats::RecordExecution(const ExecutionTimes& times) {
  absl::MutexLock lock(&mu_);
  stats_.execution_count += 1;
  BatchStats& batch = stats_.batch[times.batch_size];
  batch.compute_input.Add(times.compute_input_ns);
  batch.compute_infer.Add(times.compute_infer_ns);
  batch.compute_output.Add(times.compute_output_ns);
}

void ModelStats::RecordFailure(uint64_t total_ns) {
  const uint64_t now = NowMs();
  absl::MutexLock lock(&mu_);
  stats_.last_inference_ms = now;
  stats_.fail.Add(total_ns);
}

void ModelStats::RecordCacheHit(uint64_t total_ns, uint64_t lookup_ns) {
  const uint64_t now = NowMs();
  absl::MutexLock lock(&mu_);
  stats_.last_inference_ms = now;
  stats_.success.Add(total_ns);
  stats_.cache_hit.Add(lookup_ns);
}

void ModelStats::RecordCacheMiss(uint64_t ns) {
  absl::MutexLock lock(&mu_);
  stats_.cache_miss.Add(ns);
}

ModelStatsSnapshot ModelStats::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace kiln::server
