// GraphService: the core of kiln.v1.Engine (proto/kiln/v1/engine.proto). Runs tensor graphs
// submitted as api::GraphSpec through the engine, and keeps registered graphs (decoded and
// compiled once) by id.
//
//   Execute           prepare (cached by graph key) + run once.
//   Register          prepare + a warm-up run on zeros when every input shape is static, so the
//                     kernels are compiled at registration; returns a stable id (graph key).
//   ExecuteRegistered run a registered graph with new inputs.
//   Kernels           per-kernel counters of one registered graph or all of them.
// Inputs are matched to the graph's inputs by name (missing, unknown or duplicate names are
// INVALID_ARGUMENT naming inputs[i].name). NOT_FOUND for an unknown id; RESOURCE_EXHAUSTED when
// kMaxRegisteredGraphs are registered; UNAVAILABLE without an engine.
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/api/engine.h"
#include "server/core/observer.h"

namespace kiln::server {

inline constexpr size_t kMaxRegisteredGraphs = 1024;

// One input tensor of a graph call; `raw` points into the transport's message.
struct GraphTensorIn {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string_view raw;
};

struct RegisteredGraphInfo {
  std::string id;
  uint32_t kernel_count = 0;
  uint32_t kernels_compiled = 0;
};

class GraphService {
 public:
  explicit GraphService(api::Engine* engine) : engine_(engine) {}
  // Kernel launches of every run are reported to `observer` (may be null). Call before serving.
  void SetObserver(InferObserver* observer) { observer_ = observer; }

  absl::StatusOr<api::RunResult> Execute(const api::GraphSpec& spec,
                                         absl::Span<const GraphTensorIn> inputs);
  absl::StatusOr<RegisteredGraphInfo> Register(const api::GraphSpec& spec);
  absl::StatusOr<api::RunResult> ExecuteRegistered(const std::string& id,
                                                   absl::Span<const GraphTensorIn> inputs);
  // id "" = every registered graph. Each entry carries the graph's run count in `runs`.
  struct KernelRow {
    api::KernelStats stats;
    uint64_t graph_runs = 0;
  };
  absl::StatusOr<std::vector<KernelRow>> Kernels(const std::string& id) const;

 private:
  absl::StatusOr<api::RunResult> RunPrepared(const api::PreparedGraph& graph,
                                             absl::Span<const GraphTensorIn> inputs);

  api::Engine* const engine_;
  InferObserver* observer_ = nullptr;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const api::PreparedGraph>> registered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
