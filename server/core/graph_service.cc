#include "server/core/graph_service.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/api/clock.h"
#include "engine/api/status.h"
#include "server/core/failpoint.h"
#include "server/core/guard.h"

namespace kiln::server {
namespace {

absl::Status NoEngine() { return absl::UnavailableError("no engine device is available"); }

}  // namespace

absl::StatusOr<api::Engine*> GraphService::EngineOf(const GraphCall& call) const {
  if (call.device.empty()) {
    if (engine_ == nullptr) return NoEngine();
    return engine_;
  }
  absl::StatusOr<std::string> canonical = api::CanonicalDeviceName(call.device);
  if (!canonical.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("device: '", call.device.substr(0, 64),
                                                   "' is not a device name (",
                                                   canonical.status().message(), ")"));
  }
  if (engine_ != nullptr && *canonical == engine_->device()) return engine_;
  if (engine_for_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device: '", *canonical, "' cannot run graphs here (only the default device ",
        engine_ == nullptr ? std::string("(none)") : engine_->device(), ")"));
  }
  absl::StatusOr<api::Engine*> engine = engine_for_(*canonical);
  if (!engine.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device: '", *canonical, "' cannot run graphs: ", engine.status().message()));
  }
  return engine;
}

absl::Status GraphService::RoomFor(const api::PreparedGraph& graph) const {
  if (registered_.size() >= kMaxRegisteredGraphs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("graph: ", kMaxRegisteredGraphs, " graphs are registered (the limit)"));
  }
  if (registered_bytes_ + graph.bytes() > kMaxRegisteredGraphBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "graph: the registered graphs hold an estimated ", registered_bytes_, " bytes; this one (",
        graph.bytes(), " bytes) would pass the limit of ", kMaxRegisteredGraphBytes, " bytes"));
  }
  return absl::OkStatus();
}

api::RunOptions GraphService::OptionsFor(const GraphCall& call) const {
  if (policy_ == nullptr) {
    api::RunOptions o;
    o.deadline = call.deadline;
    o.cancellation = call.cancellation;
    o.limits.max_output_bytes = call.max_response_bytes;
    return o;
  }
  return policy_->For(call.deadline, call.cancellation, call.max_response_bytes);
}

absl::StatusOr<api::RunResult> GraphService::RunPrepared(api::Engine& engine,
                                                         const api::PreparedGraph& graph,
                                                         absl::Span<const GraphTensorIn> inputs,
                                                         const GraphCall& call) {
  KILN_FAILPOINT("graph.execute");
  const api::GraphSpec& spec = graph.spec();
  absl::flat_hash_map<std::string_view, size_t> index;  // graph input name -> position
  index.reserve(spec.inputs.size());
  for (size_t g = 0; g < spec.inputs.size(); ++g) index.emplace(spec.inputs[g].name, g);
  std::vector<api::HostTensorView> views(spec.inputs.size());
  std::vector<bool> bound(spec.inputs.size(), false);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const GraphTensorIn& t = inputs[i];
    auto it = index.find(t.name);
    if (it == index.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[", i, "].name: '", t.name.substr(0, 256), "' is not an input of the graph"));
    }
    const size_t g = it->second;
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
  const int64_t start_ns = SteadyNowNs();
  absl::StatusOr<api::RunResult> run = engine.Run(graph, views, OptionsFor(call));
  if (run.ok() && policy_ != nullptr && policy_->profiler != nullptr && policy_->profiler->armed()) {
    policy_->profiler->Record({"", "", engine.device(), 0, start_ns,
                               static_cast<uint64_t>(SteadyNowNs() - start_ns), run->jit_event, run->kernels});
  }
  if (run.ok() && observer_ != nullptr) {
    observer_->ObserveKernels("", run->kernels);
    EngineRunObservation o;
    o.compile_ns = run->compile_ns;
    o.kernels_compiled = run->kernels_compiled;
    o.device_memory = engine.DeviceMemory();
    o.device = engine.device();
    o.engine = engine.stats();
    observer_->ObserveEngineRun(o);
  }
  return run;
}

absl::StatusOr<api::RunResult> GraphService::Execute(const api::GraphSpec& spec,
                                                     absl::Span<const GraphTensorIn> inputs,
                                                     const GraphCall& call) {
  return Guard("kiln.v1.Engine/Execute", [&]() -> absl::StatusOr<api::RunResult> {
    KILN_ASSIGN_OR_RETURN(api::Engine * engine, EngineOf(call));
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const api::PreparedGraph> graph, engine->Prepare(spec));
    return RunPrepared(*engine, *graph, inputs, call);
  });
}

absl::StatusOr<RegisteredGraphInfo> GraphService::Register(const api::GraphSpec& spec,
                                                           const GraphCall& call) {
  return Guard("kiln.v1.Engine/RegisterGraph", [&]() -> absl::StatusOr<RegisteredGraphInfo> {
    KILN_ASSIGN_OR_RETURN(api::Engine * engine, EngineOf(call));
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const api::PreparedGraph> graph, engine->Prepare(spec));
    RegisteredGraphInfo info;
    info.id = engine == engine_ ? graph->key() : absl::StrCat(graph->key(), "@", engine->device());
    {
      absl::MutexLock l(&mu_);
      auto it = registered_.find(info.id);
      if (it != registered_.end()) {
        graph = it->second.graph;
      } else if (absl::Status full = RoomFor(*graph); !full.ok()) {
        return full;
      }
    }
    bool all_static = true;
    for (const api::InputSpec& in : spec.inputs) {
      for (int64_t d : in.shape) all_static = all_static && d >= 0;
    }
    if (all_static && graph->runs() == 0) {
      // The warm-up obeys the same limits as any run; a graph that cannot warm up is not kept.
      absl::StatusOr<api::RunResult> warm = engine->Warm(*graph, OptionsFor(call));
      if (!warm.ok()) return warm.status();
      info.kernel_count = static_cast<uint32_t>(warm->kernels.size());
      info.kernels_compiled = static_cast<uint32_t>(warm->kernels_compiled);
    } else if (all_static) {
      info.kernel_count = static_cast<uint32_t>(graph->Kernels().size());
    }
    absl::MutexLock l(&mu_);
    if (!registered_.contains(info.id)) {
      KILN_RETURN_IF_ERROR(RoomFor(*graph));
      registered_[info.id] = Registered{graph, engine};
      registered_bytes_ += graph->bytes();
    }
    return info;
  });
}

absl::StatusOr<api::RunResult> GraphService::ExecuteRegistered(
    const std::string& id, absl::Span<const GraphTensorIn> inputs, const GraphCall& call) {
  return Guard("kiln.v1.Engine/ExecuteRegistered", [&]() -> absl::StatusOr<api::RunResult> {
    Registered r;
    {
      absl::MutexLock l(&mu_);
      auto it = registered_.find(id);
      if (it == registered_.end()) {
        return absl::NotFoundError(
            absl::StrCat("graph_id: no registered graph '", id.substr(0, 128), "'"));
      }
      r = it->second;
    }
    return RunPrepared(*r.engine, *r.graph, inputs, call);
  });
}

absl::StatusOr<std::vector<GraphService::KernelRow>> GraphService::Kernels(
    const std::string& id) const {
  return Guard("kiln.v1.Engine/ListKernels", [&]() -> absl::StatusOr<std::vector<KernelRow>> {
    std::vector<std::shared_ptr<const api::PreparedGraph>> graphs;
    {
      absl::MutexLock l(&mu_);
      if (id.empty()) {
        for (const auto& [k, g] : registered_) graphs.push_back(g.graph);
      } else {
        auto it = registered_.find(id);
        if (it == registered_.end()) {
          return absl::NotFoundError(
              absl::StrCat("graph_id: no registered graph '", id.substr(0, 128), "'"));
        }
        graphs.push_back(it->second.graph);
      }
    }
    std::vector<KernelRow> rows;
    for (const auto& g : graphs) {
      const uint64_t runs = g->runs();
      for (api::KernelStats& k : g->Kernels()) rows.push_back({std::move(k), runs});
    }
    return rows;
  });
}

}  // namespace kiln::server
