// Realization: tensor-level UOps in, device buffers out (schedule -> codegen -> render -> compile -> run).
//
// Contract with engine/tensor (see docs/kernel-ir.md §1):
//  - A realized value is a BUFFER node (element count n, shape (n,)) whose memory lives in the runtime BufferTable,
//    viewed through a RESHAPE to the value's shape (no RESHAPE for 1-D values).
//  - Realize() of a root that is already a realized view returns it unchanged and schedules 0 kernels; realizing the
//    same (interned) expression twice schedules 0 kernels the second time (results are memoized by node).
//  - Errors (compile failures, out of memory, unknown device) come back as Status; nothing aborts.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
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
};

absl::StatusOr<std::vector<UOpPtr>> Realize(absl::Span<const UOpPtr> roots);
// Stats of the most recent Realize() call on this thread (for tests and DEBUG).
const RealizeStats& LastRealizeStats();

// Creates a realized buffer on `device` holding a copy of `data` (numel(shape) * dtype.ItemSize() bytes).
absl::StatusOr<UOpPtr> FromHost(const void* data, DType dtype, const Shape& shape, const std::string& device = "CPU");
// Copies a realized value (as returned by Realize/FromHost) to host memory; nbytes must match exactly.
absl::Status ToHost(const UOpPtr& realized, void* dst, size_t nbytes);

}  // namespace kiln
