// Builtin models: an engine/nn architecture with safetensors weights, run under the engine's JIT
// trace cache. See engine.h (Engine::LoadBuiltin, Engine::RunBuiltin, BuiltinModel).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/api/architectures.h"
#include "engine/api/engine.h"
#include "engine/api/engine_state.h"
#include "engine/api/guard.h"
#include "engine/api/symbolic_batch.h"
#include "engine/base/clock.h"
#include "engine/base/status.h"
#include "engine/nn/models.h"
#include "engine/nn/module.h"
#include "engine/nn/state/safetensors.h"
#include "engine/realize/realize.h"
#include "engine/runtime/buffer.h"

namespace kiln::api {
namespace {


std::string ShapeText(absl::Span<const int64_t> shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

// The Linear layer sizes of an MLP state dict: layers.<i>.weight (out, in) for ascending i, each
// `in` equal to the previous `out`. The sizes are [in_0, out_0, out_1, ...].
absl::StatusOr<std::vector<int64_t>> MlpSizes(const std::map<std::string, Tensor>& weights) {
  std::map<int64_t, const Tensor*> layers;
  for (const auto& [name, t] : weights) {
    if (name.rfind("layers.", 0) != 0) continue;
    const std::string rest = name.substr(7);
    const size_t dot = rest.find('.');
    int64_t index = 0;
    if (dot == std::string::npos || !absl::SimpleAtoi(rest.substr(0, dot), &index) || index < 0) {
      continue;
    }
    if (rest.substr(dot + 1) == "weight") layers[index] = &t;
  }
  if (layers.empty()) {
    return absl::InvalidArgumentError(
        "weights: an mlp needs layers.<i>.weight tensors (out_features, in_features)");
  }
  std::vector<int64_t> sizes;
  for (const auto& [index, t] : layers) {
    const Shape& s = t->shape();
    if (s.size() != 2 || s[0] <= 0 || s[1] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("weights: layers.", index,
                                                     ".weight has shape ", ShapeText(s),
                                                     ", expected (out_features, in_features)"));
    }
    if (sizes.empty()) {
      sizes.push_back(s[1]);
    } else if (sizes.back() != s[1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights: layers.", index, ".weight has in_features ", s[1],
                       " but the previous layer has out_features ", sizes.back()));
    }
    sizes.push_back(s[0]);
  }
  return sizes;
}

}  // namespace

struct BuiltinModel::Impl {
  std::string architecture;
  std::vector<int64_t> input_shape;
  std::vector<int64_t> output_shape;
  std::string dtype = "float32";
  int64_t num_parameters = 0;
  std::string device;
  std::string trace_key;  // unique per loaded model: "builtin/<id>/<architecture>"
  std::shared_ptr<nn::Module> module;
  jit::JitFunction fn;    // eval-mode forward; holds the module
  // The same over a symbolic batch (RunOptions::max_batch): its input's rows bounded by kBatchVar.
  jit::JitFunction fn_rows;
  mutable std::atomic<bool> rows_refused{false};  // Tensor::Rows refused the graph: a trace per batch size
  jit::TraceCache* traces = nullptr;
};

BuiltinModel::BuiltinModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BuiltinModel::~BuiltinModel() {
  if (impl_->traces != nullptr) impl_->traces->Erase(impl_->trace_key);
}
const std::string& BuiltinModel::architecture() const { return impl_->architecture; }
const std::vector<int64_t>& BuiltinModel::input_shape() const { return impl_->input_shape; }
const std::vector<int64_t>& BuiltinModel::output_shape() const { return impl_->output_shape; }
const std::string& BuiltinModel::dtype() const { return impl_->dtype; }
int64_t BuiltinModel::num_parameters() const { return impl_->num_parameters; }
const std::string& BuiltinModel::device() const { return impl_->device; }

uint64_t BuiltinModel::device_bytes() const {
  std::vector<const runtime::Buffer*> buffers;
  runtime::BufferTable& table = runtime::BufferTable::Global();
  for (const nn::NamedTensor& nt : nn::StateDict(*impl_->module)) {
    const UOp* u = nt.tensor->uop().get();
    while (u != nullptr && IsMovement(u->op())) u = u->src(0).get();
    if (u == nullptr || u->op() != Op::BUFFER) continue;  // not realized: holds no memory
    if (std::shared_ptr<runtime::Buffer> b = table.Lookup(u)) buffers.push_back(b.get());
  }
  if (impl_->traces != nullptr) impl_->traces->CollectBuffers(impl_->trace_key, &buffers);
  std::sort(buffers.begin(), buffers.end());
  buffers.erase(std::unique(buffers.begin(), buffers.end()), buffers.end());
  uint64_t bytes = 0;
  for (const runtime::Buffer* b : buffers) bytes += b->nbytes();
  return bytes;
}

std::vector<std::string> BuiltinArchitectures() { return ArchitectureNames(); }

absl::StatusOr<std::shared_ptr<const BuiltinModel>> Engine::LoadBuiltin(
    const std::string& architecture, const std::string& weights_path) {
  return GuardEngineCall("Engine::LoadBuiltin", [&]() -> absl::StatusOr<std::shared_ptr<const BuiltinModel>> {
    const Architecture* arch = FindArchitecture(architecture);
    if (arch == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("architecture: unknown '",
                                                     architecture.substr(0, 64), "' (known: ",
                                                     KnownArchitectures(), ")"));
    }
    absl::StatusOr<std::map<std::string, Tensor>> weights =
        nn::SafeLoad(weights_path, state_->device);
    if (!weights.ok()) {
      if (absl::IsNotFound(weights.status())) {
        return absl::NotFoundError("weights: model.safetensors is missing");
      }
      return absl::InvalidArgumentError(
          absl::StrCat("weights: ", std::string(weights.status().message())));
    }
    auto impl = std::make_unique<BuiltinModel::Impl>();
    impl->architecture = architecture;
    impl->device = state_->device;
    std::vector<int64_t> sizes = arch->default_sizes;
    if (arch->sized) {
      KILN_ASSIGN_OR_RETURN(sizes, MlpSizes(*weights));
    }
    std::shared_ptr<nn::Module> module = arch->Build(state_->device, sizes);
    impl->input_shape = arch->InputShape(sizes);
    impl->output_shape = {arch->NumClasses(sizes)};
    for (const auto& [name, t] : *weights) impl->num_parameters += t.numel();
    if (absl::Status st = nn::LoadStateDict(*module, *weights, /*strict=*/true); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("weights: ", st.message()));
    }
    // A served builtin model only reads its state (the module is its own; training jobs build theirs): marked
    // constant, the kernels that read only weights (a conv weight's channels-last copy) run once per JIT trace.
    // Nor do they take gradients (which keeps Tensor::Conv2d's Winograd form, for inference only, open to them).
    for (const nn::NamedTensor& nt : nn::StateDict(*module)) {
      (void)MarkConstant(nt.tensor->uop());
      nt.tensor->RequiresGrad(false);
    }
    impl->module = module;
    impl->fn = [module](const jit::JitArgs& args) -> absl::StatusOr<std::vector<Tensor>> {
      nn::TrainingScope eval(false);  // BatchNorm uses its running statistics
      Tensor y = module->Forward(args.positional.at(0));
      if (!y.ok()) return y.status();
      return std::vector<Tensor>{std::move(y)};
    };
    impl->fn_rows = [module](const jit::JitArgs& args) -> absl::StatusOr<std::vector<Tensor>> {
      nn::TrainingScope eval(false);
      const Tensor& x = args.positional.at(0);
      KILN_ASSIGN_OR_RETURN(UOpPtr batch, BindBatch(args, x.shape()[0]));
      Tensor y = module->Forward(x.Rows(batch));
      if (!y.ok()) return y.status();
      return std::vector<Tensor>{std::move(y)};
    };
    {
      absl::MutexLock l(&state_->mu);
      impl->trace_key = absl::StrCat("builtin/", state_->next_model_id++, "/", architecture);
    }
    impl->traces = &state_->traces;
    return std::make_shared<const BuiltinModel>(std::move(impl));
  });
}

absl::StatusOr<RunResult> Engine::RunBuiltin(const BuiltinModel& model, const HostTensorView& input,
                                             const RunOptions& options) {
  return GuardEngineCall("Engine::RunBuiltin", [&]() -> absl::StatusOr<RunResult> {
    const auto t0 = Clock::now();
    const BuiltinModel::Impl& m = model.impl();
    RunVizScope viz(options, m.trace_key);
    if (input.dtype != m.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("input: dtype ", input.dtype, ", the model needs ", m.dtype));
    }
    if (input.shape.size() != m.input_shape.size() + 1 ||
        !std::equal(m.input_shape.begin(), m.input_shape.end(), input.shape.begin() + 1) ||
        input.shape[0] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("input: shape ", ShapeText(input.shape),
                                                     ", the model needs (N, ",
                                                     absl::StrJoin(m.input_shape, ", "), ")"));
    }
    const int64_t batch = input.shape[0];
    int64_t in_numel = batch;
    for (int64_t d : m.input_shape) in_numel *= d;
    if (static_cast<int64_t>(input.data.size()) != in_numel * 4) {
      return absl::InvalidArgumentError(absl::StrCat("input: ", input.data.size(),
                                                     " bytes, the shape needs ", in_numel * 4));
    }
    int64_t out_numel = batch;
    for (int64_t d : m.output_shape) out_numel *= d;
    KILN_RETURN_IF_ERROR(CheckRunAdmission(options, in_numel * 4, out_numel * 4));
    int64_t host_bytes = 0;
    for (int c = 0; c < options.limits.output_copies; ++c) host_bytes += out_numel * 4;
    const RunControl control = ToRunControl(options, host_bytes);

    RunResult result;
    {
      absl::MutexLock run_lock(&state_->run_mu);
      ScopedRunControl scope(control);
      ScopedRealizeContext ctx_scope(state_->ctx);
      // A symbolic batch: the input padded to max_batch rows, the batch size a Variable (one trace for every size).
      const bool rows = options.max_batch > 1 && batch <= options.max_batch && !m.rows_refused.load();
      jit::TraceRunInfo info;
      info.time_launches = options.time_kernels;
      auto run = [&](bool symbolic) -> absl::StatusOr<std::vector<Tensor>> {
        jit::JitArgs args;
        Tensor x;
        if (symbolic) {
          std::vector<int64_t> shape = input.shape;
          shape[0] = options.max_batch;
          x = Tensor::FromHostPrefix(input.data.data(), input.data.size(), dtypes::kFloat32, shape, state_->device);
          args.vars[kBatchVar] = batch;
        } else {
          x = Tensor::FromHost(input.data.data(), dtypes::kFloat32, input.shape, state_->device);
        }
        if (!x.ok()) return absl::InternalError(absl::StrCat("input: ", x.status().message()));
        args.positional.push_back(std::move(x));
        return state_->traces.Run(m.trace_key, args, symbolic ? m.fn_rows : m.fn, &info);
      };
      state_->ctx.StartRecording();
      absl::StatusOr<std::vector<Tensor>> out = run(rows);
      if (rows && !out.ok() && IsRowsRefusal(out.status())) {
        m.rows_refused.store(true);
        (void)state_->ctx.TakeRecording();
        state_->ctx.StartRecording();
        out = run(false);
      }
      const RealizeStats rec = state_->ctx.TakeRecording();
      if (!out.ok()) return FromTraceRun(out.status(), "run: ");
      if (out->size() != 1) return absl::InternalError("run: the model returned no single output");
      result.jit_hit = info.hit;
      if (info.call == 0) {
        result.jit_event = "run";
        AddRealizeStats(rec, &result);
      } else {
        result.jit_event = info.call == 1 ? "capture" : "replay";
        AddCaptureStats(rec, &result);
        AddPlanKernels(info, state_->device, &result);
      }
      // After the recording: the copy may realize too.
      HostTensor host;
      host.name = "output";
      host.dtype = m.dtype;
      host.shape.push_back(batch);
      host.shape.insert(host.shape.end(), m.output_shape.begin(), m.output_shape.end());
      host.data.resize(static_cast<size_t>(out_numel) * 4);
      if (absl::Status st = (*out)[0].CopyPrefixToHost(host.data.data(), host.data.size()); !st.ok()) {
        return absl::InternalError(absl::StrCat("output: ", st.message()));
      }
      result.outputs.push_back(std::move(host));
    }
    result.total_ns = NanosSince(t0);
    state_->RecordRun(result);
    return result;
  });
}

}  // namespace kiln::api
