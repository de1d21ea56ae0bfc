// Engine::State: the engine facade's shared state, seen by engine.cc (graphs) and builtin.cc
// (builtin models). Internal to engine/api; never included outside it.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "engine/api/decode.h"
#include "engine/api/engine.h"
#include "engine/base/clock.h"
#include "engine/base/env.h"
#include "engine/base/lru_cache.h"
#include "engine/jit/trace_cache.h"
#include "engine/realize/kernel_log.h"
#include "engine/realize/realize.h"

namespace kiln::api {

// RunOptions -> the realize layer's RunControl; `host_bytes` (host copies of the outputs, already
// admitted by CheckRunAdmission) is taken off the schedule's memory limit.
RunControl ToRunControl(const RunOptions& options, int64_t host_bytes);
// The checks every run passes before it allocates: the outputs against max_output_bytes, inputs
// plus the outputs (on the device and in `output_copies` host copies) against max_memory_bytes,
// and the deadline / cancellation token. RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED / CANCELLED.
absl::Status CheckRunAdmission(const RunOptions& options, int64_t input_bytes, int64_t output_bytes);

// The VIZ scope of one run, on the calling thread while it lives: with options.viz it turns VIZ on
// (and TRACK_MATCH_STATS=2; realize hands both to its compile workers), and while VIZ is on it
// labels the compiles options.label, or `default_label` when that is "". Costs one knob read when
// neither applies. Destroy on the creating thread.
class RunVizScope {
 public:
  RunVizScope(const RunOptions& options, const std::string& default_label);
  RunVizScope(const RunVizScope&) = delete;
  RunVizScope& operator=(const RunVizScope&) = delete;

 private:
  std::optional<Context> knobs_;                // destroyed after label_
  std::optional<ScopedKernelLogLabel> label_;
};

using Clock = std::chrono::steady_clock;
using ::kiln::NanosSince;  // engine/base/clock.h

// Adds a realization's statistics to a RunResult: its launches (timed), compiles and schedules.
void AddRealizeStats(const RealizeStats& stats, RunResult* result);
// What a JIT capture or replay recorded besides its plan's kernels (AddPlanKernels): schedules and compiles.
void AddCaptureStats(const RealizeStats& stats, RunResult* result);
// Adds a JIT capture's or replay's launches (a plan's kernels; copies left out): timed where
// info.plan_seconds says so (one per plan call; < 0 = not timed), else untimed.
// `info` (a jit::TraceRunInfo) carries the names, the costs and, when timed, the per-call seconds
// and start times.
void AddPlanKernels(const jit::TraceRunInfo& info, const std::string& device, RunResult* result);
// A trace-cache failure's status: RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED / CANCELLED keep their code
// (the run was refused or stopped), anything else is INTERNAL; `what` prefixes the message.
absl::Status FromTraceRun(const absl::Status& st, std::string_view what);


// Per-graph kernel counters keep at most this many distinct kernels (a graph with run-time dims
// compiles one kernel per input shape); later ones are counted under kOtherKernels.
inline constexpr size_t kMaxKernelStatsPerGraph = 256;
inline constexpr const char* kOtherKernels = "(other kernels)";

struct PreparedGraph::Impl {
  std::string key;
  GraphSpec spec;
  DecodedGraph decoded;
  int64_t bytes = 0;  // estimated memory of this object (SpecBytes + DecodedBytes), for the cache bound
  std::string trace_key;  // the graph's model string in the engine's TraceCache ("graph/<id>/<key>")
  jit::TraceCache* traces = nullptr;  // erases trace_key's traces when the graph is destroyed
  // Counters, updated by Run through a const PreparedGraph.
  mutable absl::Mutex mu;
  mutable uint64_t runs ABSL_GUARDED_BY(mu) = 0;
  mutable uint64_t compiled ABSL_GUARDED_BY(mu) = 0;
  mutable std::map<std::pair<std::string, std::string>, KernelStats> kernels ABSL_GUARDED_BY(mu);
  // Input signatures (trace keys) the JIT could not capture: they run eagerly.
  mutable absl::flat_hash_set<std::string> eager ABSL_GUARDED_BY(mu);
  // Tensor::Rows refused the graph (it mixes the batch's rows): no symbolic batch dim (RunOptions::max_batch).
  mutable std::atomic<bool> rows_refused{false};
};

struct Engine::State {
  EngineOptions options;
  std::string device;
  absl::Mutex run_mu;  // one Run / RunBuiltin / RunOnnx at a time per Engine
  // This engine's realize context: its memo, loaded kernels and realize counters (realize.h). Every
  // run makes it current (ScopedRealizeContext) and records its statistics on it under run_mu.
  RealizeContext ctx;
  // Declared before `prepared`, so it outlives the prepared graphs, which erase their traces.
  jit::TraceCache traces{64};  // bounds set from options by Engine::Create
  mutable absl::Mutex mu;
  // Prepared graphs by key, bounded by options.prepared_cache_entries and
  // options.prepared_cache_bytes (PreparedGraph::Impl::bytes).
  LruCache<std::string, std::shared_ptr<const PreparedGraph>> prepared ABSL_GUARDED_BY(mu){256, 0};
  EngineStats stats ABSL_GUARDED_BY(mu);
  uint64_t next_model_id ABSL_GUARDED_BY(mu) = 0;  // numbers each model object's trace key

  // Counts a finished Run / RunBuiltin in `stats`.
  void RecordRun(const RunResult& result) ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock l(&mu);
    ++stats.runs;
    stats.kernels_compiled += result.kernels_compiled;
    stats.compile_ns += result.compile_ns;
  }
};

}  // namespace kiln::api
