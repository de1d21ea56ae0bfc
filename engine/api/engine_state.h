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

inline constexpr size_t kTraceCacheEntries = 64;  // JIT traces kept (LRU) over every builtin model

struct Engine::State {
  EngineOptions options;
  std::string device;
  absl::Mutex run_mu;  // one Run / RunBuiltin at a time per Engine
  mutable absl::Mutex mu;
  std::list<std::pair<std::string, std::shared_ptr<const PreparedGraph>>> lru ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::string, decltype(lru)::iterator> index ABSL_GUARDED_BY(mu);
  EngineStats stats ABSL_GUARDED_BY(mu);
  jit::TraceCache traces{kTraceCacheEntries};
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
