#include "server/core/graph_service.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/api/status.h"

namespace kiln::server {
namespace {

absl::Status NoEngine() { return absl::UnavailableError("no engine device is available"); }

}  // namespace

absl::StatusOr<api::RunResult> GraphService::RunPrepared(const api::PreparedGraph& graph,
                                                         absl::Span<const GraphTensorIn> inputs) {
  const api::GraphSpec& spec = graph.spec();
  std::vector<api::HostTensorView> views(spec.inputs.size());
  std::vector<bool> bound(spec.inputs.size(), false);
  // By name through a map: a request may bind 10^5 inputs (pairwise search was quadratic).
  absl::flat_hash_map<absl::string_view, size_t> index;
  for (size_t g = 0; g < spec.inputs.size(); ++g) index.emplace(spec.inputs[g].name, g);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const GraphTensorIn& t = inputs[i];
    auto found = index.find(t.name);
    const size_t g = found == index.end() ? spec.inputs.size() : found->second;
    if (g == spec.inputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[", i, "].name: '", t.name.substr(0, 256), "' is not an input of the graph"));
    }
    if (bound[g]) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs[", i, "].name: duplicate input '", t.name.substr(0, 256), "'"));
    }
    bound[g] = true;
    views[g] = api::HostTensorView{t.dtype, t.shape, t.raw};
  }
  for (size_t g = 0; g < bound.size(); ++g) {
    if (!bound[g]) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs: missing '", spec.inputs[g].name.substr(0, 256), "' (graph inputs[", g,
                       "])"));
    }
  }
  absl::StatusOr<api::RunResult> run = engine_->Run(graph, views);
  if (run.ok() && observer_ != nullptr) {
    observer_->ObserveKernels(run->kernels);
    EngineRunObservation o;
    o.compile_ns = run->compile_ns;
    o.kernels_compiled = run->kernels_compiled;
    o.device_memory = engine_->DeviceMemory();
    observer_->ObserveEngineRun(o);
  }
  return run;
}

absl::StatusOr<api::RunResult> GraphService::Execute(const api::GraphSpec& spec,
                                                     absl::Span<const GraphTensorIn> inputs) {
  if (engine_ == nullptr) return NoEngine();
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const api::PreparedGraph> graph, engine_->Prepare(spec));
  return RunPrepared(*graph, inputs);
}

absl::StatusOr<RegisteredGraphInfo> GraphService::Register(const api::GraphSpec& spec) {
  if (engine_ == nullptr) return NoEngine();
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const api::PreparedGraph> graph, engine_->Prepare(spec));
  RegisteredGraphInfo info;
  info.id = graph->key();
  {
    absl::MutexLock l(&mu_);
    auto it = registered_.find(info.id);
    if (it == registered_.end()) {
      if (registered_.size() >= kMaxRegisteredGraphs) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "graph: ", kMaxRegisteredGraphs, " graphs are registered (the limit)"));
      }
      registered_[info.id] = graph;
    } else {
      graph = it->second;
    }
  }
  bool all_static = true;
  for (const api::InputSpec& in : spec.inputs) {
    for (int64_t d : in.shape) all_static = all_static && d >= 0;
  }
  if (all_static && graph->runs() == 0) {
    absl::StatusOr<api::RunResult> warm = engine_->Warm(*graph);
    if (!warm.ok()) return warm.status();
    info.kernel_count = static_cast<uint32_t>(warm->kernels.size());
    info.kernels_compiled = static_cast<uint32_t>(warm->kernels_compiled);
  } else if (all_static) {
    info.kernel_count = static_cast<uint32_t>(graph->Kernels().size());
  }
  return info;
}

absl::StatusOr<api::RunResult> GraphService::ExecuteRegistered(
    const std::string& id, absl::Span<const GraphTensorIn> inputs) {
  if (engine_ == nullptr) return NoEngine();
  std::shared_ptr<const api::PreparedGraph> graph;
  {
    absl::MutexLock l(&mu_);
    auto it = registered_.find(id);
    if (it == registered_.end()) {
      return absl::NotFoundError(
          absl::StrCat("graph_id: no registered graph '", id.substr(0, 128), "'"));
    }
    graph = it->second;
  }
  return RunPrepared(*graph, inputs);
}

absl::StatusOr<std::vector<GraphService::KernelRow>> GraphService::Kernels(
    const std::string& id) const {
  std::vector<std::shared_ptr<const api::PreparedGraph>> graphs;
  {
    absl::MutexLock l(&mu_);
    if (id.empty()) {
      for (const auto& [k, g] : registered_) graphs.push_back(g);
    } else {
      auto it = registered_.find(id);
      if (it == registered_.end()) {
        return absl::NotFoundError(
            absl::StrCat("graph_id: no registered graph '", id.substr(0, 128), "'"));
      }
      graphs.push_back(it->second);
    }
  }
  std::vector<KernelRow> rows;
  for (const auto& g : graphs) {
    const uint64_t runs = g->runs();
    for (api::KernelStats& k : g->Kernels()) rows.push_back({std::move(k), runs});
  }
  return rows;
}

}  // namespace kiln::server
