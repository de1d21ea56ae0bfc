// Engine::Run / Warm: a prepared graph's runs, through the engine's trace cache (engine.h).
#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/api/decode.h"
#include "engine/api/engine_state.h"
#include "engine/api/guard.h"
#include "engine/api/symbolic_batch.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/jit/trace_cache.h"
#include "engine/realize/realize.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/tensor.h"

namespace kiln::api {

namespace {

// Keeps an engine-level error's code when it is one a caller acts on; anything else from the
// realize layer is an engine failure (INTERNAL).
absl::Status FromRealize(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
      return absl::Status(st.code(), absl::StrCat("realize: ", st.message()));
    default:
      return absl::InternalError(absl::StrCat("realize: ", st.message()));
  }
}

int64_t SatAdd(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

}  // namespace

RunControl ToRunControl(const RunOptions& options, int64_t host_bytes) {  // engine_state.h
  RunControl c;
  c.deadline = options.deadline;
  c.cancellation = options.cancellation;
  c.memory_budget = options.memory_budget;
  c.limits.max_flops = options.limits.max_flops;
  c.limits.max_bytes_moved = options.limits.max_bytes_moved;
  c.limits.max_memory_bytes = options.limits.max_memory_bytes;
  if (c.limits.max_memory_bytes > 0) {
    // What the host copies take is not the schedule's to spend (checked by the caller first).
    c.limits.max_memory_bytes = std::max<int64_t>(1, c.limits.max_memory_bytes - host_bytes);
  }
  return c;
}

// engine_state.h
RunVizScope::RunVizScope(const RunOptions& options, const std::string& default_label) {
  if (options.viz && !KernelLog::Enabled()) {
    knobs_.emplace(std::initializer_list<std::pair<Knob, int64_t>>{{Knob::kViz, 1},
                                                                   {Knob::kTrackMatchStats, 2}});
  }
  if (knobs_.has_value() || KernelLog::Enabled()) {
    label_.emplace(options.label.empty() ? default_label : options.label);
  }
}

absl::Status CheckRunAdmission(const RunOptions& options, int64_t input_bytes, int64_t output_bytes) {  // engine_state.h
  const RunLimits& l = options.limits;
  if (l.max_output_bytes > 0 && output_bytes > l.max_output_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the outputs take ", output_bytes, " bytes, over the limit of ", l.max_output_bytes,
        " bytes per response (max_output_bytes); refused before allocation"));
  }
  const int64_t copies = std::max(0, l.output_copies);
  int64_t host = input_bytes;
  for (int64_t i = 0; i <= copies; ++i) host = SatAdd(host, output_bytes);  // device output + host copies
  if (l.max_memory_bytes > 0 && host > l.max_memory_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the run needs at least ", host, " bytes of memory (", input_bytes, " of inputs, ", output_bytes,
        " of outputs held ", copies + 1, " times), over the limit of ", l.max_memory_bytes,
        " bytes per run (max_memory_bytes); refused before allocation"));
  }
  RunControl now;
  now.deadline = options.deadline;
  now.cancellation = options.cancellation;
  absl::Status stopped = now.Check();
  if (!stopped.ok()) return absl::Status(stopped.code(), absl::StrCat(stopped.message(), " before it started"));
  return absl::OkStatus();
}

void AddRealizeStats(const RealizeStats& stats, RunResult* result) {  // engine_state.h
  for (const KernelLaunch& k : stats.launches) {
    result->kernels.push_back({k.name, k.device, static_cast<uint64_t>(k.seconds * 1e9), true, k.compiled,
                               k.start_ns, k.flops, k.bytes});
  }
  result->kernels_compiled += stats.compiled;
  result->compile_ns += static_cast<uint64_t>(stats.compile_seconds * 1e9);
  result->schedules += stats.schedules;
}

void AddCaptureStats(const RealizeStats& stats, RunResult* result) {  // engine_state.h
  result->kernels_compiled += stats.compiled;
  result->compile_ns += static_cast<uint64_t>(stats.compile_seconds * 1e9);
  result->schedules += stats.schedules;
}

void AddPlanKernels(const jit::TraceRunInfo& info, const std::string& device, RunResult* result) {  // engine_state.h
  const std::vector<double>& seconds = info.plan_seconds;
  for (size_t i = 0; i < info.plan_kernels.size(); ++i) {
    if (info.plan_kernels[i] == "copy") continue;
    if (i < info.plan_skipped.size() && info.plan_skipped[i]) continue;  // a constant call: not launched
    const bool timed = i < seconds.size() && seconds[i] >= 0;
    KernelTiming k{info.plan_kernels[i], device, timed ? static_cast<uint64_t>(seconds[i] * 1e9) : 0, timed};
    if (timed && i < info.plan_start_ns.size()) k.start_ns = info.plan_start_ns[i];
    if (i < info.plan_costs.size()) {
      k.flops = info.plan_costs[i].flops;
      k.bytes = info.plan_costs[i].bytes;
    }
    result->kernels.push_back(std::move(k));
  }
}

absl::Status FromTraceRun(const absl::Status& st, std::string_view what) {  // engine_state.h
  const absl::StatusCode code = st.code();
  const bool keep = code == absl::StatusCode::kResourceExhausted || code == absl::StatusCode::kDeadlineExceeded ||
                    code == absl::StatusCode::kCancelled;
  return absl::Status(keep ? code : absl::StatusCode::kInternal, absl::StrCat(absl::string_view(what.data(), what.size()), st.message()));
}

namespace {

// Signatures remembered as not capturable, per graph (a graph with run-time dims has one per shape).
constexpr size_t kMaxEagerSignatures = 1024;

bool Stopped(const absl::Status& st) {
  return absl::IsDeadlineExceeded(st) || absl::IsCancelled(st) || absl::IsResourceExhausted(st);
}

// Counts a run's launches in the graph's per-kernel counters (also for a run stopped midway).
void RecordGraphRun(const PreparedGraph::Impl& g, const RunResult& result, bool completed) {
  absl::MutexLock l(&g.mu);
  if (completed) {
    ++g.runs;
    g.compiled += result.kernels_compiled;
  }
  for (const KernelTiming& k : result.kernels) {
    std::pair<std::string, std::string> id{k.name, k.device};
    if (!g.kernels.contains(id) && g.kernels.size() >= kMaxKernelStatsPerGraph) id.first = kOtherKernels;
    KernelStats& ks = g.kernels[id];
    ks.graph_key = g.key;
    ks.name = id.first;
    ks.device = k.device;
    ks.launches += 1;
    ks.total_ns += k.duration_ns;
    ks.compiles += k.compiled ? 1 : 0;
  }
}

// Runs the graph's outputs over `bound` eagerly (no trace): Realize on the engine's context, then
// host copies; a non-contiguous output view is made contiguous first.
absl::Status RunGraphEager(Engine::State& state, const PreparedGraph::Impl& g, const std::vector<UOpPtr>& bound,
                           const RunControl& control, RunResult* result) {
  KILN_ASSIGN_OR_RETURN(std::vector<UOpPtr> roots, BuildOutputs(g.decoded, state.options.limits, bound));
  RealizeResult realized = Realize(state.ctx, roots, control);
  AddRealizeStats(realized.stats, result);
  if (!realized.status.ok()) return FromRealize(realized.status);
  for (size_t i = 0; i < roots.size(); ++i) {
    const DecodedOutput& o = g.decoded.outputs[i];
    UOpPtr v = realized.outputs[i];
    HostTensor out;
    out.name = o.name;
    out.dtype = WireDTypeName(v->dtype());
    out.shape.assign(v->shape().begin(), v->shape().end());
    out.data.resize(static_cast<size_t>(v->Numel()) * v->dtype().ItemSize());
    absl::Status st = ToHost(v, out.data.data(), out.data.size());
    if (absl::IsFailedPrecondition(st)) {  // a non-contiguous view (e.g. a PERMUTE of an input)
      KILN_ASSIGN_OR_RETURN(UOpPtr c, UOp::Create(Op::CONTIGUOUS, v->dtype(), {v}));
      RealizeResult again = Realize(state.ctx, {c}, control);
      AddRealizeStats(again.stats, result);
      if (!again.status.ok()) return FromRealize(again.status);
      st = ToHost(again.outputs[0], out.data.data(), out.data.size());
    }
    if (!st.ok()) return absl::InternalError(absl::StrCat("outputs[", i, "]: ", st.message()));
    result->outputs.push_back(std::move(out));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RunResult> Engine::Run(const PreparedGraph& graph, absl::Span<const HostTensorView> inputs,
                                      const RunOptions& options) {
  return GuardEngineCall("Engine::Run", [&]() -> absl::StatusOr<RunResult> {
    const auto t0 = Clock::now();
    const PreparedGraph::Impl& g = graph.impl();
    RunVizScope viz(options, absl::StrCat("graph ", g.key.substr(0, 12)));
    const GraphLimits& limits = state_->options.limits;
    KILN_RETURN_IF_ERROR(CheckInputs(g.decoded, limits, inputs));

    // Admission before any allocation: the outputs' shapes come from a build over placeholder
    // buffers of the given shapes (no memory), the inputs' bytes from the request.
    int64_t input_bytes = 0;
    for (const HostTensorView& in : inputs) input_bytes = SatAdd(input_bytes, static_cast<int64_t>(in.data.size()));
    std::vector<Shape> out_shapes = g.decoded.static_output_shapes;
    if (!g.decoded.all_static) {
      KILN_ASSIGN_OR_RETURN(out_shapes, OutputShapes(g.decoded, limits, inputs, state_->device));
    }
    int64_t output_bytes = 0;
    for (size_t i = 0; i < out_shapes.size(); ++i) {
      int64_t n = g.decoded.nodes[g.decoded.outputs[i].node].dtype.ItemSize();
      for (int64_t d : out_shapes[i]) n = d == 0 ? 0 : (n > std::numeric_limits<int64_t>::max() / d ? std::numeric_limits<int64_t>::max() : n * d);
      output_bytes = SatAdd(output_bytes, n);
    }
    KILN_RETURN_IF_ERROR(CheckRunAdmission(options, input_bytes, output_bytes));
    int64_t host_bytes = 0;
    for (int c = 0; c < options.limits.output_copies; ++c) host_bytes = SatAdd(host_bytes, output_bytes);
    const RunControl control = ToRunControl(options, host_bytes);

    RunResult result;
    absl::MutexLock run_lock(&state_->run_mu);
    ScopedRunControl control_scope(control);
    ScopedRealizeContext ctx_scope(state_->ctx);
    // A symbolic batch dim (RunOptions::max_batch): when every input's declared first dim is a run-time one (-1) and
    // they all carry the same n <= max_batch rows, the inputs are padded to max_batch rows and bounded to n
    // (Tensor::Rows), so one trace serves every n.
    // Named dims (GraphInput.dim_names): the first dims must be one name or unnamed.
    int64_t batch = -1;
    bool rows = options.max_batch > 1 && !inputs.empty() && !g.rows_refused.load() && GetKnob(Knob::kJit) != 0;
    std::string_view batch_name;
    for (size_t i = 0; rows && i < inputs.size(); ++i) {
      const DecodedInput& in = g.decoded.inputs[i];
      const std::vector<int64_t>& declared = in.shape;
      const int64_t n = inputs[i].shape.empty() ? -1 : inputs[i].shape[0];
      rows = !declared.empty() && declared[0] == -1 && n >= 1 && n <= options.max_batch && (batch < 0 || n == batch);
      batch = n;
      const std::string_view name = in.dim_names.empty() ? std::string_view() : std::string_view(in.dim_names[0]);
      if (!name.empty()) {
        rows = rows && (batch_name.empty() || batch_name == name);
        batch_name = name;
      }
    }
    jit::JitArgs args;
    std::vector<UOpPtr> bound;
    auto bind_inputs = [&](bool symbolic) -> absl::Status {
      args = jit::JitArgs{};
      bound.clear();
      for (size_t i = 0; i < inputs.size(); ++i) {
        const DecodedInput& in = g.decoded.inputs[i];
        Shape shape(inputs[i].shape.begin(), inputs[i].shape.end());
        std::optional<size_t> prefix;
        if (symbolic) {  // the batch's rows; the padding rows are not copied (unspecified)
          shape[0] = options.max_batch;
          prefix = inputs[i].data.size();
        }
        absl::StatusOr<UOpPtr> b = FromHost(inputs[i].data.data(), in.dtype, shape, state_->device, prefix);
        if (!b.ok()) return absl::InternalError(absl::StrCat("inputs[", i, "]: ", b.status().message()));
        bound.push_back(*b);
        args.positional.push_back(Tensor(*std::move(b), state_->device));
      }
      if (symbolic) args.vars[kBatchVar] = batch;
      return absl::OkStatus();
    };
    KILN_RETURN_IF_ERROR(bind_inputs(rows));
    // Every graph runs through the engine's trace cache, keyed by (graph, input signature): the first
    // call of a signature runs, the second captures, later ones replay the captured kernels with no
    // scheduling. A signature the JIT cannot capture (nothing to capture, an unsupported input) runs
    // eagerly from then on.
    absl::StatusOr<std::string> trace_key = jit::TraceCache::KeyOf(g.trace_key, args);
    bool eager = !trace_key.ok() || GetKnob(Knob::kJit) == 0;
    if (!eager) {
      absl::MutexLock l(&g.mu);
      eager = g.eager.contains(*trace_key);
    }
    if (eager && rows) {  // the eager path runs the plain inputs
      rows = false;
      KILN_RETURN_IF_ERROR(bind_inputs(false));
    }
    absl::Status st;
    if (!eager) {
      const DecodedGraph* decoded = &g.decoded;
      const GraphLimits* lim = &limits;
      const std::string device = state_->device;
      auto traced = [decoded, lim, device](const jit::JitArgs& a, bool symbolic) -> absl::StatusOr<std::vector<Tensor>> {
        std::vector<UOpPtr> in;
        for (const Tensor& t : a.positional) {
          if (!symbolic) {
            in.push_back(t.uop());
            continue;
          }
          KILN_ASSIGN_OR_RETURN(UOpPtr b, BindBatch(a, t.shape()[0]));
          Tensor r = t.Rows(b);
          KILN_RETURN_IF_ERROR(r.status());
          in.push_back(r.uop());
        }
        KILN_ASSIGN_OR_RETURN(std::vector<UOpPtr> roots, BuildOutputs(*decoded, *lim, in));
        std::vector<Tensor> out;
        // An output that is an input or a view of one is copied, so the trace returns its own buffers.
        for (UOpPtr& r : roots) {
          Tensor t(std::move(r), device);
          out.push_back(BufferOf(t.uop().get()) != nullptr ? t.Contiguous() : std::move(t));
        }
        return out;
      };
      jit::JitFunction fn = [traced](const jit::JitArgs& a) { return traced(a, false); };
      jit::JitFunction fn_rows = [traced](const jit::JitArgs& a) { return traced(a, true); };
      state_->ctx.StartRecording();
      jit::TraceRunInfo info;
      // A graph's replays are timed per kernel, as its eager runs are (per-kernel metrics of
      // kiln_graph models; a host clock on CPU). Builtin and ONNX replays stay untimed.
      info.time_launches = true;  // kernels inside device graphs (JIT=2, CUDA) stay untimed
      absl::StatusOr<std::vector<Tensor>> out = state_->traces.Run(g.trace_key, args, rows ? fn_rows : fn, &info);
      // Outputs of a bounded run carry the batch when their first dim is max_batch where the unpadded run's is n;
      // anything else (an output that is not row by row) runs again unbounded, as a graph Tensor::Rows refuses does.
      for (size_t i = 0; rows && out.ok() && i < out->size(); ++i) {
        const Shape& got = (*out)[i].shape();
        const Shape& want = out_shapes[i];
        if (got.empty() || want.empty() || got[0] != options.max_batch || want[0] != batch ||
            !std::equal(got.begin() + 1, got.end(), want.begin() + 1, want.end()))
          out = absl::InvalidArgumentError("outputs: not the batch's rows (Tensor::Rows)");
      }
      if (rows && !out.ok() && IsRowsRefusal(out.status())) {
        g.rows_refused.store(true);
        rows = false;
        state_->traces.Erase(g.trace_key);
        (void)state_->ctx.TakeRecording();
        state_->ctx.StartRecording();
        KILN_RETURN_IF_ERROR(bind_inputs(false));
        trace_key = jit::TraceCache::KeyOf(g.trace_key, args);
        if (!trace_key.ok()) return trace_key.status();
        out = state_->traces.Run(g.trace_key, args, fn, &info);
      }
      if (out.ok()) {
        result.jit_hit = info.hit;
        result.jit_event = info.call == 0 ? "run" : info.call == 1 ? "capture" : "replay";
        for (size_t i = 0; i < out->size() && st.ok(); ++i) {
          const Tensor& t = (*out)[i];
          HostTensor host;
          host.name = g.decoded.outputs[i].name;
          host.dtype = WireDTypeName(t.dtype());
          host.shape.assign(t.shape().begin(), t.shape().end());
          host.data.resize(static_cast<size_t>(t.numel() * t.dtype().ItemSize()));
          if (rows) {  // the batch's own rows
            host.data.resize(host.data.size() / static_cast<size_t>(options.max_batch) * static_cast<size_t>(batch));
            host.shape[0] = batch;
          }
          if (!host.data.empty()) st = t.CopyPrefixToHost(host.data.data(), host.data.size());
          if (!st.ok()) st = absl::InternalError(absl::StrCat("outputs[", i, "]: ", st.message()));
          result.outputs.push_back(std::move(host));
        }
      }
      const RealizeStats rec = state_->ctx.TakeRecording();
      if (out.ok()) {
        if (info.call == 0) {
          AddRealizeStats(rec, &result);
        } else {
          AddCaptureStats(rec, &result);
          AddPlanKernels(info, state_->device, &result);
        }
      } else if (Stopped(out.status())) {
        AddRealizeStats(rec, &result);
        RecordGraphRun(g, result, false);
        return FromTraceRun(out.status(), "realize: ");
      } else {
        // Not capturable here: drop the trace, run this signature eagerly from now on (an error of
        // the graph itself comes back from the eager run).
        state_->traces.EraseKey(*trace_key);  // a failed call leaves a trace that cannot capture
        {
          absl::MutexLock l(&g.mu);
          if (g.eager.size() < kMaxEagerSignatures) g.eager.insert(*trace_key);  // past it: tried again
        }
        eager = true;
        if (rows) {  // the eager path runs the plain inputs
          rows = false;
          KILN_RETURN_IF_ERROR(bind_inputs(false));
        }
      }
    }
    if (eager) {
      result = RunResult{};
      st = RunGraphEager(*state_, g, bound, control, &result);
      if (!st.ok()) {
        if (Stopped(st)) RecordGraphRun(g, result, false);
        return st;
      }
    }
    if (!st.ok()) return st;
    RecordGraphRun(g, result, true);
    result.total_ns = NanosSince(t0);
    state_->RecordRun(result);
    return result;
  });
}

absl::StatusOr<RunResult> Engine::Warm(const PreparedGraph& graph, const RunOptions& options) {
  return GuardEngineCall("Engine::Warm", [&]() -> absl::StatusOr<RunResult> {
    const DecodedGraph& d = graph.impl().decoded;
    if (!d.all_static) return absl::FailedPreconditionError("Warm: the graph has run-time (-1) dimensions");
    // The zero inputs are host memory too: the whole run is admitted before they are allocated
    // (the zeros on the host, their device copies, the outputs and their host copies).
    int64_t zero_bytes = 0;
    for (const DecodedInput& in : d.inputs) {
      int64_t n = in.dtype.ItemSize();
      for (int64_t x : in.shape) n *= x;  // bounded by DecodeGraph's element limit
      zero_bytes = SatAdd(zero_bytes, n);
    }
    int64_t output_bytes = 0;
    for (size_t i = 0; i < d.static_output_shapes.size(); ++i) {
      int64_t n = d.nodes[d.outputs[i].node].dtype.ItemSize();
      for (int64_t x : d.static_output_shapes[i]) n *= x;  // bounded by the element limit
      output_bytes = SatAdd(output_bytes, n);
    }
    RunOptions warm = options;
    if (warm.limits.max_memory_bytes > 0) {
      if (zero_bytes >= warm.limits.max_memory_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the warm-up's zero inputs take ", zero_bytes, " bytes, over the limit of ",
            warm.limits.max_memory_bytes, " bytes per run (max_memory_bytes); refused before allocation"));
      }
      warm.limits.max_memory_bytes -= zero_bytes;  // what the host zeros take
    }
    KILN_RETURN_IF_ERROR(CheckRunAdmission(warm, zero_bytes, output_bytes));
    std::vector<std::string> zeros;
    std::vector<HostTensorView> views;
    zeros.reserve(d.inputs.size());
    for (const DecodedInput& in : d.inputs) {
      int64_t n = 1;
      for (int64_t x : in.shape) n *= x;
      zeros.emplace_back(static_cast<size_t>(n) * in.dtype.ItemSize(), '\0');
    }
    for (size_t i = 0; i < d.inputs.size(); ++i) {
      views.push_back({WireDTypeName(d.inputs[i].dtype), d.inputs[i].shape, zeros[i]});
    }
    return Run(graph, views, warm);
  });
}


}  // namespace kiln::api
