#include "engine/realize/beam.h"

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <random>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/env.h"
#include "engine/base/sha256.h"
#include "engine/base/status.h"
#include "engine/codegen/render/renderer.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/compile_cache.h"

namespace kiln {
namespace {

using codegen::Opt;
using codegen::OptOp;

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr int kTimedRuns = 3;
constexpr double kSlowFactor = 3.0;    // a first run this many times the best so far ends the candidate
constexpr size_t kMaxUopGrowth = 8;    // candidates with more uops than this times the heuristic's are dropped
constexpr size_t kMinUopCap = 4000;    // ... unless they stay under this many

absl::Mutex g_search_mu;  // one search at a time per process: timings must not share the cores
absl::Mutex g_counters_mu;
BeamCounters g_counters ABSL_GUARDED_BY(g_counters_mu);
std::vector<BeamChoice>* g_log ABSL_GUARDED_BY(g_counters_mu) = nullptr;
// The last kMaxBeamRecords recorded searches (VIZ): cache key -> what they tried.
std::deque<std::pair<std::string, BeamChoice>>* g_records ABSL_GUARDED_BY(g_counters_mu) = nullptr;

// ---- element values: seeded random inputs and a tolerant comparison ----

double HalfToDouble(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(man, -24);
  else if (exp == 31) v = man == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  else v = std::ldexp(1024 + man, exp - 25);
  return sign ? -v : v;
}

double ElementAt(ScalarType t, const char* p) {
  switch (t) {
    case ScalarType::kBool: return *reinterpret_cast<const uint8_t*>(p) != 0;
    case ScalarType::kInt8: return *reinterpret_cast<const int8_t*>(p);
    case ScalarType::kUInt8: return *reinterpret_cast<const uint8_t*>(p);
    case ScalarType::kInt16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case ScalarType::kUInt16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case ScalarType::kInt32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case ScalarType::kUInt32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case ScalarType::kInt64: case ScalarType::kIndex: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case ScalarType::kUInt64: { uint64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case ScalarType::kFloat16: { uint16_t v; std::memcpy(&v, p, 2); return HalfToDouble(v); }
    case ScalarType::kBFloat16: {
      uint16_t v; std::memcpy(&v, p, 2);
      uint32_t bits = static_cast<uint32_t>(v) << 16;
      float f; std::memcpy(&f, &bits, 4);
      return f;
    }
    case ScalarType::kFloat32: { float v; std::memcpy(&v, p, 4); return v; }
    case ScalarType::kFloat64: { double v; std::memcpy(&v, p, 8); return v; }
    case ScalarType::kVoid: return 0;
  }
  return 0;
}

// Random contents for a buffer of `dtype`: floats in about [-1, 1] (halves in [2^-6, 1) by magnitude), integers
// small (0..7, signed -4..3), bools 0/1. No kernel indexes memory by a loaded value (robustness.md #19), so any
// values are safe; small ones keep exp/products finite for the comparison.
std::string RandomBytes(DType dtype, int64_t numel, std::mt19937_64& rng) {
  const int item = dtype.ItemSize();
  std::string out(static_cast<size_t>(numel) * item, '\0');
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  for (int64_t i = 0; i < numel; ++i) {
    char* p = out.data() + i * item;
    const uint64_t r = rng();
    switch (dtype.scalar) {
      case ScalarType::kFloat32: { float v = static_cast<float>(real(rng)); std::memcpy(p, &v, 4); break; }
      case ScalarType::kFloat64: { double v = real(rng); std::memcpy(p, &v, 8); break; }
      case ScalarType::kBFloat16: {
        float v = static_cast<float>(real(rng));
        uint32_t bits; std::memcpy(&bits, &v, 4);
        uint16_t h = static_cast<uint16_t>(bits >> 16);
        std::memcpy(p, &h, 2);
        break;
      }
      case ScalarType::kFloat16: {  // sign, exponent 9..14 (2^-6 .. 2^-1 scale), random mantissa
        uint16_t h = static_cast<uint16_t>(((r & 1) << 15) | ((9 + (r >> 1) % 6) << 10) | ((r >> 8) & 0x3ff));
        std::memcpy(p, &h, 2);
        break;
      }
      case ScalarType::kBool: p[0] = static_cast<char>(r & 1); break;
      default: {
        const int64_t v = dtype.IsUnsigned() ? static_cast<int64_t>(r % 8) : static_cast<int64_t>(r % 8) - 4;
        std::memcpy(p, &v, static_cast<size_t>(item));  // little-endian: the low bytes hold the value
        break;
      }
    }
  }
  return out;
}

// Same values up to a float rounding of a reordered sum: NaN where the reference has NaN, equal infinities,
// |a - b| <= 1e-3 * (|b| + the reference's largest magnitude) for floats (1e-2 for 16-bit floats), exact otherwise.
bool SameOutputs(DType dtype, const std::string& got, const std::string& want) {
  if (got.size() != want.size()) return false;
  const int item = dtype.ItemSize();
  const size_t n = want.size() / static_cast<size_t>(item);
  const ScalarType t = dtype.scalar;
  if (!dtype.IsFloat()) return got == want;
  double scale = 0;
  for (size_t i = 0; i < n; ++i) {
    const double b = ElementAt(t, want.data() + i * item);
    if (std::isfinite(b)) scale = std::max(scale, std::fabs(b));
  }
  const double rtol = dtype.ItemSize() == 2 ? 1e-2 : 1e-3;
  for (size_t i = 0; i < n; ++i) {
    const double a = ElementAt(t, got.data() + i * item), b = ElementAt(t, want.data() + i * item);
    if (std::isnan(b) || std::isnan(a)) {
      if (std::isnan(a) != std::isnan(b)) return false;
      continue;
    }
    if (std::isinf(b) || std::isinf(a)) {
      if (a != b) return false;
      continue;
    }
    if (std::fabs(a - b) > rtol * (std::fabs(b) + scale) + 1e-30) return false;
  }
  return true;
}

// ---- candidates ----

struct Candidate {
  bool heuristic = false;
  std::vector<Opt> opts;
  int round = 0;       // 0: the starting pair
  std::string result;  // LoggedBeamCandidate::result; "" = not reached
  codegen::Program program;
  std::string source;
  std::unique_ptr<runtime::Program> runner;
  double seconds = std::numeric_limits<double>::infinity();
};

absl::StatusOr<codegen::Program> Lower(const UOpPtr& ast, const codegen::Target& target, bool heuristic,
                                       const std::vector<Opt>& opts) {
  codegen::LowerOptions lo;
  lo.use_explicit_opts = !heuristic;
  lo.opts = opts;
  return codegen::LowerKernel(ast, target, lo);
}

// Scratch parameters of the kernel and their initial contents.
struct Scratch {
  std::vector<std::shared_ptr<runtime::Buffer>> buffers;  // by slot
  std::vector<std::string> init;
  std::vector<runtime::DeviceMemory> mems;
  std::vector<bool> is_output;
};

absl::StatusOr<Scratch> MakeScratch(runtime::Device& dev, const codegen::Program& p) {
  Scratch s;
  const int64_t n = codegen::ParamCount(p);
  std::vector<const codegen::BufferParam*> by_slot(static_cast<size_t>(n), nullptr);
  for (const codegen::BufferParam& b : p.buffers) by_slot[static_cast<size_t>(b.slot)] = &b;
  std::mt19937_64 rng(0x6b696c6eULL);  // fixed: the same inputs for every candidate and every run
  for (int64_t i = 0; i < n; ++i) {
    const codegen::BufferParam* b = by_slot[static_cast<size_t>(i)];
    const DType dtype = b != nullptr ? b->dtype : dtypes::kFloat32;
    const int64_t numel = b != nullptr ? std::max<int64_t>(b->size, 1) : 1;
    KILN_ASSIGN_OR_RETURN(auto buf, runtime::Buffer::Create(&dev, dtype, numel));
    s.init.push_back(RandomBytes(dtype, numel, rng));
    s.mems.push_back(buf->memory());
    s.is_output.push_back(b != nullptr && b->is_output);
    s.buffers.push_back(std::move(buf));
  }
  return s;
}

absl::Status ResetScratch(Scratch& s) {
  for (size_t i = 0; i < s.buffers.size(); ++i) KILN_RETURN_IF_ERROR(s.buffers[i]->CopyIn(s.init[i].data(), s.init[i].size()));
  return absl::OkStatus();
}

runtime::LaunchDims DimsOf(const codegen::Program& p) {
  runtime::LaunchDims d;
  for (int i = 0; i < 3; ++i) {
    d.global[i] = p.global_size[i];
    d.local[i] = p.local_size[i];
  }
  d.threads = p.threads;
  return d;
}

// One run of `c` from the initial contents (its time becomes c.seconds); its output buffers' bytes.
// The values a candidate runs with: every Variable (a symbolic batch's row count) at its maximum, the largest work
// the kernel will see.
std::vector<int64_t> VarsAtMax(const codegen::Program& p) {
  std::vector<int64_t> out;
  for (const UOpPtr& v : p.vars) out.push_back(std::get<VarArg>(v->arg()).max);
  return out;
}

absl::StatusOr<std::vector<std::string>> CheckedRun(runtime::Device& dev, Candidate& c, Scratch& s) {
  KILN_RETURN_IF_ERROR(ResetScratch(s));
  KILN_ASSIGN_OR_RETURN(const double secs,
                        c.runner->Launch(s.mems, VarsAtMax(c.program), DimsOf(c.program), /*timed=*/true));
  KILN_RETURN_IF_ERROR(dev.Synchronize());
  c.seconds = secs;
  std::vector<std::string> out;
  for (size_t i = 0; i < s.buffers.size(); ++i) {
    if (!s.is_output[i]) continue;
    std::string bytes(s.buffers[i]->nbytes(), '\0');
    KILN_RETURN_IF_ERROR(s.buffers[i]->CopyOut(bytes.data(), bytes.size()));
    out.push_back(std::move(bytes));
  }
  return out;
}

std::vector<DType> OutputDtypes(const Scratch& s) {
  std::vector<DType> out;
  for (size_t i = 0; i < s.buffers.size(); ++i)
    if (s.is_output[i]) out.push_back(s.buffers[i]->dtype());
  return out;
}

std::string CacheKeyFor(runtime::Device& dev, const UOpPtr& ast, int width) {
  Sha256 h;
  for (const std::string& f : {dev.name(), dev.renderer(), dev.compiler().CacheKey(), DigestHex(ast->Key()),
                               std::to_string(width)}) {
    const uint64_t n = f.size();
    h.Update(&n, sizeof(n));
    h.Update(f);
  }
  return absl::StrCat("beam:", DigestHex(h.Final()));
}

std::string OptsText(const BeamChoice& c) {
  if (c.heuristic) return "heuristic";
  if (c.opts.empty()) return "none";
  std::vector<std::string> parts;
  for (const Opt& o : c.opts) parts.push_back(o.ToString());
  return absl::StrJoin(parts, ", ");
}

// Compiles candidates [first, end) on every core until `deadline`; the failures and the ones not reached are left
// without a runner.
void CompileAll(runtime::Device& dev, std::vector<Candidate>& cands, size_t first, runtime::CompileCache& cache,
                Clock::time_point deadline) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = static_cast<int>(std::min<size_t>(cands.size() - first, static_cast<size_t>(hw)));
  const int64_t knobs[] = {GetKnob(Knob::kDebug), GetKnob(Knob::kCacheLevel)};
  std::atomic<size_t> next{first};
  auto work = [&] {
    Context scope({{Knob::kDebug, knobs[0] >= 4 ? 0 : knobs[0]}, {Knob::kCacheLevel, knobs[1]}});
    for (size_t i; Clock::now() < deadline && (i = next.fetch_add(1)) < cands.size();) {
      absl::StatusOr<runtime::CompiledKernel> k = runtime::CompileKernel(dev, cands[i].program, &cache);
      if (k.ok()) cands[i].runner = std::move(k->program);
      else cands[i].result = "failed";
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

// The VIZ list of what the search tried (BeamChoice::tried).
std::vector<LoggedBeamCandidate> TriedOf(const std::vector<Candidate>& all) {
  std::vector<LoggedBeamCandidate> out;
  for (const Candidate& c : all) {
    std::vector<std::string> parts;
    for (const Opt& o : c.opts) parts.push_back(o.ToString());
    LoggedBeamCandidate t;
    const std::string opts = parts.empty() ? "no opts" : absl::StrJoin(parts, ", ");
    t.opts = c.heuristic ? absl::StrCat("heuristic: ", opts) : opts;
    t.round = c.round;
    t.result = c.result.empty() ? "not timed" : c.result;
    t.seconds = std::isfinite(c.seconds) ? c.seconds : -1;
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<BeamChoice> SearchCandidates(runtime::Device& dev, const UOpPtr& ast,
                                            const codegen::Target& target, int width,
                                            std::vector<Candidate>& all);

// The search; while VIZ is on, with its candidates listed.
absl::StatusOr<BeamChoice> Search(runtime::Device& dev, const UOpPtr& ast, const codegen::Target& target, int width) {
  const bool record = KernelLog::Enabled();
  // The candidates' lowerings are not rewrite passes of any kernel: keep them out of the trace
  // (the counters stay).
  const int64_t track = std::min<int64_t>(GetKnob(Knob::kTrackMatchStats), 1);
  Context untraced({{Knob::kTrackMatchStats, track}});
  std::vector<Candidate> all;
  absl::StatusOr<BeamChoice> choice = SearchCandidates(dev, ast, target, width, all);
  if (record && choice.ok()) {
    choice->tried = TriedOf(all);
    // Stopped early: the heuristic's kernel stays.
    if (choice->chosen < 0 && choice->heuristic && !all.empty()) choice->chosen = 0;
  }
  return choice;
}

absl::StatusOr<BeamChoice> SearchCandidates(runtime::Device& dev, const UOpPtr& ast,
                                            const codegen::Target& target, int width,
                                            std::vector<Candidate>& all) {
  const auto t0 = Clock::now();
  const double budget = static_cast<double>(std::max<int64_t>(1, GetKnob(Knob::kBeamBudget)));
  BeamChoice choice;
  // Candidate binaries are kept in memory for this search only (the winner is compiled again through the global
  // cache by the caller), so the disk cache holds no losers.
  runtime::CompileCache local(runtime::CompileCache::Options{"", 256, 64u << 20, /*disk=*/false});
  {
    Candidate h;
    h.heuristic = true;
    KILN_ASSIGN_OR_RETURN(h.program, Lower(ast, target, true, {}));
    KILN_ASSIGN_OR_RETURN(h.opts, codegen::HeuristicOpts(ast, target));
    all.push_back(std::move(h));
    Candidate base;
    absl::StatusOr<codegen::Program> bp = Lower(ast, target, false, {});
    if (!bp.ok()) return choice;  // no explicit-opt kernel to check against: keep the heuristic
    base.program = *std::move(bp);
    all.push_back(std::move(base));
  }
  const size_t uop_cap = std::max(kMinUopCap, kMaxUopGrowth * all[0].program.uops.size());
  KILN_ASSIGN_OR_RETURN(const codegen::Renderer* renderer, codegen::RendererFor(dev.renderer()));
  absl::flat_hash_set<std::string> seen;
  for (Candidate& c : all) {
    KILN_ASSIGN_OR_RETURN(c.source, renderer->Render(c.program));
    seen.insert(c.source);
  }
  CompileAll(dev, all, 0, local, Clock::time_point::max());
  if (all[0].runner == nullptr || all[1].runner == nullptr) return choice;
  KILN_ASSIGN_OR_RETURN(Scratch scratch, MakeScratch(dev, all[1].program));
  // The reference outputs: the no-opt kernel's.
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> want, CheckedRun(dev, all[1], scratch));
  all[1].result = "reference";
  // The budget counts from here: the reference run of a big kernel without opts (seconds for a 2048^3 matmul) is
  // paid once, whatever the budget.
  const auto search_t0 = Clock::now();
  const std::vector<DType> out_dtypes = OutputDtypes(scratch);
  double best = std::numeric_limits<double>::infinity();
  // Checks and times all[i]; false when it was rejected or failed.
  auto measure = [&](Candidate& c) -> bool {
    if (c.runner == nullptr) return false;  // result: "failed" (did not compile) or "" (budget)
    c.result = "failed";
    if (codegen::ParamCount(c.program) != static_cast<int64_t>(scratch.mems.size())) return false;
    for (const codegen::BufferParam& b : c.program.buffers)
      if (b.size > scratch.buffers[static_cast<size_t>(b.slot)]->numel()) return false;
    absl::StatusOr<std::vector<std::string>> got = CheckedRun(dev, c, scratch);
    if (!got.ok()) return false;
    for (size_t i = 0; i < want.size(); ++i) {
      if (!SameOutputs(out_dtypes[i], (*got)[i], want[i])) {
        c.result = "rejected";
        ++choice.rejected;
        if (DebugLevel() >= 3)
          std::fprintf(stderr, "beam %s: candidate [%s] rejected: its output %zu differs from the no-opt kernel's\n",
                       all[0].program.name.c_str(), absl::StrJoin(c.program.applied_opts, ", ").c_str(), i);
        return false;
      }
    }
    ++choice.candidates;
    c.result = c.seconds <= kSlowFactor * best && c.seconds <= budget ? "timed" : "slow";
    const runtime::LaunchDims dims = DimsOf(c.program);
    // The checked run is the first timed one; more runs only for a candidate that may win.
    for (int r = 1; r < kTimedRuns && c.seconds <= kSlowFactor * best && c.seconds <= budget; ++r) {
      absl::StatusOr<double> s = c.runner->Launch(scratch.mems, VarsAtMax(c.program), dims, /*timed=*/true);
      if (!s.ok() || !dev.Synchronize().ok()) return false;
      c.seconds = std::min(c.seconds, *s);
    }
    best = std::min(best, c.seconds);
    return true;
  };
  // The no-opt kernel's reference run timed it once: it is a slow kernel, not worth more runs.
  if (!measure(all[0])) return choice;  // the heuristic's kernel disagrees with the no-opt one: keep it, search no more
  best = std::min(best, all[1].seconds);
  choice.heuristic_seconds = all[0].seconds;
  std::vector<size_t> beam = {0, 1};
  std::sort(beam.begin(), beam.end(), [&](size_t a, size_t b) { return all[a].seconds < all[b].seconds; });
  // Kernels far slower than the best are not extended (their extensions would be slow to time, and lose).
  auto prune = [&](std::vector<size_t>& b) {
    b.erase(std::remove_if(b.begin(), b.end(), [&](size_t i) { return all[i].seconds > kSlowFactor * best; }),
            b.end());
  };
  prune(beam);
  const std::vector<Opt> actions = BeamActions(target);
  while (Since(search_t0) < budget) {
    ++choice.rounds;
    const size_t first = all.size();
    for (size_t bi : beam) {
      if (!std::isfinite(all[bi].seconds)) continue;
      for (const Opt& a : actions) {
        Candidate c;
        c.opts = all[bi].opts;
        c.opts.push_back(a);
        c.round = choice.rounds;
        absl::StatusOr<codegen::Program> p = Lower(ast, target, false, c.opts);
        if (!p.ok() || p->uops.size() > uop_cap) continue;
        absl::StatusOr<std::string> src = renderer->Render(*p);
        if (!src.ok() || !seen.insert(*src).second) continue;
        c.program = *std::move(p);
        c.source = *std::move(src);
        all.push_back(std::move(c));
      }
    }
    if (all.size() == first) break;
    CompileAll(dev, all, first, local,
               search_t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(budget)));
    const double before = all[beam[0]].seconds;
    std::vector<size_t> timed;
    for (size_t i = first; i < all.size() && Since(search_t0) < budget; ++i)
      if (measure(all[i])) timed.push_back(i);
    for (size_t i = first; i < all.size(); ++i) all[i].runner.reset();  // code no longer needed
    std::sort(timed.begin(), timed.end(), [&](size_t a, size_t b) { return all[a].seconds < all[b].seconds; });
    if (timed.empty() || all[timed[0]].seconds >= before) break;  // no progress
    timed.resize(std::min(timed.size(), static_cast<size_t>(width)));
    prune(timed);
    beam = timed;
  }
  // The fastest candidate whose outputs passed the check (a rejected one was timed by its checked
  // run too).
  size_t win = 0;
  for (size_t i = 1; i < all.size(); ++i) {
    const std::string& r = all[i].result;
    const bool checked = r == "timed" || r == "slow" || r == "reference";
    if (checked && all[i].seconds < all[win].seconds) win = i;
  }
  choice.heuristic = all[win].heuristic;
  choice.opts = choice.heuristic ? std::vector<Opt>{} : all[win].opts;
  choice.best_seconds = all[win].seconds;
  choice.search_seconds = Since(t0);
  choice.kernel = all[0].program.name;
  choice.chosen = static_cast<int>(win);
  return choice;
}

}  // namespace

std::vector<Opt> BeamActions(const codegen::Target& target) {
  std::vector<Opt> a;
  for (int axis = 0; axis < 6; ++axis)
    for (int64_t amt : {0, 2, 3, 4, 5, 7, 8, 16}) a.push_back({OptOp::kUpcast, axis, amt});
  for (int axis = 0; axis < 4; ++axis)
    for (int64_t amt : {0, 2, 4, 7, 8, 16}) a.push_back({OptOp::kUnroll, axis, amt});
  if (target.has_local) {
    for (int axis = 0; axis < 4; ++axis)
      for (int64_t amt : {2, 4, 8, 16, 32}) a.push_back({OptOp::kLocal, axis, amt});
    for (int axis = 0; axis < 3; ++axis)
      for (int64_t amt : {16, 32, 64, 256}) a.push_back({OptOp::kGroupTop, axis, amt});
  } else {
    for (int axis = 0; axis < 3; ++axis)
      for (int64_t amt : {2, 4, 8, 16}) a.push_back({OptOp::kAcc, axis, amt});
  }
  if (target.has_threads && target.max_threads > 1) {
    for (int axis = 0; axis < 3; ++axis)
      for (int64_t amt = 2; amt <= target.max_threads; amt *= 2) a.push_back({OptOp::kThread, axis, amt});
  }
  return a;
}

std::string EncodeBeamChoice(const BeamChoice& c) {
  if (c.heuristic) return "heuristic";
  std::vector<std::string> parts;
  for (const Opt& o : c.opts) parts.push_back(absl::StrCat(std::string(codegen::OptOpName(o.op)), ",", o.axis, ",", o.arg));
  return absl::StrCat("opts:", absl::StrJoin(parts, ";"));
}

bool DecodeBeamChoice(const std::string& text, BeamChoice* c) {
  *c = BeamChoice{};
  if (text == "heuristic") return true;
  if (text.rfind("opts:", 0) != 0) return false;
  c->heuristic = false;
  const std::string body = text.substr(5);
  if (body.empty()) return true;
  for (absl::string_view part : absl::StrSplit(body, ';')) {
    std::vector<absl::string_view> f = absl::StrSplit(part, ',');
    if (f.size() != 3) return false;
    Opt o;
    bool known = false;
    for (OptOp op : {OptOp::kUpcast, OptOp::kUnroll, OptOp::kThread, OptOp::kLocal, OptOp::kGroup, OptOp::kGroupTop,
                     OptOp::kAcc, OptOp::kTc}) {
      if (codegen::OptOpName(op) == std::string_view(f[0].data(), f[0].size())) {
        o.op = op;
        known = true;
      }
    }
    int64_t axis = 0;
    if (!known || !absl::SimpleAtoi(f[1], &axis) || !absl::SimpleAtoi(f[2], &o.arg)) return false;
    o.axis = static_cast<int>(axis);
    c->opts.push_back(o);
  }
  return true;
}

namespace {

bool Cached(const std::string& key, BeamChoice* c) {
  std::string text;
  if (!runtime::CompileCache::Global().Lookup(key, &text) || !DecodeBeamChoice(text, c)) return false;
  c->from_cache = true;
  const bool record = KernelLog::Enabled();
  absl::MutexLock l(&g_counters_mu);
  ++g_counters.cache_hits;
  if (record && g_records != nullptr) {  // this process searched it with VIZ on: show that search
    for (auto it = g_records->rbegin(); it != g_records->rend(); ++it) {
      if (it->first != key) continue;
      const bool chose_it = it->second.heuristic == c->heuristic && it->second.opts == c->opts;
      if (!chose_it) break;
      c->tried = it->second.tried;
      c->chosen = it->second.chosen;
      c->rounds = it->second.rounds;
      c->search_seconds = it->second.search_seconds;
      c->heuristic_seconds = it->second.heuristic_seconds;
      c->best_seconds = it->second.best_seconds;
      break;
    }
  }
  return true;
}

// Searches (under g_search_mu) unless the cache has it by now; stores and counts the result.
absl::StatusOr<BeamChoice> SearchAndStore(runtime::Device& dev, const UOpPtr& ast, const codegen::Target& target,
                                          int width, const std::string& key) {
  absl::MutexLock search(&g_search_mu);
  BeamChoice c;
  if (Cached(key, &c)) return c;  // another thread searched it meanwhile
  KILN_ASSIGN_OR_RETURN(c, Search(dev, ast, target, width));
  runtime::CompileCache::Global().Store(key, EncodeBeamChoice(c));
  absl::MutexLock l(&g_counters_mu);
  ++g_counters.searches;
  g_counters.candidates += c.candidates;
  g_counters.search_seconds += c.search_seconds;
  if (g_log == nullptr) g_log = new std::vector<BeamChoice>();
  g_log->push_back(c);
  g_log->back().tried.clear();  // the log keeps the figures only
  if (!c.tried.empty()) {
    if (g_records == nullptr) g_records = new std::deque<std::pair<std::string, BeamChoice>>();
    g_records->emplace_back(key, c);
    while (g_records->size() > kMaxBeamRecords) g_records->pop_front();
  }
  return c;
}

// ---- background tuning ----

struct TuneJob {
  runtime::Device* dev;
  UOpPtr ast;
  codegen::Target target;
  int width;
  std::string key;
  // The enqueuing thread's knobs, which the search runs under.
  int64_t budget = GetKnob(Knob::kBeamBudget);
  int64_t debug = GetKnob(Knob::kDebug);
  int64_t cache_level = GetKnob(Knob::kCacheLevel);
  int64_t viz = GetKnob(Knob::kViz);
};

struct Tuner {
  absl::Mutex mu;
  std::deque<TuneJob> queue ABSL_GUARDED_BY(mu);
  absl::flat_hash_set<std::string> queued ABSL_GUARDED_BY(mu);  // keys queued or running
  bool started ABSL_GUARDED_BY(mu) = false;
  std::atomic<bool> on{false};
  std::atomic<int64_t> generation{0};

  void Enqueue(TuneJob job) {
    absl::MutexLock l(&mu);
    if (!queued.insert(job.key).second) return;
    queue.push_back(std::move(job));
    if (!started) {
      started = true;
      std::thread([this] { Loop(); }).detach();  // lives as long as the process
    }
  }

  void Loop() {
    for (;;) {
      TuneJob job;
      {
        absl::MutexLock l(&mu);
        mu.Await(absl::Condition(
            +[](std::deque<TuneJob>* q) { return !q->empty(); }, &queue));
        job = std::move(queue.front());
        queue.pop_front();
      }
      Context knobs({{Knob::kBeamBudget, job.budget}, {Knob::kDebug, job.debug}, {Knob::kCacheLevel, job.cache_level},
                     {Knob::kBeam, job.width}, {Knob::kViz, job.viz}});
      absl::StatusOr<BeamChoice> c = SearchAndStore(*job.dev, job.ast, job.target, job.width, job.key);
      if (!c.ok() && DebugLevel() >= 1)
        std::fprintf(stderr, "beam: background search failed: %s\n", std::string(c.status().message()).c_str());
      if (c.ok() && DebugLevel() >= 2 && !c->from_cache)
        std::fprintf(stderr, "beam %s (background): %.2f us -> %.2f us [%s]\n", c->kernel.c_str(),
                     c->heuristic_seconds * 1e6, c->best_seconds * 1e6, OptsText(*c).c_str());
      job.ast = nullptr;  // the search's graph nodes are not kept
      absl::MutexLock l(&mu);
      queued.erase(job.key);
      if (queue.empty()) generation.fetch_add(1);  // every queued choice is stored: runs may swap them in
    }
  }

  int64_t Pending() {
    absl::MutexLock l(&mu);
    return static_cast<int64_t>(queued.size());
  }
};

Tuner& GetTuner() {
  static Tuner* t = new Tuner();  // never destroyed: its thread may outlive static destruction
  return *t;
}

}  // namespace

void SetBeamBackground(bool on) { GetTuner().on.store(on); }
bool BeamBackground() { return GetTuner().on.load(); }
int64_t BeamGeneration() { return GetTuner().generation.load(); }

void WaitForBeamIdle() {
  Tuner& t = GetTuner();
  absl::MutexLock l(&t.mu);
  t.mu.Await(absl::Condition(
      +[](absl::flat_hash_set<std::string>* q) { return q->empty(); }, &t.queued));
}

absl::StatusOr<BeamChoice> BeamOpts(runtime::Device& dev, const UOpPtr& ast, const codegen::Target& target,
                                    int width) {
  if (width <= 0 || !dev.executes()) return BeamChoice{};
  const std::string key = CacheKeyFor(dev, ast, width);
  BeamChoice c;
  if (!Cached(key, &c)) {
    if (BeamBackground()) {  // the heuristic now, the search later (the tuner's thread)
      GetTuner().Enqueue(TuneJob{&dev, ast, target, width, key});
      return BeamChoice{};
    }
    KILN_ASSIGN_OR_RETURN(c, SearchAndStore(dev, ast, target, width, key));
  }
  if (DebugLevel() >= 2) {
    if (c.from_cache) {
      std::fprintf(stderr, "beam: cached choice [%s]\n", OptsText(c).c_str());
    } else {
      std::fprintf(stderr,
                   "beam %s: %d candidates (%d rejected) in %d rounds, %.2f s: heuristic %.2f us -> %.2f us (%.2fx) "
                   "[%s]\n",
                   c.kernel.c_str(), c.candidates, c.rejected, c.rounds, c.search_seconds, c.heuristic_seconds * 1e6,
                   c.best_seconds * 1e6, c.best_seconds > 0 ? c.heuristic_seconds / c.best_seconds : 0.0,
                   OptsText(c).c_str());
    }
  }
  return c;
}

BeamCounters GetBeamCounters() {
  BeamCounters c;
  {
    absl::MutexLock l(&g_counters_mu);
    c = g_counters;
  }
  c.pending = GetTuner().Pending();
  c.generation = BeamGeneration();
  return c;
}

std::vector<BeamChoice> BeamSearchLog() {
  absl::MutexLock l(&g_counters_mu);
  return g_log != nullptr ? *g_log : std::vector<BeamChoice>{};
}

}  // namespace kiln
