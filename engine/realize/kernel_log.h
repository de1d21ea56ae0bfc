// KernelLog: the VIZ record of kernel compiles (issue #22), a bounded ring of the last N kernels
// this process lowered and compiled, each with what the viewer shows: its AST (the input of the
// lowering), the applied opts, the rendered source for its backend, the rewrite passes of its
// lowering (RewriteTrace passes of its group, engine/rewrite/trace.h) and its launches with timings.
//
// On only while the VIZ knob is > 0 on the calling thread (engine/base/env.h; VIZ=1 also turns the
// rewrite trace on through TRACK_MATCH_STATS=2; api::RunOptions::viz turns both on for one run).
// When off, the cost is a knob read (a thread-local) per kernel compile and per launch. A kernel's
// launches are logged while recording is on for the launching thread.
//
// Bounds: capacity() kernels (default 256; SetCapacity, kilnd --viz-kernels), the oldest dropped
// first; per kernel the last kMaxLoggedLaunches launches (launch_count counts them all). A kernel
// holds its AST node alive until it leaves the ring.
//
// Who records: realize_internal::GetKernel (a compile, under a ScopedTraceGroup of the new id),
// RunKernel (eager launches) and ExecPlan::Run (JIT replays; timed while VIZ is on). A kernel that a
// recording run launches without an entry in the ring (compiled while recording was off, or
// dropped since) gets one then, marked `reused` (realize_internal::LogIdForLaunch).
// A label naming what was being compiled (a model, a graph) comes from the innermost
// ScopedKernelLogLabel of the compiling thread (engine/api sets one per run).
// Thread safety: every method is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/uop/uop.h"

namespace kiln {

inline constexpr size_t kMaxLoggedLaunches = 64;

struct LoggedLaunch {
  int64_t start_ns = 0;  // host steady clock (SteadyNowNs) just before the launch
  double seconds = 0;    // < 0: untimed
};

// One kernel variant a BEAM search tried (engine/realize/beam.h), in the order it was built.
struct LoggedBeamCandidate {
  std::string opts;    // "heuristic (UPCAST 0 4, ...)", "no opts", or the explicit opts
  int round = 0;       // 0: the starting pair (heuristic, no opts); n: built in round n
  // timed: checked and timed; slow: timed once, over the per-candidate timeout (kSlowFactor times
  // the best so far, or BEAM_BUDGET), not run again; rejected: its outputs differed from the
  // no-opt kernel's; failed: it did not compile or run; not timed: the budget ran out first;
  // reference: the no-opt kernel's run that the others are checked against.
  std::string result;
  double seconds = -1;  // best measured run; < 0: none
};

// What BEAM did for a kernel (a search in this process, or a choice found in the cache).
struct LoggedBeam {
  int width = 0;               // 0: BEAM did not run for this kernel
  bool from_cache = false;     // the choice came from the kernel cache: no candidates here
  std::string choice;          // "heuristic" or the chosen opts
  int rounds = 0;
  double search_seconds = 0;
  double heuristic_seconds = 0;
  double best_seconds = 0;
  std::vector<LoggedBeamCandidate> candidates;
  int chosen = -1;             // index into candidates (-1: none, e.g. from the cache)
};

struct LoggedKernel {
  int64_t id = 0;           // > 0, increasing; also the RewriteTrace group of its lowering
  std::string name;         // E_..., r_...
  std::string device;
  std::string renderer;
  std::string label;        // ScopedKernelLogLabel at compile time ("" = none)
  int64_t compiled_unix_ms = 0;  // wall clock
  double compile_seconds = 0;    // lowering + compile (+ disk cache lookup); reused: the lowering for the record
  // Compiled before this record (while recording was off, or its entry was dropped) and launched by a recording run:
  // the AST was lowered again to record the passes; the source is the loaded code's.
  bool reused = false;
  UOpPtr ast;
  std::vector<std::string> applied_opts;
  LoggedBeam beam;
  std::string source;
  int64_t flops = 0;
  int64_t bytes = 0;
  int64_t launch_count = 0;
  std::deque<LoggedLaunch> launches;  // the last kMaxLoggedLaunches
};

class KernelLog {
 public:
  static KernelLog& Get();
  // Whether compiles are recorded now (the VIZ knob of the calling thread).
  static bool Enabled();

  // A new id for a compile about to start (its passes are grouped under it); 0 when disabled.
  int64_t Reserve();
  // Records the compile of id `k.id` (from Reserve).
  void RecordCompile(LoggedKernel k);
  // Records a launch of kernel `id` (ignored for 0 or a kernel no longer held).
  void RecordLaunch(int64_t id, int64_t start_ns, double seconds);

  std::vector<LoggedKernel> Kernels() const;  // oldest first
  bool Find(int64_t id, LoggedKernel* out) const;
  bool Holds(int64_t id) const;  // the ring still has kernel `id`
  int64_t dropped() const;
  size_t capacity() const;
  void SetCapacity(size_t kernels);  // >= 1
  void Clear();

 private:
  KernelLog() = default;
  mutable absl::Mutex mu_;
  std::deque<LoggedKernel> kernels_ ABSL_GUARDED_BY(mu_);
  size_t capacity_ ABSL_GUARDED_BY(mu_) = 256;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// Names what the calling thread compiles while it lives (KernelLog::label). An input scope;
// destroy on the creating thread, in reverse order.
class ScopedKernelLogLabel {
 public:
  explicit ScopedKernelLogLabel(std::string label);
  ~ScopedKernelLogLabel();
  ScopedKernelLogLabel(const ScopedKernelLogLabel&) = delete;
  ScopedKernelLogLabel& operator=(const ScopedKernelLogLabel&) = delete;
  // The innermost label of the calling thread ("" = none).
  static const std::string& Current();

 private:
  std::string previous_;
};

}  // namespace kiln
