// Engine facade: GraphSpec decoding (decode.h) + realize + host copies. See engine.h.
#include "engine/api/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <list>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backends/register_all.h"
#include "engine/api/decode.h"
#include "engine/api/engine_state.h"
#include "engine/base/sha256.h"
#include "engine/base/status.h"
#include "engine/realize/realize.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/device_pool.h"
#include "engine/runtime/registry.h"

namespace kiln::api {
namespace {

using Clock = std::chrono::steady_clock;
uint64_t NanosSince(Clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

void AddField(Sha256& h, std::string_view s) {
  uint64_t n = s.size();
  h.Update(std::string_view(reinterpret_cast<const char*>(&n), sizeof(n)));
  h.Update(s);
}
void AddInt(Sha256& h, int64_t v) { h.Update(std::string_view(reinterpret_cast<const char*>(&v), sizeof(v))); }

}  // namespace

// ---- PreparedGraph ----

struct PreparedGraph::Impl {
  std::string key;
  GraphSpec spec;
  DecodedGraph decoded;
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
  state->options = std::move(options);
  return std::unique_ptr<Engine>(new Engine(std::move(state)));
}

EngineStats Engine::stats() const {
  EngineStats out;
  {
    absl::MutexLock l(&state_->mu);
    out = state_->stats;
  }
  const jit::TraceCacheStats jit = state_->traces.stats();
  out.jit_hits = jit.hits;
  out.jit_misses = jit.misses;
  out.jit_evictions = jit.evictions;
  out.jit_entries = jit.size;
  return out;
}

std::vector<DeviceMemoryUsage> Engine::DeviceMemory() const {
  absl::StatusOr<runtime::Device*> dev = runtime::GetDevice(state_->device);
  const size_t bytes = dev.ok() ? runtime::BufferTable::Global().bytes_on(*dev) : 0;
  return {{state_->device, static_cast<uint64_t>(bytes)}};
}

absl::StatusOr<std::shared_ptr<const PreparedGraph>> Engine::Prepare(const GraphSpec& spec) {
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
  KILN_ASSIGN_OR_RETURN(impl->decoded, DecodeGraph(spec, state_->options.limits));
  if (impl->decoded.all_static) {
    // Build once through UOp::Create over placeholder buffers, so shape/dtype errors surface now.
    KILN_RETURN_IF_ERROR(CheckBuild(impl->decoded, state_->options.limits, state_->device));
  }
  auto prepared = std::make_shared<const PreparedGraph>(std::move(impl));
  absl::MutexLock l(&state_->mu);
  ++state_->stats.prepares;
  auto it = state_->index.find(key);
  if (it != state_->index.end()) return it->second->second;  // another thread won
  state_->lru.emplace_front(key, prepared);
  state_->index[key] = state_->lru.begin();
  while (state_->lru.size() > std::max<size_t>(1, state_->options.prepared_cache_entries)) {
    state_->index.erase(state_->lru.back().first);
    state_->lru.pop_back();
  }
  return prepared;
}

absl::StatusOr<RunResult> Engine::Run(const PreparedGraph& graph, absl::Span<const HostTensorView> inputs) {
  const auto t0 = Clock::now();
  const PreparedGraph::Impl& g = graph.impl();
  const GraphLimits& limits = state_->options.limits;
  KILN_RETURN_IF_ERROR(CheckInputs(g.decoded, limits, inputs));

  RunResult result;
  {
    absl::MutexLock run_lock(&state_->run_mu);
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

    auto account = [&](const RealizeStats& st) {
      for (const KernelLaunch& k : st.launches) {
        result.kernels.push_back({k.name, k.device, static_cast<uint64_t>(k.seconds * 1e9)});
      }
      result.kernels_compiled += st.compiled;
      result.compile_ns += static_cast<uint64_t>(st.compile_seconds * 1e9);
    };
    absl::StatusOr<std::vector<UOpPtr>> realized = Realize(roots);
    if (!realized.ok()) {
      return absl::Status(absl::IsInvalidArgument(realized.status()) ? absl::StatusCode::kInvalidArgument
                                                                     : absl::StatusCode::kInternal,
                          absl::StrCat("realize: ", realized.status().message()));
    }
    account(LastRealizeStats());
    std::vector<KernelLaunch> all_launches = LastRealizeStats().launches;
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
        if (!again.ok()) return absl::InternalError(absl::StrCat("realize: ", again.status().message()));
        account(LastRealizeStats());
        all_launches.insert(all_launches.end(), LastRealizeStats().launches.begin(),
                            LastRealizeStats().launches.end());
        st = ToHost((*again)[0], out.data.data(), out.data.size());
      }
      if (!st.ok()) return absl::InternalError(absl::StrCat("outputs[", i, "]: ", st.message()));
      result.outputs.push_back(std::move(out));
    }
    absl::MutexLock l(&g.mu);
    ++g.runs;
    g.compiled += result.kernels_compiled;
    for (const KernelLaunch& k : all_launches) {
      KernelStats& ks = g.kernels[{k.name, k.device}];
      ks.graph_key = g.key;
      ks.name = k.name;
      ks.device = k.device;
      ks.launches += 1;
      ks.total_ns += static_cast<uint64_t>(k.seconds * 1e9);
      ks.compiles += k.compiled ? 1 : 0;
    }
  }
  result.total_ns = NanosSince(t0);
  state_->RecordRun(result);
  return result;
}

absl::StatusOr<RunResult> Engine::Warm(const PreparedGraph& graph) {
  const DecodedGraph& d = graph.impl().decoded;
  if (!d.all_static) return absl::FailedPreconditionError("Warm: the graph has run-time (-1) dimensions");
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
  return Run(graph, views);
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
