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
#include "engine/base/env.h"
#include "engine/base/sha256.h"
#include "engine/base/clock.h"
#include "engine/base/status.h"
#include "engine/realize/beam.h"
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

PreparedGraph::PreparedGraph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
// A graph's traces hold a JitFunction that reads impl_->decoded: they go with the graph. (They were
// keyed by the graph's content, so a graph evicted from the prepared cache and prepared again found
// the old graph's trace and ran its freed DecodedGraph: wrong sizes, a crash.)
PreparedGraph::~PreparedGraph() {
  if (impl_ != nullptr && impl_->traces != nullptr) impl_->traces->Erase(impl_->trace_key);
}
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
    if (!in.dim_names.empty()) {  // (keys of graphs without names stay as they were)
      AddField(h, "dim_names");
      AddInt(h, static_cast<int64_t>(in.dim_names.size()));
      for (const std::string& name : in.dim_names) AddField(h, name);
    }
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
  {
    absl::MutexLock l(&state->mu);
    state->prepared.SetLimits(options.prepared_cache_entries, options.prepared_cache_bytes);
  }
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
    const LruCacheStats p = state_->prepared.stats();
    out.prepared.entries = p.entries;
    out.prepared.bytes = p.bytes;
    out.prepared.evictions = p.evictions;
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
  const KernelCacheStats k = state_->ctx.kernel_cache_stats();
  const RealizeCounters rc = state_->ctx.counters();
  out.schedules = static_cast<uint64_t>(rc.schedules);
  out.realizes = static_cast<uint64_t>(rc.realizes);
  out.kernels = {k.entries, k.bytes, k.max_entries, k.max_bytes, k.hits, k.misses, k.evictions};
  const runtime::CompileCacheStats c = runtime::CompileCache::Global().stats();
  out.binaries.entries = c.memory_entries;
  out.binaries.bytes = c.memory_bytes;
  out.binaries.hits = c.memory_hits;
  out.binaries.misses = c.disk_hits + c.misses;
  out.binaries.evictions = c.memory_evictions;
  out.binaries.max_bytes = c.memory_max_bytes;
  const BeamCounters beam = GetBeamCounters();
  out.beam_searches = beam.searches;
  out.beam_cache_hits = beam.cache_hits;
  out.beam_pending = beam.pending;
  out.beam_generation = beam.generation;
  return out;
}

void ConfigureProcessCaches(size_t kernel_entries, size_t kernel_bytes, size_t binary_bytes) {
  SetDefaultKernelCacheLimits(kernel_entries, kernel_bytes);
  runtime::CompileCache::Options o;
  o.memory_bytes = binary_bytes;
  runtime::CompileCache::ConfigureGlobal(o);
}

void ConfigureKernelSearch(int beam_width) {
  SetProcessKnob(Knob::kBeam, std::max(0, beam_width));
  SetBeamBackground(beam_width > 0);
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
      if (const auto* hit = state_->prepared.Get(key)) {
        ++state_->stats.prepare_hits;
        return *hit;
      }
    }
    auto impl = std::make_unique<PreparedGraph::Impl>();
    impl->key = key;
    {
      absl::MutexLock l(&state_->mu);  // unique per prepared graph: its traces die with it
      impl->trace_key = absl::StrCat("graph/", state_->next_model_id++, "/", key);
    }
    impl->traces = &state_->traces;
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
    // Another thread may have won: Put keeps the first value (the newest entry always stays).
    const int64_t bytes = prepared->impl().bytes;
    return state_->prepared.Put(key, std::move(prepared), static_cast<size_t>(bytes));
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
