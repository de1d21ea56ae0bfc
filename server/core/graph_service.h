// GraphService: the core of kiln.v1.Engine (proto/kiln/v1/engine.proto). Runs tensor graphs
// submitted as api::GraphSpec through the engine, and keeps registered graphs (decoded and
// compiled once) by id.
//
//   Execute           prepare (cached by graph key) + run once.
//   Register          prepare + a warm-up run on zeros when every input shape is static, so the
//                     kernels are compiled at registration; returns a stable id (graph key, plus
//                     "@<device>" off the default device). A graph whose warm-up fails (over a
//                     limit, say) is not registered.
//   ExecuteRegistered run a registered graph with new inputs.
//   Kernels           per-kernel counters of one registered graph or all of them.
// Devices: GraphCall::device ("" = the server's default device) is honoured: the graph runs on that
// device's engine, created on first use; an unknown or unusable device is INVALID_ARGUMENT naming
// the field, never silently replaced.
// Limits: every run obeys the RunPolicy (run_policy.h) with the call's deadline and cancellation:
// RESOURCE_EXHAUSTED before anything is allocated for a run over a limit, DEADLINE_EXCEEDED /
// CANCELLED between kernels.
// Inputs are matched to the graph's inputs by name (missing, unknown or duplicate names are
// INVALID_ARGUMENT naming inputs[i].name; matching is linear). NOT_FOUND for an unknown id;
// RESOURCE_EXHAUSTED when kMaxRegisteredGraphs graphs or kMaxRegisteredGraphBytes are registered;
// UNAVAILABLE without an engine. No
// exception escapes a method (guard.h).
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/api/engine.h"
#include "server/core/observer.h"
#include "server/core/run_policy.h"

namespace kiln::server {

inline constexpr size_t kMaxRegisteredGraphs = 1024;
inline constexpr int64_t kMaxRegisteredGraphBytes = int64_t{256} << 20;  // PreparedGraph::bytes over all

// One input tensor of a graph call; `raw` points into the transport's message.
struct GraphTensorIn {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string_view raw;
};

// What a transport knows about the call: the device asked for and the client's deadline and
// cancellation.
struct GraphCall {
  std::string device;  // "" = the default device
  absl::Time deadline = absl::InfiniteFuture();
  std::shared_ptr<const api::CancellationToken> cancellation;
  int64_t max_response_bytes = 0;  // the transport's cap on output bytes (0 = the server's)
};

struct RegisteredGraphInfo {
  std::string id;
  uint32_t kernel_count = 0;
  uint32_t kernels_compiled = 0;
};

class GraphService {
 public:
  // The engine of a (canonical) device, created on first use; errors name why it cannot run.
  using EngineFor = std::function<absl::StatusOr<api::Engine*>(const std::string& device)>;

  // `engine`: the default device's (may be null: UNAVAILABLE). `policy` (not owned; null = the
  // engine's defaults) and `engine_for` (null = only the default device) as above.
  explicit GraphService(api::Engine* engine, const RunPolicy* policy = nullptr,
                        EngineFor engine_for = nullptr)
      : engine_(engine), policy_(policy), engine_for_(std::move(engine_for)) {}
  // Kernel launches of every run are reported to `observer` (may be null). Call before serving.
  void SetObserver(InferObserver* observer) { observer_ = observer; }

  absl::StatusOr<api::RunResult> Execute(const api::GraphSpec& spec,
                                         absl::Span<const GraphTensorIn> inputs,
                                         const GraphCall& call = {});
  absl::StatusOr<RegisteredGraphInfo> Register(const api::GraphSpec& spec,
                                               const GraphCall& call = {});
  absl::StatusOr<api::RunResult> ExecuteRegistered(const std::string& id,
                                                   absl::Span<const GraphTensorIn> inputs,
                                                   const GraphCall& call = {});
  // id "" = every registered graph. Each entry carries the graph's run count in `runs`.
  struct KernelRow {
    api::KernelStats stats;
    uint64_t graph_runs = 0;
  };
  absl::StatusOr<std::vector<KernelRow>> Kernels(const std::string& id) const;

 private:
  struct Registered {
    std::shared_ptr<const api::PreparedGraph> graph;
    api::Engine* engine = nullptr;
  };
  // The engine for call.device (the default one for "").
  absl::StatusOr<api::Engine*> EngineOf(const GraphCall& call) const;
  api::RunOptions OptionsFor(const GraphCall& call) const;
  // RESOURCE_EXHAUSTED when registering `graph` would pass kMaxRegisteredGraphs or
  // kMaxRegisteredGraphBytes.
  absl::Status RoomFor(const api::PreparedGraph& graph) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<api::RunResult> RunPrepared(api::Engine& engine, const api::PreparedGraph& graph,
                                             absl::Span<const GraphTensorIn> inputs,
                                             const GraphCall& call);

  api::Engine* const engine_;
  const RunPolicy* const policy_;
  const EngineFor engine_for_;
  InferObserver* observer_ = nullptr;
  mutable absl::Mutex mu_;
  std::map<std::string, Registered> registered_ ABSL_GUARDED_BY(mu_);
  int64_t registered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kiln::server
