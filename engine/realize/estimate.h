// Work and memory estimates of a schedule, computed from its kernel ASTs and buffers BEFORE
// anything is compiled, allocated or launched, and the checks that refuse a run over its limits
// (engine/base/run_control.h).
//
//   flops        per kernel: every value ALU op (index arithmetic and gates excluded) counts once per
//                iteration of the RANGEs it lies inside (a RANGE's size is the upper bound of its
//                end, so symbolic sizes count at their maximum); a REDUCE counts one op per
//                iteration of its input. Sums over kernels, saturating at INT64_MAX.
//   bytes_moved  per kernel: the bytes of every buffer it reads or writes, once each; a copy moves
//                its source and destination. Sums over items (a buffer used by three kernels moves
//                three times). A lower bound of the memory traffic (re-reads are not counted).
//   held_bytes   distinct buffers the schedule uses that already have memory (its inputs).
//   new_bytes    distinct buffers it allocates (outputs and intermediates after the scheduler's
//                buffer reuse).
//   peak_bytes   held_bytes + new_bytes: an upper bound of the device memory the run touches.
// The figures are estimates for admission, not measurements; DEBUG=2's per-kernel GFLOPS come from
// codegen::Program.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/base/run_control.h"
#include "engine/schedule/schedule.h"

namespace kiln {

struct WorkEstimate {
  int64_t flops = 0;
  int64_t bytes_moved = 0;
  int64_t held_bytes = 0;
  int64_t new_bytes = 0;
  int kernels = 0;
  int64_t peak_bytes() const;
  // Adds `other` (saturating): the estimate of two schedules run one after the other, buffers
  // counted in both (an upper bound).
  void Add(const WorkEstimate& other);
};

// The estimate of `items` (a schedule's, or a JIT capture's). Buffers count as held when the
// runtime's BufferTable has memory for them now.
WorkEstimate EstimateItems(absl::Span<const ScheduleItem> items, absl::Span<const UOpPtr> outputs = {});
inline WorkEstimate EstimateSchedule(const Schedule& s) { return EstimateItems(s.items, s.outputs); }

// The FLOPs of one kernel AST (SINK of END/STORE), as above.
int64_t EstimateKernelFlops(const UOpPtr& ast);

// RESOURCE_EXHAUSTED when the estimate is over a limit of `limits` (a limit <= 0 is no limit); the
// message names the estimate, the limit and the limit's field ("max_flops", "max_bytes_moved",
// "max_memory_bytes"). OK otherwise.
absl::Status CheckWork(const WorkEstimate& estimate, const WorkLimits& limits);

}  // namespace kiln
