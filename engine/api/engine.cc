// Engine facade: GraphSpec decoding (decode.h) + realize + host copies. See engine.h.
#include "engine/api/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <list>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backends/register_all.h"
#include "engine/api/decode.h"
#include "engine/api/engine_state.h"
#include "engine/api/guard.h"
#include "engine/base/sha256.h"
#include "engine/base/clock.h"
#include "engine/base/status.h"
#include "engine/realize/realize.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/compile_cache.h"
#include "engine/runtime/device_pool.h"
#include "engine/runtime/registry.h"

namespace kiln::api {
namespace {

using Clock = std::chrono::steady_clock;

void AddField(Sha256& h, std::string_view s) {
  uint64_t n = s.size();
  h.Update(std::string_view(reinterpret_cast<const char*>(&n), sizeof(n)));
  h.Update(s);
}
void AddInt(Sha256& h, int64_t v) { h.Update(std::string_view(reinterpret_cast<const char*>(&v), sizeof(v))); }

}  // namespace

// ---- PreparedGraph ----

// Per-graph kernel counters keep at most this many distinct kernels (a graph with run-time dims
// compiles one kernel per input shape); later ones are counted under kOtherKernels.
constexpr size_t kMaxKernelStatsPerGraph = 256;
constexpr const char* kOtherKernels = "(other kernels)";

struct PreparedGraph::Impl {
  std::string key;
  GraphSpec spec;
  DecodedGraph decoded;
  int64_t bytes = 0;  // estimated memory of this object (SpecBytes + DecodedBytes), for the cache bound
  // Counters, updated by Run through a const PreparedGraph.
  mutable absl::Mutex mu;
  mutable uint64_t runs ABSL_GUARDED_BY(mu) = 0;
  mutable uint64_t compiled ABSL_GUARDED_BY(mu) = 0;
  mutable std::map<std::pair<std::string, std::string>, KernelStats> kernels ABSL_GUARDED_BY(mu);
};

PreparedGraph::PreparedGraph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PreparedGraph::~PreparedGraph() = default;
const std::string& PreparedGraph::key() const { return impl_->key; }
const GraphSpec& PreparedGraph::spec() const { return impl_->spec; }
int PreparedGraph::num_inputs() const { return static_cast<int>(impl_->spec.inputs.size()); }
int64_t PreparedGraph::bytes() const { return impl_->bytes; }
uint64_t PreparedGraph::runs() const {
  absl::MutexLock l(&impl_->mu);
  return impl_->runs;
}
uint64_t PreparedGraph::kernels_compiled() const {
  absl::MutexLock l(&impl_->mu);
  return impl_->compiled;
}
std::vector<KernelStats> PreparedGraph::Kernels() const {
  absl::MutexLock l(&impl_->mu);
  std::vector<KernelStats> out;
  for (const auto& [k, v] : impl_->kernels) out.push_back(v);
  return out;
}

std::string GraphKey(const GraphSpec& spec) {
  Sha256 h;
  AddField(h, "kiln.api.GraphSpec.v1");
  AddInt(h, static_cast<int64_t>(spec.inputs.size()));
  for (const InputSpec& in : spec.inputs) {
    AddField(h, in.name);
    AddField(h, in.dtype);
    AddInt(h, static_cast<int64_t>(in.shape.size()));
    for (int64_t d : in.shape) AddInt(h, d);
  }
  AddInt(h, static_cast<int64_t>(spec.nodes.size()));
  for (const NodeSpec& n : spec.nodes) {
    AddField(h, n.op);
    AddField(h, n.dtype);
    AddInt(h, static_cast<int64_t>(n.src.size()));
    for (uint32_t s : n.src) AddInt(h, s);
    const NodeArgSpec& a = n.arg;
    AddInt(h, static_cast<int64_t>(a.kind));
    switch (a.kind) {
      case NodeArgSpec::Kind::kNone: break;
      case NodeArgSpec::Kind::kInt: AddInt(h, a.int_value); break;
      case NodeArgSpec::Kind::kFloat: {
        int64_t bits;
        static_assert(sizeof(bits) == sizeof(a.float_value));
        std::memcpy(&bits, &a.float_value, sizeof(bits));
        AddInt(h, bits);
        break;
      }
      case NodeArgSpec::Kind::kBool: AddInt(h, a.bool_value); break;
      case NodeArgSpec::Kind::kString: AddField(h, a.string_value); break;
      case NodeArgSpec::Kind::kInts:
        AddInt(h, static_cast<int64_t>(a.ints.size()));
        for (int64_t v : a.ints) AddInt(h, v);
        break;
      case NodeArgSpec::Kind::kReduce:
        AddField(h, a.reduce_op);
        AddInt(h, static_cast<int64_t>(a.reduce_axes.size()));
        for (int64_t v : a.reduce_axes) AddInt(h, v);
        break;
    }
  }
  AddInt(h, static_cast<int64_t>(spec.outputs.size()));
  for (const OutputSpec& o : spec.outputs) {
    AddField(h, o.name);
    AddInt(h, o.node);
  }
  return DigestHex(h.Final());
}

// ---- Engine ----

Engine::Engine(std::unique_ptr<State> state) : state_(std::move(state)) {}
Engine::~Engine() = default;
const std::string& Engine::device() const { return state_->device; }
const GraphLimits& Engine::limits() const { return state_->options.limits; }

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(EngineOptions options) {
  backends::RegisterAllBackends();
  auto state = std::make_unique<State>();
  std::string device = options.device;
  if (device.empty()) {
    device = runtime::BackendRegistry::Global().HasKind("CPU") ? "CPU" : "INTERP";
  }
  absl::StatusOr<runtime::Device*> dev = runtime::GetDevice(device);
  if (!dev.ok()) {
    return absl::UnavailableError(absl::StrCat("device ", device, " is not available: ", dev.status().message()));
  }
  if (!(*dev)->executes()) {
    return absl::UnavailableError(absl::StrCat("device ", device, " does not execute kernels"));
  }
  state->device = (*dev)->name();
  state->traces.SetLimits(options.jit_cache_entries, options.jit_cache_bytes);
  state->options = std::move(options);
  return std::unique_ptr<Engine>(new Engine(std::move(state)));
}

EngineStats Engine::stats() const {
  EngineStats out;
  {
    absl::MutexLock l(&state_->mu);
    out = state_->stats;
  }
  {
    absl::MutexLock l(&state_->mu);
    out.prepared.entries = static_cast<int64_t>(state_->lru.size());
    out.prepared.bytes = state_->prepared_bytes;
    out.prepared.evictions = state_->prepared_evictions;
    out.prepared.hits = static_cast<int64_t>(state_->stats.prepare_hits);
    out.prepared.misses = static_cast<int64_t>(state_->stats.prepares);
  }
  out.prepared.max_entries = static_cast<int64_t>(state_->options.prepared_cache_entries);
  out.prepared.max_bytes = static_cast<int64_t>(state_->options.prepared_cache_bytes);
  const jit::TraceCacheStats jit = state_->traces.stats();
  out.jit_hits = jit.hits;
  out.jit_misses = jit.misses;
  out.jit_evictions = jit.evictions;
  out.jit_entries = jit.size;
  out.traces = {jit.size, jit.bytes, static_cast<int64_t>(state_->traces.capacity()), jit.max_bytes,
                jit.hits, jit.misses, jit.evictions};
  const KernelCacheStats k = GetKernelCacheStats();
  out.kernels = {k.entries, k.bytes, k.max_entries, k.max_bytes, k.hits, k.misses, k.evictions};
  const runtime::CompileCacheStats c = runtime::CompileCache::Global().stats();
  out.binaries.entries = c.memory_entries;
  out.binaries.bytes = c.memory_bytes;
  out.binaries.hits = c.memory_hits;
  out.binaries.misses = c.disk_hits + c.misses;
  out.binaries.evictions = c.memory_evictions;
  out.binaries.max_bytes = c.memory_max_bytes;
  return out;
}

void ConfigureProcessCaches(size_t kernel_entries, size_t kernel_bytes, size_t binary_bytes) {
  SetKernelCacheLimits(kernel_entries, kernel_bytes);
  runtime::CompileCache::Options o;
  o.memory_bytes = binary_bytes;
  runtime::CompileCache::ConfigureGlobal(o);
}

std::vector<DeviceMemoryUsage> Engine::DeviceMemory() const {
  absl::StatusOr<runtime::Device*> dev = runtime::GetDevice(state_->device);
  const size_t bytes = dev.ok() ? runtime::BufferTable::Global().bytes_on(*dev) : 0;
  return {{state_->device, static_cast<uint64_t>(bytes)}};
}

absl::StatusOr<std::shared_ptr<const PreparedGraph>> Engine::Prepare(const GraphSpec& spec) {
  return GuardEngineCall("Engine::Prepare", [&]() -> absl::StatusOr<std::shared_ptr<const PreparedGraph>> {
    const GraphLimits& limits = state_->options.limits;
    // Counts first: nothing per-node or per-name runs on a spec over a count limit.
    if (static_cast<int64_t>(spec.inputs.size()) > limits.max_inputs) {
      return absl::InvalidArgumentError(absl::StrCat("inputs: ", spec.inputs.size(),
                                                     " inputs exceed the limit ", limits.max_inputs));
    }
    if (static_cast<int64_t>(spec.outputs.size()) > limits.max_outputs) {
      return absl::InvalidArgumentError(absl::StrCat("outputs: ", spec.outputs.size(),
                                                     " outputs exceed the limit ", limits.max_outputs));
    }
    if (static_cast<int64_t>(spec.nodes.size()) > limits.max_nodes) {
      return absl::InvalidArgumentError(absl::StrCat("nodes: ", spec.nodes.size(),
                                                     " nodes exceed the limit ", limits.max_nodes));
    }
    std::string key = GraphKey(spec);
    {
      absl::MutexLock l(&state_->mu);
      auto it = state_->index.find(key);
      if (it != state_->index.end()) {
        state_->lru.splice(state_->lru.begin(), state_->lru, it->second);
        ++state_->stats.prepare_hits;
        return it->second->second;
      }
    }
    auto impl = std::make_unique<PreparedGraph::Impl>();
    impl->key = key;
    impl->spec = spec;
    KILN_ASSIGN_OR_RETURN(impl->decoded, DecodeGraph(spec, limits));
    if (impl->decoded.all_static) {
      // Build once through UOp::Create over placeholder buffers, so shape/dtype errors surface now
      // (and the output shapes are known for admission).
      KILN_RETURN_IF_ERROR(CheckBuild(impl->decoded, limits, state_->device));
    }
    impl->bytes = SpecBytes(impl->spec) + DecodedBytes(impl->decoded) + static_cast<int64_t>(key.size());
    auto prepared = std::make_shared<const PreparedGraph>(std::move(impl));
    absl::MutexLock l(&state_->mu);
    ++state_->stats.prepares;
    auto it = state_->index.find(key);
    if (it != state_->index.end()) return it->second->second;  // another thread won
    state_->lru.emplace_front(key, prepared);
    state_->index[key] = state_->lru.begin();
    state_->prepared_bytes += prepared->impl().bytes;
    const size_t max_entries = std::max<size_t>(1, state_->options.prepared_cache_entries);
    const int64_t max_bytes = static_cast<int64_t>(state_->options.prepared_cache_bytes);
    // The newest entry always stays (the caller holds it anyway).
    while (state_->lru.size() > 1 &&
           (state_->lru.size() > max_entries || (max_bytes > 0 && state_->prepared_bytes > max_bytes))) {
      state_->prepared_bytes -= state_->lru.back().second->impl().bytes;
      state_->index.erase(state_->lru.back().first);
      state_->lru.pop_back();
      ++state_->prepared_evictions;
    }
    return prepared;
  });
}

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

absl::StatusOr<RunResult> Engine::Run(const PreparedGraph& graph, absl::Span<const HostTensorView> inputs,
                                      const RunOptions& options) {
  return GuardEngineCall("Engine::Run", [&]() -> absl::StatusOr<RunResult> {
    const auto t0 = Clock::now();
    const PreparedGraph::Impl& g = graph.impl();
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
    ScopedRunControl scope(control);
    std::vector<KernelLaunch> all_launches;
    // Counts the launches of this run in the graph's counters (also for a run stopped midway).
    auto record = [&](bool completed) {
      absl::MutexLock l(&g.mu);
      if (completed) {
        ++g.runs;
        g.compiled += result.kernels_compiled;
      }
      for (const KernelLaunch& k : all_launches) {
        std::pair<std::string, std::string> id{k.name, k.device};
        if (!g.kernels.contains(id) && g.kernels.size() >= kMaxKernelStatsPerGraph) id.first = kOtherKernels;
        KernelStats& ks = g.kernels[id];
        ks.graph_key = g.key;
        ks.name = id.first;
        ks.device = k.device;
        ks.launches += 1;
        ks.total_ns += static_cast<uint64_t>(k.seconds * 1e9);
        ks.compiles += k.compiled ? 1 : 0;
      }
    };
    auto account = [&](const RealizeStats& st) {
      for (const KernelLaunch& k : st.launches) {
        result.kernels.push_back({k.name, k.device, static_cast<uint64_t>(k.seconds * 1e9)});
      }
      result.kernels_compiled += st.compiled;
      result.compile_ns += static_cast<uint64_t>(st.compile_seconds * 1e9);
      all_launches.insert(all_launches.end(), st.launches.begin(), st.launches.end());
    };
    auto stopped = [](const absl::Status& st) { return absl::IsDeadlineExceeded(st) || absl::IsCancelled(st); };

    std::vector<UOpPtr> bound;
    bound.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const DecodedInput& in = g.decoded.inputs[i];
      Shape shape(inputs[i].shape.begin(), inputs[i].shape.end());
      absl::StatusOr<UOpPtr> b = FromHost(inputs[i].data.data(), in.dtype, shape, state_->device);
      if (!b.ok()) return absl::InternalError(absl::StrCat("inputs[", i, "]: ", b.status().message()));
      bound.push_back(*std::move(b));
    }
    KILN_ASSIGN_OR_RETURN(std::vector<UOpPtr> roots, BuildOutputs(g.decoded, limits, bound));

    absl::StatusOr<std::vector<UOpPtr>> realized = Realize(roots);
    if (!realized.ok()) {
      if (stopped(realized.status())) {
        account(LastRealizeStats());
        record(false);
      }
      return FromRealize(realized.status());
    }
    account(LastRealizeStats());
    for (size_t i = 0; i < roots.size(); ++i) {
      const DecodedOutput& o = g.decoded.outputs[i];
      UOpPtr v = (*realized)[i];
      HostTensor out;
      out.name = o.name;
      out.dtype = WireDTypeName(v->dtype());
      out.shape.assign(v->shape().begin(), v->shape().end());
      out.data.resize(static_cast<size_t>(v->Numel()) * v->dtype().ItemSize());
      absl::Status st = ToHost(v, out.data.data(), out.data.size());
      if (absl::IsFailedPrecondition(st)) {  // a non-contiguous view (e.g. a PERMUTE of an input)
        KILN_ASSIGN_OR_RETURN(UOpPtr c, UOp::Create(Op::CONTIGUOUS, v->dtype(), {v}));
        absl::StatusOr<std::vector<UOpPtr>> again = Realize({c});
        if (!again.ok()) {
          if (stopped(again.status())) {
            account(LastRealizeStats());
            record(false);
          }
          return FromRealize(again.status());
        }
        account(LastRealizeStats());
        st = ToHost((*again)[0], out.data.data(), out.data.size());
      }
      if (!st.ok()) return absl::InternalError(absl::StrCat("outputs[", i, "]: ", st.message()));
      result.outputs.push_back(std::move(out));
    }
    record(true);
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

absl::StatusOr<std::string> CanonicalDeviceName(std::string_view spec) {
  absl::StatusOr<runtime::BackendRegistry::ParsedName> p =
      runtime::BackendRegistry::ParseName(spec);
  if (!p.ok()) return p.status();
  if (p->kind == "CPU" || p->kind == "INTERP" || p->kind == "NULL") {
    return p->index == 0 ? p->kind : p->canonical;
  }
  return absl::StrCat(p->kind, ":", p->index);
}

std::vector<std::string> ListDevices() {
  backends::RegisterAllBackends();
  return runtime::DevicePool::Discover()->devices();
}

}  // namespace kiln::api
