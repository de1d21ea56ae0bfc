// The dynamic batcher of one model version (issue #20): Triton's `dynamic_batching` semantics over
// kilnd's device lanes (inference_lanes.h).
//
// Requests of the version wait here, by priority level, until a batch is ready; InferenceServer
// then runs the batch as one engine execution (inference_batching.cc: inputs concatenated along
// dim 0, outputs split back per request). The policy, from config.pbtxt:
//
//   max_batch_size                  the most rows (sum of the requests' batch dims) in one batch;
//                                   a model with max_batch_size 0 still queues by priority and
//                                   timeout, one request per execution.
//   max_queue_delay_microseconds    how long the oldest queued request may wait for the batch to
//                                   fill; 0 = run what is queued as soon as the device is free.
//   preferred_batch_size            batch sizes to send at once, without waiting for the delay; at
//                                   the delay's end (or when the queue holds at least the largest
//                                   preferred size) the largest queue prefix whose rows equal a
//                                   preferred size is sent, else every request that fits.
//   preserve_ordering               requests are taken strictly in queue order: a request whose
//                                   non-batch shapes differ from the batch's first ends the batch
//                                   (without it, such requests are skipped and wait for a later
//                                   batch; they are never merged).
//   priority_levels, default_priority_level
//                                   levels 1 (highest) .. priority_levels; a request's `priority`
//                                   parameter picks one (0 = default). Higher levels are drained
//                                   first; a batch may mix levels.
//   default_queue_policy, priority_queue_policy
//                                   per level: max_queue_size (over it a request is refused at
//                                   once with UNAVAILABLE), default_timeout_microseconds (0 =
//                                   none), allow_timeout_override (the request's `timeout`
//                                   parameter replaces the default), timeout_action REJECT (the
//                                   request is answered UNAVAILABLE "request timeout expired") or
//                                   DELAY (it waits behind every request of its level that has not
//                                   timed out).
//
// Every queued request is also dropped, unexecuted, when its client cancelled or its deadline
// passed (answered CANCELLED / DEADLINE_EXCEEDED; InferObservation::dropped counts it).
//
// The batcher owns its queue and counts its "pulls" (the work that forms and runs batches on one
// of the version's lanes): at most one per instance is scheduled at a time, so with one instance
// a version's batches run one after another in queue order. A pull holds its lane while it waits
// for the delay.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "inference/model_config.pb.h"
#include "server/core/infer_task.h"

namespace kiln::server {

struct QueuePolicy {
  bool delay_on_timeout = false;  // timeout_action DELAY (else REJECT)
  uint64_t default_timeout_us = 0;
  bool allow_timeout_override = false;
  uint32_t max_queue_size = 0;  // 0 = no bound of its own (the server's still applies)
};

struct BatchingPolicy {
  int64_t max_batch_size = 0;  // 0: one request per execution
  uint64_t max_queue_delay_us = 0;
  std::vector<int64_t> preferred;  // ascending, each in [1, max_batch_size]
  bool preserve_ordering = false;
  uint32_t priority_levels = 1;
  uint32_t default_level = 1;
  std::vector<QueuePolicy> levels;  // [level - 1]

  // The policy of config.dynamic_batching. INVALID_ARGUMENT naming the field for a preferred
  // size outside [1, max_batch_size], a default level outside [1, priority_levels] or a
  // priority_queue_policy key outside it.
  static absl::StatusOr<BatchingPolicy> FromConfig(const inference::ModelConfig& config);
};

class DynamicBatcher {
 public:
  using Clock = std::chrono::steady_clock;
  // `max_pulls`: pulls that may run at once (the version's instance count: each pull holds one
  // instance's lane).
  explicit DynamicBatcher(BatchingPolicy policy, int max_pulls = 1)
      : policy_(std::move(policy)), max_pulls_(std::max(1, max_pulls)) {}

  const BatchingPolicy& policy() const { return policy_; }

  // The level of a request's `priority` parameter (0 = the default level). INVALID_ARGUMENT
  // naming parameters.priority when it exceeds priority_levels.
  absl::StatusOr<uint32_t> LevelOf(uint64_t priority) const;

  // Queues `*task` (admitted and validated; task->request.priority checked by LevelOf). Returns
  // true when the caller must schedule a pull (fewer than max_pulls were). UNAVAILABLE, with
  // `*task` left to the
  // caller, when the level's queue holds max_queue_size requests.
  absl::StatusOr<bool> Push(std::unique_ptr<InferTask>* task, Clock::time_point now);

  struct Step {
    std::vector<std::unique_ptr<InferTask>> batch;  // to run as one execution, in queue order
    int64_t rows = 0;                               // their batch dims summed
    // Requests to answer without running them: timed out (REJECT), cancelled, deadline passed.
    std::vector<std::pair<std::unique_ptr<InferTask>, absl::Status>> refused;
    // Nothing to run yet: the earliest time something changes (the delay ends, a timeout).
    std::optional<Clock::time_point> wake;
  };

  // One decision at `now` (`wall_now` for the requests' deadlines): drops and refuses what it
  // must, then forms a batch if one is ready by the policy. A step with an empty batch and no
  // `wake` means the queue is empty. Never blocks (for tests; the pull uses Next).
  Step TryNext(Clock::time_point now, absl::Time wall_now);

  // Blocks (waking on each Push) until a batch is ready, something must be refused, or the queue
  // is empty; `stop` (checked under the lock) sends what is queued at once.
  Step Next(const std::atomic<bool>& stop);

  // After a pull ran a batch: true when requests still wait (the caller schedules the next
  // pull), else the pull ends (its count is released) and false is returned.
  bool ContinueOrStop();

  int64_t queued() const;

 private:
  struct Entry {
    std::unique_ptr<InferTask> task;
    std::string signature;  // datatypes and non-batch shapes: only equal signatures merge
    int64_t rows = 1;
    Clock::time_point enqueued;
    std::optional<Clock::time_point> timeout_at;
  };
  struct Level {
    std::deque<Entry> waiting;
    std::deque<Entry> delayed;  // timed out under DELAY: after every waiting entry of the level
  };
  // Moves refused entries out and timed-out DELAY entries back; returns the earliest timeout.
  std::optional<Clock::time_point> ExpireLocked(Clock::time_point now, absl::Time wall_now,
                                                Step* step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EmptyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // TryNext under the lock; `flush` sends what is queued without waiting for the delay.
  Step TryNextLocked(Clock::time_point now, absl::Time wall_now, bool flush)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const BatchingPolicy policy_;
  mutable absl::Mutex mu_;
  absl::CondVar arrived_;
  std::vector<Level> levels_ ABSL_GUARDED_BY(mu_) = std::vector<Level>(policy_.levels.size());
  const int max_pulls_;
  int pulls_ ABSL_GUARDED_BY(mu_) = 0;  // scheduled or running
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kiln::server
