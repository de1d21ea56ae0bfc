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
//    The scope is how the limits reach Realize calls made inside the Tensor API and TinyJit (which take no
//    control argument); Realize(ctx, roots, control) takes it explicitly.
//  - Engine state: every Realize runs against a RealizeContext (below): the memo and the loaded-kernel cache are the
//    context's, and the statistics come back in the RealizeResult (no thread-local result passing).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/base/run_control.h"
#include "engine/realize/estimate.h"
#include "engine/uop/uop.h"

namespace kiln {

namespace codegen {
struct PassHooks;
}  // namespace codegen
class RewriteStats;

// One kernel launch of a Realize, in launch order (timed on the device: Launch(..., timed = true)).
struct KernelLaunch {
  std::string name;    // generated kernel name (E_..., r_...)
  std::string device;  // device name ("CPU", "INTERP", ...)
  double seconds = 0.0;
  bool compiled = false;  // this launch's kernel was lowered + compiled by this Realize (a cache miss)
  int64_t start_ns = 0;   // host steady clock (SteadyNowNs) just before the launch was issued
  int64_t flops = 0;      // codegen::Program estimates of the kernel (DEBUG=2's GFLOPS and GB/s)
  int64_t bytes = 0;
};

struct RealizeStats {
  int kernels = 0;        // kernels scheduled by this Realize
  int schedules = 0;      // CreateSchedule calls made (0: everything came from the memo, constants or inputs)
  double seconds = 0.0;   // wall time of this Realize
  int compiled = 0;       // kernels lowered + compiled (loaded-kernel cache misses) by this Realize
  double compile_seconds = 0.0;         // wall time of those lowerings + compiles
  std::vector<KernelLaunch> launches;   // every kernel launch of this Realize, in order
  WorkEstimate estimate;                // of this Realize's schedule (zero when nothing was scheduled)
};

// The loaded-kernel cache of a RealizeContext: an LRU (engine/base/lru_cache.h) bounded by entries and by bytes (an
// estimate: source, binary, program and a measured ~44 KiB of loaded code each). A kernel evicted while a JIT plan
// uses it stays loaded until the plan drops it. Defaults: 2048 entries, 128 MiB (SetDefaultKernelCacheLimits).
struct KernelCacheStats {
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;
  int64_t max_entries = 0;
  int64_t max_bytes = 0;
};

// Totals over every Realize (and every JIT plan build) made on one context.
struct RealizeCounters {
  int64_t realizes = 0;
  int64_t schedules = 0;          // CreateSchedule calls
  int64_t kernels_scheduled = 0;
  int64_t launches = 0;           // eager kernel launches (JIT replays launch through ExecPlan, not counted here)
  int64_t kernels_compiled = 0;   // loaded-kernel cache misses, JIT plan builds included
  double compile_seconds = 0.0;
};

// RealizeContext: the engine state one realization runs against (issue #18): the realized-result memo, the
// loaded-kernel cache and the statistics. api::Engine owns one per engine, so two engines share no memo, no loaded
// kernel and no counter. The plain Tensor API (and any code that names no context) uses Default(), a documented
// process-wide context; CurrentRealizeContext() routes Realize calls made inside the Tensor API and TinyJit (which
// take no context argument) to the innermost ScopedRealizeContext on the calling thread.
// What stays process-wide, by design: device buffers (runtime::BufferTable: memory belongs to interned BUFFER nodes,
// which every context shares), the compiled-binary cache (runtime::CompileCache, memory + disk, its own lock) and the
// device registry. Memo entries of every context are dropped when a JIT plan starts overwriting a buffer they read.
// Thread safety: every method is thread-safe; Realize calls on one context may run concurrently.
class RealizeContext {
 public:
  RealizeContext();  // kernel-cache bounds: the process defaults (SetDefaultKernelCacheLimits)
  ~RealizeContext();
  RealizeContext(const RealizeContext&) = delete;
  RealizeContext& operator=(const RealizeContext&) = delete;

  // The plain Tensor API's context (never destroyed).
  static RealizeContext& Default();

  KernelCacheStats kernel_cache_stats() const;
  // New bounds (>= 1 entry; bytes 0 = no byte bound); evicts at once down to them.
  void SetKernelCacheLimits(size_t max_entries, size_t max_bytes);
  RealizeCounters counters() const;
  // The stats of the most recent Realize that finished on this context (for tests and DEBUG; with concurrent
  // Realize calls on one context, whichever finished last).
  RealizeStats last_stats() const;
  // Recording: from StartRecording() until TakeRecording(), every Realize on this context adds its kernels,
  // schedules, launches and compiles (JIT plan builds included) to one RealizeStats. For a caller that serializes
  // its runs on the context (api::Engine) and runs code that realizes without returning stats (Tensor API, TinyJit).
  void StartRecording();
  RealizeStats TakeRecording();

  // The extension point of the lowering (issue #18): user rule tables before or after named stages
  // (codegen::PassHooks, engine/codegen/codegen.h) for every kernel this context lowers from now on. Setting
  // them empties this context's kernel cache, so no kernel lowered without them is reused. Null = none.
  void SetPassHooks(std::shared_ptr<const codegen::PassHooks> hooks);
  std::shared_ptr<const codegen::PassHooks> pass_hooks() const;
  // The named passes and rule hits of every kernel this context lowered (engine/rewrite/rewrite_stats.h).
  RewriteStats& rewrite_stats() const;

  struct Impl;  // realize.cc
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Bounds of the loaded-kernel cache of contexts created from now on, and of Default() (kilnd flags; call at start).
void SetDefaultKernelCacheLimits(size_t max_entries, size_t max_bytes);

// The context Realize(roots) uses on this thread: the innermost ScopedRealizeContext, else Default().
RealizeContext& CurrentRealizeContext();
// Makes `ctx` current on this thread for the scope's lifetime (an input scope, like ScopedRunControl: it routes the
// Tensor API's and TinyJit's Realize calls; results never travel through it). Destroy on the creating thread, in
// reverse order.
class ScopedRealizeContext {
 public:
  explicit ScopedRealizeContext(RealizeContext& ctx);
  ~ScopedRealizeContext();
  ScopedRealizeContext(const ScopedRealizeContext&) = delete;
  ScopedRealizeContext& operator=(const ScopedRealizeContext&) = delete;

 private:
  RealizeContext* prev_;
};

// What one Realize did: its verdict, its outputs (one per root, when ok) and its statistics (also when it failed or
// stopped: the launches that ran before the stop are in it).
struct RealizeResult {
  absl::Status status;
  std::vector<UOpPtr> outputs;
  RealizeStats stats;
};
// Realizes `roots` against `ctx` under `control`; the one entry point with an explicit context.
RealizeResult Realize(RealizeContext& ctx, absl::Span<const UOpPtr> roots, const RunControl& control);

absl::StatusOr<std::vector<UOpPtr>> Realize(absl::Span<const UOpPtr> roots);  // current context and control
// Realize under `control` (for this call and the Realize calls it makes), on the current context.
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
// CurrentRealizeContext().last_stats(): the most recent Realize on the current context (for tests and DEBUG).
RealizeStats LastRealizeStats();

// The current context's loaded-kernel cache (tests; kilnd uses SetDefaultKernelCacheLimits).
KernelCacheStats GetKernelCacheStats();
void SetKernelCacheLimits(size_t max_entries, size_t max_bytes);

// Creates a realized buffer on `device` holding a copy of `data` (numel(shape) * dtype.ItemSize() bytes). With
// `prefix_bytes` (<= that size), only the first prefix_bytes come from `data` and the rest is left unspecified (the
// rows past a symbolic batch's count).
absl::StatusOr<UOpPtr> FromHost(const void* data, DType dtype, const Shape& shape, const std::string& device = "CPU",
                                std::optional<size_t> prefix_bytes = std::nullopt);
// Marks the buffer under a realized value (a BUFFER node, or a movement view of one) constant
// (runtime::Buffer::MarkConstant): the caller promises nothing writes it again. InvalidArgument if it has no memory.
absl::Status MarkConstant(const UOpPtr& realized);
// Whether a value is a realized buffer (or a movement view of one) marked constant: false for anything else.
bool IsMarkedConstant(const UOpPtr& value);
// Copies a realized value (as returned by Realize/FromHost) to host memory; nbytes must match exactly, or with
// `prefix` be at most the value's size (its first nbytes).
absl::Status ToHost(const UOpPtr& realized, void* dst, size_t nbytes, bool prefix = false);

}  // namespace kiln
