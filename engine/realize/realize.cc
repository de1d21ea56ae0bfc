// Realize: memo lookup -> CreateSchedule -> per kernel: LowerKernel -> render + compile (cached) + load -> allocate
// buffers in the BufferTable -> launch. See realize.h for the contract.
#include "engine/realize/realize.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <deque>
#include <list>
#include <memory>
#include <numeric>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/base/clock.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/codegen/codegen.h"
#include "engine/codegen/render/renderer.h"
#include "engine/realize/beam.h"
#include "engine/realize/kernel_log.h"
#include "engine/realize/program_cache.h"
#include "engine/realize/realize_internal.h"
#include "engine/rewrite/trace.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/compile_cache.h"
#include "engine/runtime/registry.h"
#include "engine/schedule/schedule.h"
#include "engine/uop/printer.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

thread_local const RunControl* t_control = nullptr;

const RunControl& DefaultRunControl() {
  static const RunControl* c = new RunControl();
  return *c;
}

// A reservation of a run's new bytes in its control's MemoryBudget, released on destruction.
class Reservation {
 public:
  Reservation() = default;
  absl::Status Reserve(MemoryBudget* budget, int64_t bytes) {
    if (budget == nullptr || bytes <= 0) return absl::OkStatus();
    KILN_RETURN_IF_ERROR(budget->Reserve(bytes, static_cast<int64_t>(runtime::BufferTable::Global().total_bytes())));
    budget_ = budget;
    bytes_ = bytes;
    return absl::OkStatus();
  }
  ~Reservation() {
    if (budget_ != nullptr) budget_->Release(bytes_);
  }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

 private:
  MemoryBudget* budget_ = nullptr;
  int64_t bytes_ = 0;
};

// The control's verdict before item `done` of `total`, with where the run stopped.
absl::Status Stopped(const RunControl& control, size_t done, size_t total) {
  absl::Status st = control.Check();
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat(st.message(), " after ", done, " of ", total,
                                              " kernels and copies; the rest did not run"));
}

// ---- loaded kernels, by (device, kernel AST key, opt knobs); bounded LRU ----

using realize_internal::LoadedKernel;

// What a loaded kernel costs beyond its source, binary and program, measured on the CPU backend (LLVM 19 ORC): 300
// reduce_sum input shapes grew kilnd's RSS by 64-69 KiB per shape with every kernel cached, 10 KiB per shape with the
// caches bounded to a few entries; of the ~57 KiB difference the source, binary and program account for ~13 KiB.
constexpr size_t kLoadedKernelOverheadBytes = size_t{44} << 10;

}  // namespace

codegen::Target realize_internal::TargetFor(const runtime::Device& dev) {
  codegen::Target t;
  t.renderer = dev.renderer();
  auto r = codegen::RendererFor(t.renderer);
  if (r.ok()) {
    t.has_threads = (*r)->caps().has_threads;
    t.has_local = (*r)->caps().has_local;
    t.vector_bytes = (*r)->caps().vector_bytes;
    t.wide_index = (*r)->caps().wide_index;
    t.supports_vectors = (*r)->caps().supports_vectors;
    t.max_local_size = (*r)->caps().local_max;
    for (int i = 0; i < 3; ++i) t.global_max[i] = (*r)->caps().global_max[i];
    if (dev.supports_tensor_cores()) t.tensor_cores = (*r)->caps().tensor_cores;
  }
  if (t.has_threads) t.max_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return t;
}

std::string realize_internal::KernelKey(const runtime::Device& dev, const UOpPtr& ast) {
  // Under BEAM the generation of background searches is part of the key (beam.h): once the queued searches are
  // stored, kernels are lowered again with their choices.
  const int64_t beam = GetKnob(Knob::kBeam);
  return absl::StrCat(dev.name(), "|", DigestHex(ast->Key()), "|", GetKnob(Knob::kNoOpt), "|", beam, "|",
                      GetKnob(Knob::kTc), beam > 0 ? absl::StrCat("|g", BeamGeneration()) : "");
}

namespace {

// What the kernel log shows of a BEAM choice (kernel_log.h).
LoggedBeam ToLoggedBeam(BeamChoice& c, int width) {
  LoggedBeam b;
  b.width = width;
  b.from_cache = c.from_cache;
  if (c.heuristic) {
    b.choice = "heuristic";
  } else {
    std::vector<std::string> parts;
    for (const codegen::Opt& o : c.opts) parts.push_back(o.ToString());
    b.choice = parts.empty() ? "no opts" : absl::StrJoin(parts, ", ");
  }
  b.rounds = c.rounds;
  b.search_seconds = c.search_seconds;
  b.heuristic_seconds = c.heuristic_seconds;
  b.best_seconds = c.best_seconds;
  b.candidates = std::move(c.tried);
  b.chosen = c.chosen;
  return b;
}

}  // namespace

absl::StatusOr<std::shared_ptr<LoadedKernel>> realize_internal::GetKernel(RealizeContext& ctx, runtime::Device& dev,
                                                                         const UOpPtr& ast, RealizeStats* stats,
                                                                         CompileOrder* order) {
  const std::string key = KernelKey(dev, ast);
  if (auto k = ctx.impl().GetKernel(key)) return k;
  const auto t0 = Clock::now();
  auto k = std::make_shared<LoadedKernel>();
  if (DebugLevel() >= 5) std::fprintf(stderr, "%s\n", PrintGraph(ast).c_str());
  codegen::LowerOptions lower;
  k->hooks = ctx.pass_hooks();  // held for the lowering, and for lowering it again for a VIZ record
  k->ast = ast;
  k->noopt = GetKnob(Knob::kNoOpt);
  k->tc = GetKnob(Knob::kTc);
  lower.hooks = k->hooks.get();
  lower.stats = &ctx.rewrite_stats();
  const int64_t log_id = KernelLog::Get().Reserve();  // 0 unless VIZ
  k->log_id.store(log_id, std::memory_order_relaxed);
  const codegen::Target target = realize_internal::TargetFor(dev);
  // BEAM=n: the kernel's opts from the BEAM cache or a search (beam.h); NOOPT wins over BEAM.
  LoggedBeam logged_beam;
  if (const int64_t beam = GetKnob(Knob::kBeam); beam > 0 && GetKnob(Knob::kNoOpt) == 0) {
    KILN_ASSIGN_OR_RETURN(BeamChoice choice, BeamOpts(dev, ast, target, static_cast<int>(beam)));
    if (log_id != 0 && dev.executes()) {
      logged_beam = ToLoggedBeam(choice, static_cast<int>(beam));
    }
    lower.use_explicit_opts = !choice.heuristic;
    lower.opts = std::move(choice.opts);
  }
  k->explicit_opts = lower.use_explicit_opts;
  k->opts = lower.opts;
  // The lowered program from the program cache (program_cache.h) when a build of this kiln lowered the same kernel
  // before; not when the lowering itself is observed (VIZ records its passes; pass hooks; DEBUG >= 4 prints the
  // source) or CACHELEVEL=0. A hit loads the binary by its compile-cache key; the kernel then holds no source.
  const std::string pkey =
      lower.hooks == nullptr && log_id == 0 && DebugLevel() < 4 && GetKnob(Knob::kCacheLevel) > 0
          ? realize_internal::ProgramCacheKey(dev, ast, target, lower)
          : std::string();
  runtime::CompileCache& cache = runtime::CompileCache::Global();
  size_t uop_count = 0, source_bytes = 0, binary_bytes = 0;
  bool cached = false;
  if (std::string blob; !pkey.empty() && cache.Lookup(pkey, &blob)) {
    realize_internal::CachedProgram cp;
    std::string binary;
    if (realize_internal::DeserializeProgram(blob, &cp) && cache.Lookup(cp.binary_key, &binary)) {
      absl::StatusOr<std::unique_ptr<runtime::Program>> loaded = dev.Load(binary, cp.program.name);
      if (loaded.ok()) {
        k->program = std::move(cp.program);
        k->runner = *std::move(loaded);
        uop_count = static_cast<size_t>(cp.uop_count);
        source_bytes = static_cast<size_t>(cp.source_bytes);
        binary_bytes = binary.size();
        cached = true;
      }
    }
  }
  if (!cached) {
    if (order != nullptr && order->program.has_value()) {
      k->program = *std::move(order->program);
      order->program.reset();
    } else {
      {
        ScopedTraceGroup group(log_id);  // the lowering's rewrite passes belong to this kernel
        KILN_ASSIGN_OR_RETURN(k->program, codegen::LowerKernel(ast, target, lower));
      }
      if (order != nullptr && k->program.slp_max_vf > 0 && log_id == 0 &&
          lower.hooks == nullptr) {
        order->lower_seconds = Since(t0);
        order->program = std::move(k->program);
        return std::shared_ptr<LoadedKernel>();
      }
    }
    KILN_ASSIGN_OR_RETURN(runtime::CompiledKernel ck, runtime::CompileKernel(dev, k->program));
    uop_count = k->program.uops.size();
    source_bytes = ck.source.size();
    binary_bytes = ck.binary_bytes;
    if (!pkey.empty() && k->program.vars.empty()) {
      KILN_ASSIGN_OR_RETURN(const codegen::Renderer* renderer, codegen::RendererFor(dev.renderer()));
      const std::string binary_key = runtime::CompileCache::Key(renderer->name(), dev.compiler().CacheKey(),
                                                                k->program.name, ck.source);
      cache.Store(pkey, realize_internal::SerializeProgram(k->program, static_cast<int64_t>(source_bytes), binary_key));
    }
    k->source = std::move(ck.source);
    k->runner = std::move(ck.program);
  }
  k->bytes = source_bytes + binary_bytes + 160 * uop_count + kLoadedKernelOverheadBytes;
  if (DebugLevel() >= 3 && !k->program.applied_opts.empty())
    std::fprintf(stderr, "%s: %s\n", k->program.name.c_str(), absl::StrJoin(k->program.applied_opts, ", ").c_str());
  if (DebugLevel() >= 4) std::fprintf(stderr, "%s\n", k->source.c_str());
  const double secs = Since(t0) + (order != nullptr ? std::exchange(order->lower_seconds, 0.0) : 0.0);
  if (log_id != 0) {
    LoggedKernel lk;
    lk.id = log_id;
    lk.name = k->program.name;
    lk.device = dev.name();
    lk.renderer = dev.renderer();
    lk.compiled_unix_ms = absl::ToUnixMillis(absl::Now());
    lk.compile_seconds = secs;
    lk.ast = ast;
    lk.applied_opts = k->program.applied_opts;
    lk.beam = std::move(logged_beam);
    lk.source = k->source;
    lk.flops = k->program.flops;
    lk.bytes = k->program.mem_bytes;
    KernelLog::Get().RecordCompile(std::move(lk));
  }
  ctx.impl().PutKernel(key, k);
  ctx.impl().NoteCompile(secs);
  if (stats != nullptr) {
    stats->compiled += 1;
    stats->compile_seconds += secs;
  }
  return k;
}

int64_t realize_internal::LogIdForLaunch(LoadedKernel& k, runtime::Device& dev) {
  if (!KernelLog::Enabled()) return 0;
  KernelLog& log = KernelLog::Get();
  int64_t id = k.log_id.load(std::memory_order_acquire);
  if (id != 0 && log.Holds(id)) return id;
  static absl::Mutex mu(absl::kConstInit);  // one new entry per kernel when several threads launch it at once
  absl::MutexLock l(&mu);
  id = k.log_id.load(std::memory_order_acquire);
  if (id != 0 && log.Holds(id)) return id;
  id = log.Reserve();
  if (id == 0 || k.ast == nullptr) return 0;
  const auto t0 = Clock::now();
  codegen::LowerOptions lower;
  lower.use_explicit_opts = k.explicit_opts;
  lower.opts = k.opts;
  lower.hooks = k.hooks.get();
  absl::StatusOr<codegen::Program> again;
  {
    Context knobs({{Knob::kNoOpt, k.noopt}, {Knob::kTc, k.tc}});
    ScopedTraceGroup group(id);  // the passes of this lowering are the record's
    again = codegen::LowerKernel(k.ast, realize_internal::TargetFor(dev), lower);
    // It lowered once with these inputs; a failure now would be a bug, and then the record has no passes.
    if (!again.ok() && DebugLevel() >= 1)
      std::fprintf(stderr, "VIZ: lowering %s again failed: %s\n", k.program.name.c_str(),
                   std::string(again.status().message()).c_str());
  }
  LoggedKernel lk;
  lk.id = id;
  lk.name = k.program.name;
  lk.device = dev.name();
  lk.renderer = dev.renderer();
  lk.compiled_unix_ms = absl::ToUnixMillis(absl::Now());
  lk.compile_seconds = Since(t0);
  lk.reused = true;
  lk.ast = k.ast;
  lk.applied_opts = k.program.applied_opts;
  lk.source = k.source;
  if (lk.source.empty() && again.ok()) {  // a kernel from the program cache holds no source: render it again
    if (absl::StatusOr<const codegen::Renderer*> r = codegen::RendererFor(dev.renderer()); r.ok()) {
      if (absl::StatusOr<std::string> src = (*r)->Render(*again); src.ok()) lk.source = *std::move(src);
    }
  }
  lk.flops = k.program.flops;
  lk.bytes = k.program.mem_bytes;
  log.RecordCompile(std::move(lk));
  k.log_id.store(id, std::memory_order_release);
  return id;
}

namespace {
using realize_internal::GetKernel;

bool Memoizable(const UOpPtr& root) {
  for (const UOp* u : Toposort(root))
    if (u->op() == Op::ASSIGN || u->op() == Op::BIND) return false;
  return true;
}

// ---- execution ----

absl::StatusOr<runtime::Device*> DeviceOfBuffer(const UOp* b) {
  std::string name = b->num_src() >= 2 && b->src(1)->op() == Op::DEVICE ? b->src(1)->ArgStr() : DefaultDevice();
  return runtime::GetDevice(name);
}

}  // namespace

absl::StatusOr<std::shared_ptr<runtime::Buffer>> realize_internal::Materialize(const UOpPtr& b) {
  runtime::BufferTable& table = runtime::BufferTable::Global();
  if (auto buf = table.Lookup(b.get())) return buf;
  KILN_ASSIGN_OR_RETURN(runtime::Device * dev, DeviceOfBuffer(b.get()));
  KILN_ASSIGN_OR_RETURN(auto buf, runtime::Buffer::Create(dev, b->dtype(), b->ArgInt()));
  absl::Status st = table.Attach(b.get(), buf);
  if (absl::IsAlreadyExists(st)) return table.Lookup(b.get());  // another thread won
  KILN_RETURN_IF_ERROR(st);
  return buf;
}

namespace {
using realize_internal::Materialize;

// Lowers and compiles the schedule's not-yet-loaded kernels on up to hardware_concurrency threads before the
// launches, so a cold first step (tens of kernels, LLVM -O2 each) takes its compile time divided by the cores. The
// workers run under the caller's knobs (Context is per thread) and their counts are added to the caller's stats.
// Failures are not reported here: RunKernel's GetKernel repeats the compile and returns the error in order.
// Returns the kernels compiled here by key, held for the Realize: a byte-bounded cache may evict them before their
// launch, and they must not be compiled twice.
struct PrecompiledKernel {
  std::shared_ptr<LoadedKernel> kernel;
  bool launched = false;  // its first launch (the one counted as compiled) happened
};
using Precompiled = absl::flat_hash_map<std::string, PrecompiledKernel>;
Precompiled PrecompileKernels(RealizeContext& ctx, const Schedule& s, RealizeStats& stats) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Precompiled done;  // keys compiled (or loaded from the disk cache) here
  // BEAM times kernels on the cores: a parallel compile would disturb its timings (and it compiles in parallel
  // itself).
  if (hw < 2 || GetKnob(Knob::kBeam) > 0) return done;
  std::vector<std::pair<runtime::Device*, UOpPtr>> todo;
  absl::flat_hash_set<std::string> seen;
  for (const ScheduleItem& it : s.items) {
    if (it.kind != ScheduleItem::Kind::kKernel) continue;
    absl::StatusOr<runtime::Device*> dev = runtime::GetDevice(it.device);
    if (!dev.ok()) continue;
    const std::string key = realize_internal::KernelKey(**dev, it.ast);
    if (ctx.impl().HasKernel(key) || !seen.insert(key).second) continue;
    todo.push_back({*dev, it.ast});
  }
  if (todo.size() < 2) return done;
  const int64_t knobs[] = {GetKnob(Knob::kDebug), GetKnob(Knob::kNoOpt), GetKnob(Knob::kBeam),
                           GetKnob(Knob::kCacheLevel), GetKnob(Knob::kViz), GetKnob(Knob::kTrackMatchStats)};
  const std::string label = ScopedKernelLogLabel::Current();
  // Two rounds: first every kernel without an SLP cap, the capped ones only lowered; then the capped ones, by cap.
  // The CPU compiler sets a cap process-wide and so never compiles under two caps at once (cpu_compiler.cc): mixed in
  // one round, a thread waited for the other's capped kernel (the CNN training step on a 2-core Emerald Rapids, cold:
  // 0.94 s of its 5.4 s of compile threads waiting).
  std::vector<realize_internal::CompileOrder> orders(todo.size());
  std::vector<size_t> round(todo.size());
  std::iota(round.begin(), round.end(), size_t{0});
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  int compiled = 0;
  double seconds = 0;
  std::vector<std::shared_ptr<LoadedKernel>> kernels(todo.size());
  auto compile_all = [&](RealizeStats* local) {
    for (size_t j; (j = next.fetch_add(1)) < round.size();) {
      const size_t i = round[j];
      absl::StatusOr<std::shared_ptr<LoadedKernel>> k =
          GetKernel(ctx, *todo[i].first, todo[i].second, local, &orders[i]);
      if (k.ok()) kernels[i] = *std::move(k);
    }
  };
  auto worker = [&] {  // counts into its own stats; handed to the caller's below
    Context knob_scope({{Knob::kDebug, knobs[0]}, {Knob::kNoOpt, knobs[1]}, {Knob::kBeam, knobs[2]},
                        {Knob::kCacheLevel, knobs[3]}, {Knob::kViz, knobs[4]}, {Knob::kTrackMatchStats, knobs[5]}});
    ScopedKernelLogLabel label_scope(label);
    RealizeStats local;
    compile_all(&local);
    absl::MutexLock l(&mu);
    compiled += local.compiled;
    seconds += local.compile_seconds;
  };
  auto run_round = [&] {
    next = 0;
    std::vector<std::thread> threads;
    const int n = static_cast<int>(std::min<size_t>(round.size(), static_cast<size_t>(hw)));
    for (int t = 1; t < n; ++t) threads.emplace_back(worker);
    compile_all(&stats);
    for (std::thread& t : threads) t.join();
  };
  run_round();
  round.clear();
  for (size_t i = 0; i < todo.size(); ++i) {
    if (orders[i].program.has_value()) round.push_back(i);
  }
  std::stable_sort(round.begin(), round.end(),
                   [&](size_t a, size_t b) { return orders[a].program->slp_max_vf < orders[b].program->slp_max_vf; });
  if (!round.empty()) run_round();
  stats.compiled += compiled;
  stats.compile_seconds += seconds;
  for (size_t i = 0; i < todo.size(); ++i) {
    if (kernels[i] != nullptr) {
      done.emplace(realize_internal::KernelKey(*todo[i].first, todo[i].second), PrecompiledKernel{kernels[i]});
    }
  }
  return done;
}

absl::Status RunCopy(const ScheduleItem& item) {
  KILN_ASSIGN_OR_RETURN(auto dst, Materialize(item.buffers[0]));
  KILN_ASSIGN_OR_RETURN(auto src, Materialize(item.buffers[1]));
  if (dst->nbytes() < src->nbytes() && dst->numel() != item.buffers[0]->ArgInt())
    return absl::InternalError("realize: copy destination too small");
  std::string host(src->nbytes(), '\0');
  KILN_RETURN_IF_ERROR(src->device()->Synchronize());
  KILN_RETURN_IF_ERROR(src->CopyOut(host.data(), host.size()));
  size_t n = std::min(dst->nbytes(), host.size());
  return dst->device()->allocator().CopyIn(dst->memory(), host.data(), n);
}

absl::Status RunKernel(RealizeContext& ctx, const ScheduleItem& item, const Schedule& s, int index,
                       Precompiled& precompiled, absl::flat_hash_set<runtime::Device*>* used, RealizeStats& stats) {
  KILN_ASSIGN_OR_RETURN(runtime::Device * dev, runtime::GetDevice(item.device));
  used->insert(dev);
  const int compiled_before = stats.compiled;
  // A precompiled kernel counts as compiled at its first launch only, as it would have without precompiling.
  bool compiled = false;
  std::shared_ptr<LoadedKernel> k;
  if (auto it = precompiled.find(realize_internal::KernelKey(*dev, item.ast)); it != precompiled.end()) {
    k = it->second.kernel;
    compiled = !it->second.launched;
    it->second.launched = true;
  } else {
    KILN_ASSIGN_OR_RETURN(k, GetKernel(ctx, *dev, item.ast, &stats));
    compiled = stats.compiled != compiled_before;
  }
  std::vector<std::shared_ptr<runtime::Buffer>> hold;
  std::vector<runtime::DeviceMemory> mems;
  for (const UOpPtr& b : item.buffers) {
    KILN_ASSIGN_OR_RETURN(auto buf, Materialize(b));
    if (buf->device() != dev)
      return absl::InvalidArgumentError(absl::StrCat("realize: kernel ", k->program.name, " on ", dev->name(),
                                                     " reads a buffer on ", buf->device()->name()));
    mems.push_back(buf->memory());
    hold.push_back(std::move(buf));
  }
  // A kernel that reads none of its item's last buffers takes fewer parameters (codegen::ParamCount).
  const size_t params = static_cast<size_t>(codegen::ParamCount(k->program));
  if (mems.size() > params && params >= static_cast<size_t>(item.num_outputs)) mems.resize(params);
  std::vector<int64_t> vars;
  for (const UOpPtr& v : k->program.vars) {
    const std::string& name = std::get<VarArg>(v->arg()).name;
    auto it = s.var_vals.find(name);
    if (it == s.var_vals.end()) return absl::InvalidArgumentError(absl::StrCat("realize: unbound variable ", name));
    vars.push_back(it->second);
  }
  runtime::LaunchDims dims;
  for (int i = 0; i < 3; ++i) {
    dims.global[i] = k->program.global_size[i];
    dims.local[i] = k->program.local_size[i];
  }
  dims.threads = k->program.threads;
  const int64_t start_ns = SteadyNowNs();
  KILN_ASSIGN_OR_RETURN(double secs, k->runner->Launch(mems, vars, dims, /*timed=*/true));
  if (const int64_t log_id = realize_internal::LogIdForLaunch(*k, *dev); log_id != 0) {
    KernelLog::Get().RecordLaunch(log_id, start_ns, secs);
  }
  stats.launches.push_back(KernelLaunch{k->program.name, dev->name(), secs, compiled, start_ns,
                                        k->program.flops, k->program.mem_bytes});
  if (DebugLevel() >= 2) {
    double gflops = secs > 0 ? static_cast<double>(k->program.flops) / secs * 1e-9 : 0.0;
    double gbs = secs > 0 ? static_cast<double>(k->program.mem_bytes) / secs * 1e-9 : 0.0;
    std::fprintf(stderr, "*** %-6s %4d %-32s arg %2zu tm %10.2fus (%9.2f GFLOPS %7.2f GB/s)\n", dev->name().c_str(),
                 index, k->program.name.c_str(), item.buffers.size(), secs * 1e6, gflops, gbs);
  }
  return absl::OkStatus();
}

// ---- realized constants: filled on the host, no kernel ----

// Host-visible buffers of any size are filled in place; others through a staging copy of at most this many bytes
// (above it a fill kernel is cheaper than the staging memory).
constexpr size_t kMaxConstStaging = size_t{16} << 20;

// The CONST under a root that is only RESHAPEs and EXPANDs of it (Tensor::Full, a scalar), or null.
const UOp* UniformConst(const UOp* u) {
  while (u->op() == Op::RESHAPE || u->op() == Op::EXPAND) u = u->src(0).get();
  return u->op() == Op::CONST && u->num_src() == 0 ? u : nullptr;
}

// The bytes of one element of CONST `c` in its dtype; 0 for a dtype filled by a kernel instead.
size_t EncodeConst(const UOp& c, uint8_t out[8]) {
  const DType d = c.dtype();
  const int64_t* i = std::get_if<int64_t>(&c.arg());
  const int64_t iv = i != nullptr ? *i : static_cast<int64_t>(c.ConstValue());
  switch (d.scalar) {
    case ScalarType::kFloat32: {
      const float f = static_cast<float>(c.ConstValue());
      std::memcpy(out, &f, 4);
      return 4;
    }
    case ScalarType::kFloat64: {
      const double f = c.ConstValue();
      std::memcpy(out, &f, 8);
      return 8;
    }
    case ScalarType::kBool: out[0] = c.ConstValue() != 0.0; return 1;
    case ScalarType::kInt8: case ScalarType::kUInt8: case ScalarType::kInt16: case ScalarType::kUInt16:
    case ScalarType::kInt32: case ScalarType::kUInt32: case ScalarType::kInt64: case ScalarType::kUInt64:
      std::memcpy(out, &iv, d.ItemSize());  // little-endian: the low bytes are the value wrapped to the width
      return d.ItemSize();
    default: return 0;
  }
}

// A root that is one constant becomes a buffer filled on the host (tinygrad launches no kernel for a realized
// constant either). Null when the root is not such a constant or the fill needs a kernel (see kMaxConstStaging).
// The buffer lives where the scheduler puts a constant realized without other work: the default device.
absl::StatusOr<UOpPtr> FillConstant(const UOpPtr& root) {
  const UOp* c = UniformConst(root.get());
  uint8_t elem[8];
  const size_t width = c == nullptr ? 0 : EncodeConst(*c, elem);
  if (width == 0 || root->Numel() == 0) return nullptr;
  KILN_ASSIGN_OR_RETURN(runtime::Device * dev, runtime::GetDevice(DefaultDevice()));
  if (!dev->executes()) return nullptr;
  KILN_ASSIGN_OR_RETURN(auto buf, runtime::Buffer::Create(dev, root->dtype(), root->Numel()));
  auto fill = [&](uint8_t* p, size_t n) {
    for (size_t k = 0; k < n; ++k) std::memcpy(p + k * width, elem, width);
  };
  const size_t n = static_cast<size_t>(root->Numel());
  if (buf->memory().ptr != nullptr) {
    fill(static_cast<uint8_t*>(buf->memory().ptr), n);
  } else {
    if (buf->nbytes() > kMaxConstStaging) return nullptr;
    std::string host(buf->nbytes(), '\0');
    fill(reinterpret_cast<uint8_t*>(host.data()), n);
    KILN_RETURN_IF_ERROR(buf->CopyIn(host.data(), host.size()));
  }
  UOpPtr node = NewBuffer(root->dtype(), root->Numel(), dev->name());
  KILN_RETURN_IF_ERROR(runtime::BufferTable::Global().Attach(node.get(), std::move(buf)));
  if (root->shape().size() == 1) return node;
  return UOp::Make(Op::RESHAPE, root->dtype(), {node}, IntVec(root->shape().begin(), root->shape().end()));
}

}  // namespace

namespace {

// The body of Realize(ctx, roots, control); `stats` is filled as it goes (also on failure).
absl::StatusOr<std::vector<UOpPtr>> RealizeOn(RealizeContext& ctx, absl::Span<const UOpPtr> roots,
                                              const RunControl& control, RealizeStats& stats) {
  const auto t0 = Clock::now();
  realize_internal::Memo& memo = ctx.impl().memo;
  for (const UOpPtr& r : roots)
    if (!r) return absl::InvalidArgumentError("Realize: null root");

  // Memo: roots realized before (same interned expression, same buffers) cost nothing.
  // Under a CaptureScope (exec_plan.h) the schedule is recorded instead of run, and the memo is bypassed both ways.
  realize_internal::CaptureState* capture = realize_internal::ActiveCapture();
  std::vector<UOpPtr> out(roots.size());
  std::vector<UOpPtr> todo;
  std::vector<size_t> todo_at;
  for (size_t i = 0; i < roots.size(); ++i) {
    bool contiguous = false;
    if (BufferOf(roots[i].get(), &contiguous) != nullptr && contiguous) {
      out[i] = roots[i];
      continue;
    }
    if (capture != nullptr) {
      todo.push_back(roots[i]);
      todo_at.push_back(i);
      continue;
    }
    if (UOpPtr hit = memo.Lookup(roots[i]->Key())) {
      out[i] = hit;
      continue;
    }
    todo.push_back(roots[i]);
    todo_at.push_back(i);
  }
  // Roots that are all constants are filled on the host (FillConstant). Mixed with other work they stay in the
  // schedule, which places a constant on the device of that work.
  if (capture == nullptr && !todo.empty() &&
      std::all_of(todo.begin(), todo.end(), [](const UOpPtr& r) { return UniformConst(r.get()) != nullptr; })) {
    std::vector<UOpPtr> filled;
    for (const UOpPtr& r : todo) {
      KILN_ASSIGN_OR_RETURN(UOpPtr f, FillConstant(r));
      if (f == nullptr) break;
      filled.push_back(std::move(f));
    }
    if (filled.size() == todo.size()) {
      for (size_t j = 0; j < todo.size(); ++j) out[todo_at[j]] = std::move(filled[j]);
      todo.clear();
    }
  }
  if (todo.empty()) {
    stats.seconds = Since(t0);
    return out;
  }

  stats.schedules += 1;
  // The fusion rules count into the context's RewriteStats; DEBUG >= 5 prints this schedule's own counts.
  ScheduleOptions sched_opts;
  RewriteStats sched_stats;
  sched_opts.stats = DebugLevel() >= 5 ? &sched_stats : &ctx.rewrite_stats();
  absl::StatusOr<Schedule> scheduled = CreateSchedule(todo, sched_opts);
  if (DebugLevel() >= 5) {
    std::fprintf(stderr, "=== schedule rule passes ===\n%s", sched_stats.Format().c_str());
    ctx.rewrite_stats().Merge(sched_stats);
  }
  KILN_ASSIGN_OR_RETURN(Schedule s, std::move(scheduled));
  const double sched_s = Since(t0);
  int kernels = 0;
  for (const ScheduleItem& it : s.items) kernels += it.kind == ScheduleItem::Kind::kKernel;
  // Admission: nothing is compiled, allocated or launched for a schedule over its limits.
  stats.estimate = EstimateSchedule(s);
  KILN_RETURN_IF_ERROR(CheckWork(stats.estimate, control.limits));
  KILN_RETURN_IF_ERROR(Stopped(control, 0, s.items.size()));
  for (const UOpPtr& b : s.assigned) realize_internal::InvalidateMemo(b.get());  // every context's
  if (capture != nullptr) {
    realize_internal::AppendCaptured(capture, s);
    for (size_t j = 0; j < todo.size(); ++j) out[todo_at[j]] = s.outputs[j];
    stats.kernels = kernels;
    stats.seconds = Since(t0);
    return out;
  }

  Reservation reservation;
  KILN_RETURN_IF_ERROR(reservation.Reserve(control.memory_budget, stats.estimate.new_bytes));
  Precompiled precompiled = PrecompileKernels(ctx, s, stats);
  absl::flat_hash_set<runtime::Device*> used;
  for (size_t i = 0; i < s.items.size(); ++i) {
    KILN_RETURN_IF_ERROR(Stopped(control, i, s.items.size()));
    const ScheduleItem& item = s.items[i];
    KILN_RETURN_IF_ERROR(realize_internal::CheckNoConstantWrites(item, "realize: a kernel"));
    absl::Status st = item.kind == ScheduleItem::Kind::kCopy ? RunCopy(item)
                                                              : RunKernel(ctx, item, s, static_cast<int>(i), precompiled, &used, stats);
    if (!st.ok()) return st;
    if (control.progress) control.progress(static_cast<int>(i) + 1, static_cast<int>(s.items.size()));
  }
  for (runtime::Device* d : used) KILN_RETURN_IF_ERROR(d->Synchronize());
  // Output buffers that no kernel wrote (zero-size values) still get memory.
  for (const UOpPtr& o : s.outputs) {
    if (const UOp* b = BufferOf(o.get())) KILN_RETURN_IF_ERROR(Materialize(b->Ptr()).status());
  }

  std::vector<const UOp*> reads;
  for (const UOpPtr& b : s.inputs) reads.push_back(b.get());
  for (size_t j = 0; j < todo.size(); ++j) {
    out[todo_at[j]] = s.outputs[j];
    if (Memoizable(todo[j])) {
      std::vector<const UOp*> r = reads;
      if (const UOp* b = BufferOf(s.outputs[j].get())) r.push_back(b);
      memo.Insert(todo[j]->Key(), s.outputs[j], std::move(r));
    }
  }
  stats.kernels = kernels;
  stats.seconds = Since(t0);
  if (DebugLevel() >= 1 && kernels > 0) {
    std::fprintf(stderr, "scheduled %d kernels in %.2f ms, ran in %.2f ms | %.2f MB intermediates (%.2f MB planned)\n",
                 kernels, sched_s * 1e3, (stats.seconds - sched_s) * 1e3, s.intermediate_bytes / 1e6,
                 s.planned_bytes / 1e6);
  }
  return out;
}

}  // namespace

RealizeResult Realize(RealizeContext& ctx, absl::Span<const UOpPtr> roots, const RunControl& control) {
  RealizeResult r;
  ScopedRunControl control_scope(control);  // the Realize calls this one makes (none today) and ExecPlan builds
  ScopedRealizeContext ctx_scope(ctx);
  absl::StatusOr<std::vector<UOpPtr>> out = RealizeOn(ctx, roots, control, r.stats);
  ctx.impl().Finish(r.stats);
  if (out.ok()) {
    r.outputs = *std::move(out);
  } else {
    r.status = out.status();
  }
  return r;
}

absl::StatusOr<std::vector<UOpPtr>> Realize(absl::Span<const UOpPtr> roots) {
  RealizeResult r = Realize(CurrentRealizeContext(), roots, CurrentRunControl());
  if (!r.status.ok()) return r.status;
  return std::move(r.outputs);
}

const RunControl& CurrentRunControl() { return t_control != nullptr ? *t_control : DefaultRunControl(); }

ScopedRunControl::ScopedRunControl(const RunControl& control) : prev_(t_control) { t_control = &control; }
ScopedRunControl::~ScopedRunControl() { t_control = prev_; }

absl::StatusOr<std::vector<UOpPtr>> Realize(absl::Span<const UOpPtr> roots, const RunControl& control) {
  RealizeResult r = Realize(CurrentRealizeContext(), roots, control);
  if (!r.status.ok()) return r.status;
  return std::move(r.outputs);
}

absl::StatusOr<UOpPtr> FromHost(const void* data, DType dtype, const Shape& shape, const std::string& device,
                                std::optional<size_t> prefix_bytes) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("FromHost: negative dimension");
    n *= d;
  }
  if (dtype.is_ptr || dtype.ItemSize() <= 0 || dtype.count != 1)
    return absl::InvalidArgumentError(absl::StrCat("FromHost: invalid dtype ", dtype.Name()));
  KILN_ASSIGN_OR_RETURN(runtime::Device * dev, runtime::GetDevice(device));
  KILN_ASSIGN_OR_RETURN(auto buf, runtime::Buffer::Create(dev, dtype, n));
  if (prefix_bytes.has_value()) {
    if (*prefix_bytes > buf->nbytes())
      return absl::InvalidArgumentError(
          absl::StrCat("FromHost: ", *prefix_bytes, " bytes of data for a buffer of ", buf->nbytes()));
    if (*prefix_bytes > 0) KILN_RETURN_IF_ERROR(dev->allocator().CopyIn(buf->memory(), data, *prefix_bytes));
  } else if (n > 0) {
    KILN_RETURN_IF_ERROR(buf->CopyIn(data, buf->nbytes()));
  }
  UOpPtr node = NewBuffer(dtype, n, dev->name());
  KILN_RETURN_IF_ERROR(runtime::BufferTable::Global().Attach(node.get(), std::move(buf)));
  if (shape.size() == 1) return node;
  return UOp::Make(Op::RESHAPE, dtype, {node}, IntVec(shape.begin(), shape.end()));
}

bool realize_internal::IsConstantBuffer(const UOp* buffer) {
  std::shared_ptr<runtime::Buffer> b = runtime::BufferTable::Global().Lookup(buffer);
  return b != nullptr && b->constant();
}

absl::Status realize_internal::CheckNoConstantWrites(const ScheduleItem& item, const std::string& what) {
  for (size_t j = 0; j < item.num_written(); ++j) {
    if (IsConstantBuffer(item.buffers[j].get()))
      return absl::FailedPreconditionError(absl::StrCat(what, " would write a buffer marked constant (MarkConstant)"));
  }
  return absl::OkStatus();
}

namespace {

// The memory under a realized value (a BUFFER node, or a movement view of one); null for anything else.
std::shared_ptr<runtime::Buffer> BufferUnder(const UOpPtr& value) {
  const UOp* u = value.get();
  while (u != nullptr && IsMovement(u->op())) u = u->src(0).get();
  return u != nullptr && u->op() == Op::BUFFER ? runtime::BufferTable::Global().Lookup(u) : nullptr;
}

}  // namespace

absl::Status MarkConstant(const UOpPtr& realized) {
  std::shared_ptr<runtime::Buffer> buf = BufferUnder(realized);
  if (buf == nullptr) return absl::InvalidArgumentError("MarkConstant: the value is not a realized buffer");
  buf->MarkConstant();
  return absl::OkStatus();
}

bool IsMarkedConstant(const UOpPtr& value) {
  std::shared_ptr<runtime::Buffer> buf = BufferUnder(value);
  return buf != nullptr && buf->constant();
}

absl::Status ToHost(const UOpPtr& realized, void* dst, size_t nbytes, bool prefix) {
  if (!realized) return absl::InvalidArgumentError("ToHost: null value");
  if (realize_internal::ActiveCapture() != nullptr)
    return absl::FailedPreconditionError(
        "cannot access tensor data during JIT capture, the value will be baked in");
  bool contiguous = false;
  const UOp* b = BufferOf(realized.get(), &contiguous);
  if (b == nullptr || !contiguous || b->ArgInt() != realized->Numel())
    return absl::FailedPreconditionError("ToHost: the value is not a realized contiguous buffer (Realize it first)");
  auto buf = runtime::BufferTable::Global().Lookup(b);
  if (buf == nullptr) return absl::FailedPreconditionError("ToHost: the buffer has no device memory");
  if (prefix ? nbytes > buf->nbytes() : nbytes != buf->nbytes())
    return absl::InvalidArgumentError(absl::StrCat("ToHost: nbytes is ", nbytes, ", the buffer holds ", buf->nbytes()));
  KILN_RETURN_IF_ERROR(buf->device()->Synchronize());
  if (nbytes == 0) return absl::OkStatus();
  if (prefix) return buf->device()->allocator().CopyOut(dst, buf->memory(), nbytes);
  return buf->CopyOut(dst, nbytes);
}

}  // namespace kiln
