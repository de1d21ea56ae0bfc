// ONNX models on the engine: see onnx_model.h.
#include "engine/api/onnx_model.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/api/decode.h"
#include "engine/api/engine_state.h"
#include "engine/api/guard.h"
#include "engine/api/symbolic_batch.h"
#include "engine/base/sha256.h"
#include "engine/base/status.h"
#include "engine/onnx/model.h"
#include "engine/onnx/runner.h"
#include "engine/realize/realize.h"
#include "engine/runtime/buffer.h"

namespace kiln::api {
namespace {


OnnxTensorInfo Info(const onnx::ValueInfo& vi) {
  OnnxTensorInfo t;
  t.name = vi.name;
  t.dtype = vi.onnx_type == 0 ? "" : WireDTypeName(vi.dtype);
  t.has_shape = vi.has_shape;
  t.dims = vi.dims;
  t.dim_params = vi.dim_params;
  return t;
}

OnnxSignature SignatureOf(const onnx::Model& m) {
  OnnxSignature s;
  for (const auto& vi : m.graph->inputs) s.inputs.push_back(Info(vi));
  for (const auto& vi : m.graph->outputs) s.outputs.push_back(Info(vi));
  return s;
}

// A device tensor for an output value (host values are uploaded so the JIT returns buffers).
absl::StatusOr<Tensor> OutputTensor(const onnx::Value& v, const std::string& device) {
  if (!v.is_tensor()) return absl::InvalidArgumentError("an output is not a tensor (sequences are not served)");
  if (v.has_tensor()) return v.tensor;
  if (v.host) {
    Tensor t = Tensor::FromHost(v.host->bytes.data(), v.host->dtype, v.host->shape, device);
    if (!t.ok()) return t.status();
    return t;
  }
  return absl::InternalError("an output has no value");
}

// Whether every input and output of the graph starts with one named symbolic dim (dim_param "N", "batch", ...): the
// batch of a symbolic batch dim (RunOptions::max_batch).
bool HasBatchParam(const OnnxSignature& s) {
  std::string param;
  for (const auto* list : {&s.inputs, &s.outputs}) {
    for (const OnnxTensorInfo& t : *list) {
      if (!t.has_shape || t.dims.empty() || t.dims[0] != -1 || t.dim_params.empty() || t.dim_params[0].empty())
        return false;
      if (param.empty()) param = t.dim_params[0];
      if (t.dim_params[0] != param) return false;
    }
  }
  return !param.empty();
}

// Whether the graph (or a subgraph) may read a tensor's first dim as a value: Size, or Shape from dim 0. Under a
// symbolic batch dim that value would be max_batch, not the batch size (a model that scales by its batch size would
// be wrong), so such graphs keep a trace per batch size. Conservative: a Shape feeding only a Reshape counts too.
bool ReadsDim0Size(const onnx::Graph& g) {
  for (const onnx::Node& n : g.nodes) {
    if (n.domain.empty() && n.op == "Size") return true;
    if (n.domain.empty() && n.op == "Shape") {
      const onnx::Attribute* start = n.Find("start");
      if (start == nullptr || start->i <= 0) return true;
    }
    for (const onnx::Attribute& a : n.attributes) {
      if (a.g != nullptr && ReadsDim0Size(*a.g)) return true;
      for (const std::shared_ptr<const onnx::Graph>& sub : a.graphs)
        if (sub != nullptr && ReadsDim0Size(*sub)) return true;
    }
  }
  return false;
}

}  // namespace

struct OnnxModel::Impl {
  std::shared_ptr<const onnx::Model> model;
  OnnxSignature signature;
  std::string device;
  std::string trace_key;  // "onnx/<id>"
  jit::TraceCache* traces = nullptr;
  onnx::WeightCache weights;
  jit::JitFunction fn;
  // The same with every input's rows bounded by kBatchVar (a symbolic batch dim, RunOptions::max_batch); used when
  // the graph's inputs and outputs share a symbolic first dim and no Shape/Size reads it (ReadsDim0Size), until
  // Tensor::Rows refuses the graph.
  jit::JitFunction fn_rows;
  bool batch_param = false;
  std::atomic<bool> rows_refused{false};
  // Set by RunOnnx (under the engine's run_mu) for the trace function: this call's host inputs.
  const std::vector<onnx::HostArrayPtr>* current = nullptr;
  absl::Mutex mu;
  std::vector<int> value_inputs ABSL_GUARDED_BY(mu);  // learned from traces: inputs whose values shape the graph
  bool eager ABSL_GUARDED_BY(mu) = false;             // the graph needs device reads: no JIT
  std::vector<int> last_value_inputs;                 // of the latest trace call
};

OnnxModel::OnnxModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OnnxModel::~OnnxModel() {
  if (impl_->traces != nullptr) impl_->traces->Erase(impl_->trace_key);
}
const OnnxSignature& OnnxModel::signature() const { return impl_->signature; }
const std::string& OnnxModel::device() const { return impl_->device; }

uint64_t OnnxModel::device_bytes() const {
  std::vector<const runtime::Buffer*> buffers;
  std::vector<Tensor> ts;
  impl_->weights.CollectTensors(&ts);
  runtime::BufferTable& table = runtime::BufferTable::Global();
  for (const Tensor& t : ts) {
    const UOp* u = t.uop().get();
    while (u != nullptr && IsMovement(u->op())) u = u->src(0).get();
    if (u == nullptr || u->op() != Op::BUFFER) continue;
    if (std::shared_ptr<runtime::Buffer> b = table.Lookup(u)) buffers.push_back(b.get());
  }
  if (impl_->traces != nullptr) impl_->traces->CollectBuffers(impl_->trace_key, &buffers);
  std::sort(buffers.begin(), buffers.end());
  buffers.erase(std::unique(buffers.begin(), buffers.end()), buffers.end());
  uint64_t bytes = 0;
  for (const runtime::Buffer* b : buffers) bytes += b->nbytes();
  return bytes;
}

absl::StatusOr<OnnxSignature> InspectOnnx(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const onnx::Model> m, onnx::LoadModel(path));
  return SignatureOf(*m);
}

absl::StatusOr<std::shared_ptr<const OnnxModel>> Engine::LoadOnnx(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const onnx::Model> m, onnx::LoadModel(path));
  auto impl = std::make_unique<OnnxModel::Impl>();
  impl->model = m;
  impl->signature = SignatureOf(*m);
  impl->device = state_->device;
  {
    absl::MutexLock l(&state_->mu);
    impl->trace_key = absl::StrCat("onnx/", state_->next_model_id++);
  }
  impl->traces = &state_->traces;
  impl->batch_param = HasBatchParam(impl->signature) && !ReadsDim0Size(*m->graph);
  OnnxModel::Impl* raw = impl.get();
  auto traced = [raw](const jit::JitArgs& args, bool rows) -> absl::StatusOr<std::vector<Tensor>> {
    const auto& g = *raw->model->graph;
    std::map<std::string, onnx::Value> feeds;
    for (size_t i = 0; i < g.inputs.size() && i < args.positional.size(); ++i) {
      Tensor x = args.positional[i];
      if (rows) {
        KILN_ASSIGN_OR_RETURN(UOpPtr batch, BindBatch(args, x.shape()[0]));
        x = x.Rows(batch);
      }
      onnx::Value v = onnx::Value::Of(x);
      if (raw->current != nullptr) v.host = (*raw->current)[i];
      feeds[g.inputs[i].name] = std::move(v);
    }
    onnx::RunOptions opts;
    opts.device = raw->device;
    opts.allow_device_reads = false;
    opts.weights = &raw->weights;
    KILN_ASSIGN_OR_RETURN(onnx::RunResult r, onnx::Run(*raw->model, feeds, opts));
    raw->last_value_inputs = r.value_inputs;
    std::vector<Tensor> outs;
    for (const onnx::Value& v : r.outputs) {
      KILN_ASSIGN_OR_RETURN(Tensor t, OutputTensor(v, raw->device));
      outs.push_back(std::move(t));
    }
    return outs;
  };
  impl->fn = [traced](const jit::JitArgs& args) { return traced(args, false); };
  impl->fn_rows = [traced](const jit::JitArgs& args) { return traced(args, true); };
  return std::make_shared<const OnnxModel>(std::move(impl));
}

absl::StatusOr<RunResult> Engine::RunOnnx(const OnnxModel& model, absl::Span<const NamedHostTensorView> inputs,
                                          const RunOptions& options) {
  return GuardEngineCall("Engine::RunOnnx", [&]() -> absl::StatusOr<RunResult> {
    return RunOnnxUnguarded(model, inputs, options);
  });
}

absl::StatusOr<RunResult> Engine::RunOnnxUnguarded(const OnnxModel& model,
                                                   absl::Span<const NamedHostTensorView> inputs,
                                                   const RunOptions& options) {
  const auto t0 = Clock::now();
  OnnxModel::Impl& m = model.impl();
  RunVizScope viz(options, m.trace_key);
  const auto& g = *m.model->graph;
  // Inputs in graph order, checked (dtype, byte size); onnx::Run checks ranks and declared dims.
  std::vector<onnx::HostArrayPtr> hosts(g.inputs.size());
  for (const NamedHostTensorView& in : inputs) {
    size_t i = 0;
    while (i < g.inputs.size() && g.inputs[i].name != in.name) ++i;
    if (i == g.inputs.size()) return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "': not an input of the model"));
    if (hosts[i]) return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "': given twice"));
    std::optional<DType> dt = ParseWireDType(in.view.dtype);
    if (!dt) return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "': unknown dtype ", in.view.dtype));
    onnx::HostArray a;
    a.dtype = *dt;
    for (int64_t d : in.view.shape) a.shape.push_back(d);
    absl::StatusOr<int64_t> n = onnx::CheckedNumel(a.shape, onnx::kMaxElements);
    if (!n.ok()) return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "': ", n.status().message()));
    if (static_cast<int64_t>(in.view.data.size()) != *n * dt->ItemSize()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "': ", in.view.data.size(),
                                                     " bytes, the shape needs ", *n * dt->ItemSize()));
    }
    a.bytes.assign(in.view.data.begin(), in.view.data.end());
    hosts[i] = std::make_shared<const onnx::HostArray>(std::move(a));
  }
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    if (!hosts[i]) return absl::InvalidArgumentError(absl::StrCat("input '", g.inputs[i].name, "' is missing"));
  }

  // The outputs' sizes are known only from the graph; the schedule's estimate bounds them (and
  // every intermediate) before anything runs, under the control set here.
  int64_t input_bytes = 0;
  for (const onnx::HostArrayPtr& h : hosts) input_bytes += static_cast<int64_t>(h->bytes.size());
  KILN_RETURN_IF_ERROR(CheckRunAdmission(options, input_bytes, 0));
  const RunControl control = ToRunControl(options, 0);

  RunResult result;
  std::vector<onnx::Value> values;  // eager outputs
  std::vector<Tensor> tensors;      // traced outputs
  {
    absl::MutexLock run_lock(&state_->run_mu);
    ScopedRunControl scope(control);
    ScopedRealizeContext ctx_scope(state_->ctx);
    state_->ctx.StartRecording();
    bool eager;
    std::vector<int> value_inputs;
    {
      absl::MutexLock l(&m.mu);
      eager = m.eager;
      value_inputs = m.value_inputs;
    }
    auto run_eager = [&]() -> absl::Status {
      std::map<std::string, onnx::Value> feeds;
      for (size_t i = 0; i < g.inputs.size(); ++i) {
        onnx::Value v;
        v.kind = onnx::Value::Kind::kTensor;
        v.host = hosts[i];
        feeds[g.inputs[i].name] = std::move(v);
      }
      onnx::RunOptions opts;
      opts.device = m.device;
      opts.weights = &m.weights;
      KILN_ASSIGN_OR_RETURN(onnx::RunResult r, onnx::Run(*m.model, feeds, opts));
      values = std::move(r.outputs);
      result.jit_event = "";
      return absl::OkStatus();
    };
    // A symbolic batch dim: every input's batch of n <= max_batch rows padded to max_batch rows, n a Variable.
    int64_t batch = -1;
    bool rows = !eager && options.max_batch > 1 && m.batch_param && !m.rows_refused.load() && value_inputs.empty();
    for (size_t i = 0; rows && i < hosts.size(); ++i) {
      const int64_t n = hosts[i]->shape.empty() ? -1 : hosts[i]->shape[0];
      rows = n >= 1 && n <= options.max_batch && (batch < 0 || n == batch);
      batch = n;
    }
    std::vector<onnx::HostArrayPtr> padded;
    if (rows) {
      for (const onnx::HostArrayPtr& h : hosts) {
        auto p = std::make_shared<onnx::HostArray>();
        p->dtype = h->dtype;
        p->shape = h->shape;
        p->shape[0] = options.max_batch;
        const size_t row_bytes = h->bytes.size() / static_cast<size_t>(batch);
        p->bytes.assign(row_bytes * static_cast<size_t>(options.max_batch), 0);
        std::copy(h->bytes.begin(), h->bytes.end(), p->bytes.begin());
        padded.push_back(std::move(p));
      }
    }
    if (eager) {
      KILN_RETURN_IF_ERROR(run_eager());
    } else {
      auto args_of = [&](const std::vector<onnx::HostArrayPtr>& in) -> absl::StatusOr<jit::JitArgs> {
        jit::JitArgs args;
        for (size_t i = 0; i < g.inputs.size(); ++i) {
          const onnx::HostArray& a = *in[i];
          Tensor t = Tensor::FromHost(a.bytes.data(), a.dtype, a.shape, m.device);
          if (!t.ok())
            return absl::InvalidArgumentError(absl::StrCat("input '", g.inputs[i].name, "': ", t.status().message()));
          args.positional.push_back(std::move(t));
        }
        if (&in == &padded) args.vars[kBatchVar] = batch;
        return args;
      };
      KILN_ASSIGN_OR_RETURN(jit::JitArgs args, args_of(rows ? padded : hosts));
      // Inputs whose values shape the graph key the trace by their contents.
      std::string key = m.trace_key;
      for (int vi : value_inputs) {
        const onnx::HostArray& a = *hosts[vi];
        absl::StrAppend(&key, "|v", vi, "=", DigestHex(Sha256Of(std::string_view(reinterpret_cast<const char*>(a.bytes.data()), a.bytes.size()))));
      }
      m.current = rows ? &padded : &hosts;
      jit::TraceRunInfo info;
      info.time_launches = options.time_kernels;
      absl::StatusOr<std::vector<Tensor>> out = state_->traces.Run(key, args, rows ? m.fn_rows : m.fn, &info);
      if (rows && !out.ok() && IsRowsRefusal(out.status())) {
        // The graph mixes the batch's rows: a trace per batch size from now on.
        m.rows_refused.store(true);
        rows = false;
        (void)state_->ctx.TakeRecording();
        state_->ctx.StartRecording();
        KILN_ASSIGN_OR_RETURN(args, args_of(hosts));
        m.current = &hosts;
        out = state_->traces.Run(key, args, m.fn, &info);
      }
      m.current = nullptr;
      if (!out.ok()) {
        const std::string msg(out.status().message());
        if (absl::IsInvalidArgument(out.status()) && msg.find("JIT trace cannot capture") == std::string::npos) {
          (void)state_->ctx.TakeRecording();
          return out.status();  // a model or input error
        }
        if (absl::IsDeadlineExceeded(out.status()) || absl::IsCancelled(out.status()) ||
            absl::IsResourceExhausted(out.status())) {
          (void)state_->ctx.TakeRecording();
          return out.status();  // refused or stopped between kernels: not a reason to run eagerly
        }
        // The graph cannot be traced (data-dependent shapes, nothing to capture): run eagerly from now on.
        state_->traces.Erase(key);
        {
          absl::MutexLock l(&m.mu);
          m.eager = true;
        }
        KILN_RETURN_IF_ERROR(run_eager());
      } else {
        if (!m.last_value_inputs.empty() && value_inputs != m.last_value_inputs) {
          // This trace baked in input values under a key without them: drop it; later runs key by the values.
          state_->traces.Erase(key);
          absl::MutexLock l(&m.mu);
          m.value_inputs = m.last_value_inputs;
        }
        tensors = *std::move(out);
        result.jit_hit = info.hit;
        result.jit_event = info.call == 0 ? "run" : info.call == 1 ? "capture" : "replay";
        if (info.call >= 1) AddPlanKernels(info, m.device, &result);
      }
    }
    const RealizeStats rec = state_->ctx.TakeRecording();
    if (result.jit_event == "run" || result.jit_event.empty()) {
      AddRealizeStats(rec, &result);
    } else {
      AddCaptureStats(rec, &result);
    }
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      HostTensor host;
      host.name = g.outputs[i].name;
      if (!values.empty()) {
        KILN_ASSIGN_OR_RETURN(onnx::HostArrayPtr h, onnx::ValueToHost(values[i]));
        host.dtype = WireDTypeName(h->dtype);
        host.shape.assign(h->shape.begin(), h->shape.end());
        host.data.assign(h->bytes.begin(), h->bytes.end());
      } else {
        const Tensor& t = tensors.at(i);
        host.dtype = WireDTypeName(t.dtype());
        host.shape.assign(t.shape().begin(), t.shape().end());
        host.data.resize(static_cast<size_t>(t.numel() * t.dtype().ItemSize()));
        if (rows && !host.shape.empty() && host.shape[0] == options.max_batch) {  // the batch's own rows
          host.data.resize(host.data.size() / static_cast<size_t>(options.max_batch) * static_cast<size_t>(batch));
          host.shape[0] = batch;
        }
        if (!host.data.empty()) {
          if (absl::Status st = t.CopyPrefixToHost(host.data.data(), host.data.size()); !st.ok()) {
            return absl::InternalError(absl::StrCat("output '", host.name, "': ", st.message()));
          }
        }
      }
      result.outputs.push_back(std::move(host));
    }
  }
  result.total_ns = NanosSince(t0);
  state_->RecordRun(result);
  return result;
}

}  // namespace kiln::api
