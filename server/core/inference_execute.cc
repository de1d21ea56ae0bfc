// InferenceServer's execution of an admitted request -- one path for every model kind: the
// version's api::Model (engine/api/model.h), the request's tensors bound to it
// (inference_binder.h), the engine call (timed, observed) and the response. See inference_server.h.
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/api/clock.h"
#include "engine/api/model.h"
#include "engine/api/status.h"
#include "server/core/inference_binder.h"
#include "server/core/model_config.h"
#include "server/core/inference_server.h"

namespace kiln::server {

absl::StatusOr<Profile> InferenceServer::CaptureProfile(const std::string& model, double seconds) {
  if (!model.empty()) KILN_RETURN_IF_ERROR(GetModelMetadata(model, "").status());
  return profiler_.Capture(model, seconds);
}

void InferenceServer::ObserveRun(DeviceLane& lane, const std::string& model, const api::RunResult& run) {
  if (observer_ == nullptr) return;
  observer_->ObserveKernels(model, run.kernels);
  EngineRunObservation o;
  o.model = model;
  o.compile_ns = run.compile_ns;
  o.kernels_compiled = run.kernels_compiled;
  o.jit = !run.jit_event.empty();
  o.jit_hit = run.jit_hit;
  o.engine = lane.engine().stats();
  o.device = lane.device();
  const int64_t evictions = o.engine.jit_evictions;
  o.jit_evictions = std::max<int64_t>(0, evictions - lane.seen_jit_evictions().exchange(evictions));
  o.device_memory = lane.engine().DeviceMemory();
  observer_->ObserveEngineRun(o);
}

absl::StatusOr<api::RunResult> InferenceServer::TimedRun(
    DeviceLane& lane, const std::function<absl::StatusOr<api::RunResult>()>& run_engine,
    ExecutionTimes* times, InferObservation* obs) {
  const int64_t start_ns = SteadyNowNs();
  const auto infer_start = std::chrono::steady_clock::now();
  absl::StatusOr<api::RunResult> run = run_engine();
  if (!run.ok()) {
    obs->engine_failure = !absl::IsInvalidArgument(run.status());
    return run.status();
  }
  times->compute_infer_ns = NanosSince(infer_start);
  if (profiler_.armed()) {
    profiler_.Record({obs->model, obs->version, lane.device(), lane.instance(), start_ns,
                      times->compute_infer_ns, run->jit_event, run->kernels});
  }
  ObserveRun(lane, obs->model, *run);
  return run;
}

InferResponse InferenceServer::ResponseFor(const ModelVersion& version, const InferRequest& request) {
  InferResponse response;
  response.model_name = version.name;
  response.model_version = std::to_string(version.version);
  response.id = request.id;
  return response;
}

void InferenceServer::ObserveModelGrowth(const ModelVersion& version, const api::Model& model,
                                         const api::RunResult& run) {
  // A plain run or a capture may have grown what the version holds (weights uploaded, a new
  // trace's buffers); replays allocate nothing, so the hot path skips the walk.
  if (observer_ == nullptr || model.kind() == "kiln_graph" || run.jit_event == "replay") return;
  observer_->ObserveModelMemory({version.name, std::to_string(version.version), version.device,
                                 model.device_bytes()});
}

std::shared_ptr<api::Model> InferenceServer::ModelFor(DeviceLane& lane, const ModelVersion& version) {
  const int instance = lane.instance();
  const ModelVersion::Instance* more =
      instance > 0 && static_cast<size_t>(instance) <= version.more_instances.size()
          ? &version.more_instances[static_cast<size_t>(instance - 1)]
          : nullptr;
  if (instance > 0 && more == nullptr && version.graph == nullptr) return nullptr;
  if (version.builtin != nullptr) {
    api::ModelIo io;
    if (version.config->output_size() > 0) io.output_name = version.config->output(0).name();
    return api::OpenBuiltinModel(lane.engine(), more != nullptr ? more->builtin : version.builtin, std::move(io));
  }
  if (version.onnx != nullptr) {
    return api::OpenOnnxModel(lane.engine(), more != nullptr ? more->onnx : version.onnx);
  }
  return api::OpenGraphModel(lane.engine(), version.graph);
}

absl::StatusOr<InferResponse> InferenceServer::Execute(DeviceLane& lane, const ModelVersion& version,
                                                       const InferRequest& request,
                                                       const ValidatedRequest& valid,
                                                       const api::RunOptions& run_options,
                                                       ExecutionTimes* times,
                                                       InferObservation* obs) {
  const inference::ModelConfig& config = *version.config;
  std::shared_ptr<api::Model> model = ModelFor(lane, version);
  if (model == nullptr) {
    return absl::InternalError(absl::StrCat("model '", version.name, "' has no engine model"));
  }
  const auto input_start = std::chrono::steady_clock::now();
  BoundInputs bound;
  KILN_RETURN_IF_ERROR(BindInputs(config, request, valid, model->kind(), &bound));
  times->compute_input_ns = NanosSince(input_start);

  api::RunOptions options = run_options;
  options.max_batch = SymbolicBatchRows(config);
  absl::StatusOr<api::RunResult> run =
      TimedRun(lane, [&] { return model->Run(bound.views, options); }, times, obs);
  if (!run.ok()) return run.status();
  ObserveModelGrowth(version, *model, *run);

  const auto output_start = std::chrono::steady_clock::now();
  InferResponse response = ResponseFor(version, request);
  KILN_RETURN_IF_ERROR(BindOutputs(config, valid, /*strict_dtypes=*/model->kind() == "kiln_graph", *run, &response));
  times->compute_output_ns = NanosSince(output_start);
  return response;
}

}  // namespace kiln::server
