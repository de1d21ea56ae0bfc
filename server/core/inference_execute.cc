// InferenceServer's execution of an admitted request: binding the request's tensors to the
// engine's inputs, the engine call (timed, observed) and the response. See inference_server.h.
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/api/onnx_model.h"
#include "server/core/datatype.h"
#include "server/core/inference_server.h"

namespace kiln::server {
namespace {

// The engine's output named `name` (the last one, as the engine never repeats a name), or null.
api::HostTensor* FindOutput(std::vector<api::HostTensor>& outputs, const std::string& name) {
  api::HostTensor* found = nullptr;
  for (api::HostTensor& t : outputs) {
    if (t.name == name) found = &t;
  }
  return found;
}

template <typename To, typename From>
std::string PackAs(absl::Span<const From> values) {
  std::string out(values.size() * sizeof(To), '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    const To v = static_cast<To>(values[i]);
    std::memcpy(out.data() + i * sizeof(To), &v, sizeof(To));
  }
  return out;
}

// The raw little-endian bytes of an input given in typed `contents` (element counts were checked
// by validation).
absl::StatusOr<std::string> PackTypedContents(const InferInput& in, inference::DataType type) {
  const TypedContents& c = in.typed;
  switch (type) {
    case inference::TYPE_BOOL: return PackAs<uint8_t>(c.bools);
    case inference::TYPE_UINT8: return PackAs<uint8_t>(c.uints);
    case inference::TYPE_UINT16: return PackAs<uint16_t>(c.uints);
    case inference::TYPE_UINT32: return PackAs<uint32_t>(c.uints);
    case inference::TYPE_UINT64: return PackAs<uint64_t>(c.uint64s);
    case inference::TYPE_INT8: return PackAs<int8_t>(c.ints);
    case inference::TYPE_INT16: return PackAs<int16_t>(c.ints);
    case inference::TYPE_INT32: return PackAs<int32_t>(c.ints);
    case inference::TYPE_INT64: return PackAs<int64_t>(c.int64s);
    case inference::TYPE_FP32: return PackAs<float>(c.fp32s);
    case inference::TYPE_FP64: return PackAs<double>(c.fp64s);
    default:
      return absl::InvalidArgumentError(absl::StrCat(std::string(DataTypeName(type)),
                                                     " has no typed contents (send raw_input_contents)"));
  }
}

}  // namespace

void InferenceServer::ObserveRun(Lane& lane, const std::string& model, const api::RunResult& run) {
  if (observer_ == nullptr) return;
  observer_->ObserveKernels(model, run.kernels);
  EngineRunObservation o;
  o.compile_ns = run.compile_ns;
  o.kernels_compiled = run.kernels_compiled;
  o.jit = !run.jit_event.empty();
  o.jit_hit = run.jit_hit;
  o.engine = lane.engine->stats();
  o.device = lane.device;
  const int64_t evictions = o.engine.jit_evictions;
  o.jit_evictions = std::max<int64_t>(0, evictions - lane.seen_jit_evictions.exchange(evictions));
  o.device_memory = lane.engine->DeviceMemory();
  observer_->ObserveEngineRun(o);
}

absl::StatusOr<api::RunResult> InferenceServer::TimedRun(
    Lane& lane, const std::function<absl::StatusOr<api::RunResult>()>& run_engine,
    ExecutionTimes* times, InferObservation* obs) {
  const auto infer_start = std::chrono::steady_clock::now();
  absl::StatusOr<api::RunResult> run = run_engine();
  if (!run.ok()) {
    obs->engine_failure = !absl::IsInvalidArgument(run.status());
    return run.status();
  }
  times->compute_infer_ns = NanosSince(infer_start);
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

absl::StatusOr<InferResponse> InferenceServer::ExecuteBuiltin(
    Lane& lane, const ModelVersion& version, const InferRequest& request,
    const ValidatedRequest& valid, const api::RunOptions& run_options, ExecutionTimes* times,
    InferObservation* obs) {
  const inference::ModelConfig& config = *version.config;
  const auto input_start = std::chrono::steady_clock::now();
  // An architecture takes exactly its one input; validation matched it against the config (FP32,
  // dims, batch, byte size). Load refuses `optional` inputs, and this holds whatever the config.
  if (request.inputs.size() != 1 || valid.inputs.size() != 1 || config.input_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs: model '", version.name, "' (platform kiln_builtin) takes exactly one input '",
        config.input_size() > 0 ? config.input(0).name() : std::string(), "', got ",
        request.inputs.size()));
  }
  const InferInput& in = request.inputs[0];
  api::HostTensorView view;
  view.dtype = "float32";
  view.shape.assign(in.shape.begin(), in.shape.end());
  std::string packed;
  if (request.raw_input_count > 0) {
    view.data = in.raw;
  } else {
    absl::StatusOr<std::string> bytes = PackTypedContents(in, config.input(0).data_type());
    if (!bytes.ok()) {
      return absl::Status(bytes.status().code(),
                          absl::StrCat("inputs[0].contents: ", bytes.status().message()));
    }
    packed = *std::move(bytes);
    view.data = packed;
  }
  times->compute_input_ns = NanosSince(input_start);

  absl::StatusOr<api::RunResult> run = TimedRun(
      lane, [&] { return lane.engine->RunBuiltin(*version.builtin, view, run_options); }, times, obs);
  if (!run.ok()) return run.status();
  if (observer_ != nullptr && run->jit_event != "replay") {
    // A plain run or a capture may have grown what the version holds (a new trace's buffers);
    // replays allocate nothing, so the hot path skips the walk.
    observer_->ObserveModelMemory({version.name, std::to_string(version.version), version.device,
                                   version.builtin->device_bytes()});
  }

  if (run->outputs.size() != 1) {
    return absl::InternalError(absl::StrCat("model '", version.name, "': the architecture returned ",
                                            run->outputs.size(), " outputs, not 1"));
  }
  const auto output_start = std::chrono::steady_clock::now();
  InferResponse response = ResponseFor(version, request);
  for (int index : valid.outputs) {
    InferOutput out;
    out.name = config.output(index).name();
    out.datatype = std::string(DataTypeName(config.output(index).data_type()));
    out.shape = run->outputs[0].shape;
    out.raw = run->outputs[0].data;
    response.outputs.push_back(std::move(out));
  }
  times->compute_output_ns = NanosSince(output_start);
  return response;
}

absl::StatusOr<InferResponse> InferenceServer::Execute(Lane& lane, const ModelVersion& version,
                                                       const InferRequest& request,
                                                       const ValidatedRequest& valid,
                                                       const api::RunOptions& run_options,
                                                       ExecutionTimes* times,
                                                       InferObservation* obs) {
  const inference::ModelConfig& config = *version.config;
  const api::PreparedGraph& graph = *version.graph;
  const api::GraphSpec& spec = graph.spec();

  const auto input_start = std::chrono::steady_clock::now();
  std::vector<api::HostTensorView> views(spec.inputs.size());
  std::vector<bool> bound(spec.inputs.size(), false);
  std::vector<std::string> packed;
  packed.reserve(request.inputs.size());  // no reallocation: views point into these strings
  absl::flat_hash_map<std::string_view, size_t> graph_index;  // graph input name -> position
  graph_index.reserve(spec.inputs.size());
  for (size_t g = 0; g < spec.inputs.size(); ++g) graph_index.emplace(spec.inputs[g].name, g);
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const InferInput& in = request.inputs[i];
    const auto& config_input = config.input(valid.inputs[i].config_index);
    auto found = graph_index.find(config_input.name());
    const size_t g = found == graph_index.end() ? spec.inputs.size() : found->second;
    if (g == spec.inputs.size() || bound[g]) {
      return absl::InternalError(absl::StrCat("inputs[", i, "]: ", config_input.name(),
                                              " is not an input of the model's graph"));
    }
    const std::string_view dtype = KilnDTypeName(config_input.data_type());
    if (dtype.empty()) {
      return absl::UnimplementedError(
          absl::StrCat("inputs[", i, "].datatype: ", std::string(DataTypeName(config_input.data_type())),
                       " tensors are not supported by platform kiln_graph"));
    }
    api::HostTensorView& view = views[g];
    view.dtype = std::string(dtype);
    view.shape.assign(in.shape.begin(), in.shape.end());
    if (request.raw_input_count > 0) {
      view.data = in.raw;
    } else {
      absl::StatusOr<std::string> bytes =
          PackTypedContents(in, config_input.data_type());
      if (!bytes.ok()) {
        return absl::Status(bytes.status().code(),
                            absl::StrCat("inputs[", i, "].contents: ", bytes.status().message()));
      }
      packed.push_back(*std::move(bytes));
      view.data = packed.back();
    }
    bound[g] = true;
  }
  for (size_t g = 0; g < bound.size(); ++g) {
    if (!bound[g]) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs: missing ", spec.inputs[g].name, " (an input of the graph)"));
    }
  }
  times->compute_input_ns = NanosSince(input_start);

  absl::StatusOr<api::RunResult> run = TimedRun(
      lane, [&] { return lane.engine->Run(graph, views, run_options); }, times, obs);
  if (!run.ok()) return run.status();

  const auto output_start = std::chrono::steady_clock::now();
  InferResponse response = ResponseFor(version, request);
  for (int index : valid.outputs) {
    const auto& config_output = config.output(index);
    api::HostTensor* found = FindOutput(run->outputs, config_output.name());
    if (found == nullptr) {
      return absl::InternalError(
          absl::StrCat("output ", config_output.name(), ": not produced by the model's graph"));
    }
    std::optional<inference::DataType> type = DataTypeFromKiln(found->dtype);
    if (!type.has_value() || *type != config_output.data_type()) {
      return absl::InternalError(absl::StrCat("output ", config_output.name(), ": the graph yields ",
                                              found->dtype, " but the config says ",
                                              std::string(DataTypeName(config_output.data_type()))));
    }
    InferOutput out;
    out.name = config_output.name();
    out.datatype = std::string(DataTypeName(config_output.data_type()));
    out.shape = std::move(found->shape);
    out.raw = std::move(found->data);
    response.outputs.push_back(std::move(out));
  }
  times->compute_output_ns = NanosSince(output_start);
  return response;
}

absl::StatusOr<InferResponse> InferenceServer::ExecuteOnnx(Lane& lane, const ModelVersion& version,
                                                           const InferRequest& request, const ValidatedRequest& valid,
                                                           const api::RunOptions& run_options,
                                                           ExecutionTimes* times, InferObservation* obs) {
  const inference::ModelConfig& config = *version.config;
  const auto input_start = std::chrono::steady_clock::now();
  std::vector<api::NamedHostTensorView> views;
  std::vector<std::string> packed;
  packed.reserve(request.inputs.size());  // views point into these strings
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const InferInput& in = request.inputs[i];
    const auto& config_input = config.input(valid.inputs[i].config_index);
    const std::string_view dtype = KilnDTypeName(config_input.data_type());
    if (dtype.empty()) {
      return absl::UnimplementedError(absl::StrCat("inputs[", i, "].datatype: ",
                                                   std::string(DataTypeName(config_input.data_type())),
                                                   " tensors are not supported for ONNX models"));
    }
    api::NamedHostTensorView v;
    v.name = config_input.name();
    v.view.dtype = std::string(dtype);
    v.view.shape.assign(in.shape.begin(), in.shape.end());
    if (request.raw_input_count > 0) {
      v.view.data = in.raw;
    } else {
      absl::StatusOr<std::string> bytes = PackTypedContents(in, config_input.data_type());
      if (!bytes.ok()) {
        return absl::Status(bytes.status().code(),
                            absl::StrCat("inputs[", i, "].contents: ", bytes.status().message()));
      }
      packed.push_back(*std::move(bytes));
      v.view.data = packed.back();
    }
    views.push_back(std::move(v));
  }
  times->compute_input_ns = NanosSince(input_start);
  absl::StatusOr<api::RunResult> run =
      TimedRun(lane, [&] { return lane.engine->RunOnnx(*version.onnx, views, run_options); }, times, obs);
  if (!run.ok()) return run.status();
  if (observer_ != nullptr && run->jit_event != "replay") {
    observer_->ObserveModelMemory({version.name, std::to_string(version.version), version.device,
                                   version.onnx->device_bytes()});
  }
  const auto output_start = std::chrono::steady_clock::now();
  InferResponse response = ResponseFor(version, request);
  for (int index : valid.outputs) {
    const auto& config_output = config.output(index);
    api::HostTensor* found = FindOutput(run->outputs, config_output.name());
    if (found == nullptr) {
      return absl::InternalError(absl::StrCat("output ", config_output.name(), ": not produced by model.onnx"));
    }
    InferOutput out;
    out.name = config_output.name();
    std::optional<inference::DataType> type = DataTypeFromKiln(found->dtype);
    out.datatype = std::string(DataTypeName(type.value_or(config_output.data_type())));
    out.shape = std::move(found->shape);
    out.raw = std::move(found->data);
    response.outputs.push_back(std::move(out));
  }
  times->compute_output_ns = NanosSince(output_start);
  return response;
}

}  // namespace kiln::server
