// RunPolicy: the limits kilnd applies to every engine run it makes for a request (an Infer, a
// kiln.v1 Execute or ExecuteRegistered, a RegisterGraph warm-up), from its flags (README
// "Limits"), and how a request's deadline and cancellation become api::RunOptions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/api/engine.h"
#include "server/core/limits.h"
#include "server/core/profiler.h"

namespace kiln::server {

struct RunPolicy {
  api::RunLimits limits = DefaultLimits();
  // Every run's deadline is at most this far from its start (<= 0: only the client's deadline).
  int64_t max_run_seconds = kDefaultMaxRunSeconds;
  api::MemoryBudget* memory_budget = nullptr;  // process-wide (not owned); null = none
  // Kernel profiles (not owned; null = none): while one is armed every run times its launches,
  // and whoever makes the run hands them to profiler->Record.
  KernelProfiler* profiler = nullptr;

  static api::RunLimits DefaultLimits() {
    api::RunLimits l;
    l.max_flops = kDefaultMaxRunFlops;
    l.max_bytes_moved = kDefaultMaxRunBytesMoved;
    l.max_memory_bytes = kDefaultMaxRunMemoryBytes;
    l.max_output_bytes = kDefaultMaxResponseBytes;
    l.output_copies = 2;  // the engine's result and the transport's encoded response
    return l;
  }

  // The options of one run for a request whose client deadline is `deadline` (InfiniteFuture:
  // none), whose client may cancel through `cancellation` (may be null) and whose transport caps
  // the outputs at `max_response_bytes` (0: no cap of its own).
  api::RunOptions For(absl::Time deadline,
                      std::shared_ptr<const api::CancellationToken> cancellation,
                      int64_t max_response_bytes = 0) const {
    api::RunOptions o;
    o.limits = limits;
    if (o.limits.max_output_bytes <= 0 || o.limits.max_output_bytes > kMaxProtoResponseBytes) {
      o.limits.max_output_bytes = kMaxProtoResponseBytes;
    }
    if (max_response_bytes > 0) {
      o.limits.max_output_bytes = std::min(o.limits.max_output_bytes, max_response_bytes);
    }
    o.deadline = deadline;
    if (max_run_seconds > 0) o.deadline = std::min(deadline, absl::Now() + absl::Seconds(max_run_seconds));
    o.cancellation = std::move(cancellation);
    o.memory_budget = memory_budget;
    o.time_kernels = profiler != nullptr && profiler->armed();
    return o;
  }
};

}  // namespace kiln::server
