// Realization: tensor-level UOps in, device buffers out (schedule -> codegen -> render -> compile -> run).
//
// Contract with engine/tensor (see docs/kernel-ir.md §1):
//  - A realized value is a BUFFER node (element count n, shape (n,)) whose memory lives in the runtime BufferTable,
//    viewed through a RESHAPE to the value's shape (no RESHAPE for 1-D values).
//  - Realize() of a root that is already a realized view returns it unchanged and schedules 0 kernels; realizing the
//    same (interned) expression twice schedules 0 kernels the second time (results are memoized by node).
//  - Errors (compile failures, out of memory, unknown device) come back as Status; nothing aborts.
//  - Bounded work: every Realize obeys a RunControl (engine/base/run_control.h): the one passed in, else the
//    innermost ScopedRunControl on this thread, else the library default (kDefaultMaxRun* limits, no deadline).
//    After scheduling and BEFORE compiling, allocating or launching anything, the schedule's estimate
//    (estimate.h) is checked against the limits (RESOURCE_EXHAUSTED naming the estimate and the limit) and its new
//    allocations are reserved in the control's MemoryBudget, if any (released when the Realize returns). The
//    deadline and the cancellation token are checked before every kernel or copy (DEADLINE_EXCEEDED / CANCELLED
//    naming how many of the schedule's items ran); a kernel in flight is never interrupted.
//    The scope is how the limits reach Realize calls made inside the Tensor API and TinyJit; issue #18's engine
//    context will carry it explicitly.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/base/run_control.h"
#include "engine/realize/estimate.h"
#include "engine/uop/uop.h"

namespace kiln {

// One kernel launch of a Realize, in launch order (timed on the device: Launch(..., timed = true)).
struct KernelLaunch {
  std::string name;    // generated kernel name (E_..., r_...)
  std::string device;  // device name ("CPU", "INTERP", ...)
  double seconds = 0.0;
  bool compiled = false;  // this launch's kernel was lowered + compiled by this Realize (a cache miss)
};

struct RealizeStats {
  int kernels = 0;        // kernels scheduled by the last Realize on this thread
  double seconds = 0.0;   // wall time of the last Realize
  int compiled = 0;       // kernels lowered + compiled (loaded-kernel cache misses) by the last Realize
  double compile_seconds = 0.0;         // wall time of those lowerings + compiles
  std::vector<KernelLaunch> launches;   // every kernel launch of the last Realize, in order
  WorkEstimate estimate;                // of the last Realize's schedule (zero when nothing was scheduled)
};

absl::StatusOr<std::vector<UOpPtr>> Realize(absl::Span<const UOpPtr> roots);
// Realize under `control` (for this call and the Realize calls it makes).
absl::StatusOr<std::vector<UOpPtr>> Realize(absl::Span<const UOpPtr> roots, const RunControl& control);

// The RunControl that Realize() and ExecPlan::Run() obey on this thread (see above).
const RunControl& CurrentRunControl();
// Makes `control` the current one on this thread for the scope's lifetime (`control` must outlive it). Scopes nest;
// destroy them on the creating thread in reverse order.
class ScopedRunControl {
 public:
  explicit ScopedRunControl(const RunControl& control);
  ~ScopedRunControl();
  ScopedRunControl(const ScopedRunControl&) = delete;
  ScopedRunControl& operator=(const ScopedRunControl&) = delete;

 private:
  const RunControl* prev_;
};
// Stats of the most recent Realize() call on this thread (for tests and DEBUG).
const RealizeStats& LastRealizeStats();

// The process-wide cache of loaded kernels (by device, kernel AST key and opt knobs): an LRU bounded by entries and
// by bytes (an estimate: source, binary, program and a measured ~44 KiB of loaded code each). A kernel evicted while a
// JIT plan uses it stays loaded until the plan drops it. Defaults: 2048 entries, 128 MiB.
struct KernelCacheStats {
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;
  int64_t max_entries = 0;
  int64_t max_bytes = 0;
};
KernelCacheStats GetKernelCacheStats();
// New bounds (>= 1 entry; bytes 0 = no byte bound); evicts at once down to them. Thread-safe.
void SetKernelCacheLimits(size_t max_entries, size_t max_bytes);

// Creates a realized buffer on `device` holding a copy of `data` (numel(shape) * dtype.ItemSize() bytes).
absl::StatusOr<UOpPtr> FromHost(const void* data, DType dtype, const Shape& shape, const std::string& device = "CPU");
// Copies a realized value (as returned by Realize/FromHost) to host memory; nbytes must match exactly.
absl::Status ToHost(const UOpPtr& realized, void* dst, size_t nbytes);

}  // namespace kiln
