// Engine::State: the engine facade's shared state, seen by engine.cc (graphs) and builtin.cc
// (builtin models). Internal to engine/api; never included outside it.
#pragma once

#include <list>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "engine/api/engine.h"
#include "engine/jit/trace_cache.h"

namespace kiln::api {

// RunOptions -> the realize layer's RunControl; `host_bytes` (host copies of the outputs, already
// admitted by CheckRunAdmission) is taken off the schedule's memory limit.
RunControl ToRunControl(const RunOptions& options, int64_t host_bytes);
// The checks every run passes before it allocates: the outputs against max_output_bytes, inputs
// plus the outputs (on the device and in `output_copies` host copies) against max_memory_bytes,
// and the deadline / cancellation token. RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED / CANCELLED.
absl::Status CheckRunAdmission(const RunOptions& options, int64_t input_bytes, int64_t output_bytes);


struct Engine::State {
  EngineOptions options;
  std::string device;
  absl::Mutex run_mu;  // one Run / RunBuiltin at a time per Engine
  mutable absl::Mutex mu;
  // Prepared graphs by key, most recent first, bounded by options.prepared_cache_entries and
  // options.prepared_cache_bytes (PreparedGraph::Impl::bytes).
  std::list<std::pair<std::string, std::shared_ptr<const PreparedGraph>>> lru ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::string, decltype(lru)::iterator> index ABSL_GUARDED_BY(mu);
  int64_t prepared_bytes ABSL_GUARDED_BY(mu) = 0;
  int64_t prepared_evictions ABSL_GUARDED_BY(mu) = 0;
  EngineStats stats ABSL_GUARDED_BY(mu);
  jit::TraceCache traces{64};  // bounds set from options by Engine::Create
  uint64_t next_builtin_id ABSL_GUARDED_BY(mu) = 0;

  // Counts a finished Run / RunBuiltin in `stats`.
  void RecordRun(const RunResult& result) ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock l(&mu);
    ++stats.runs;
    stats.kernels_compiled += result.kernels_compiled;
    stats.compile_ns += result.compile_ns;
  }
};

}  // namespace kiln::api
