// Kernel optimisations: Opt application by splitting RANGEs (tinygrad shift_to) and the hand-coded heuristic
// (tinygrad codegen/opt/heuristic.py, adapted to CPUs).
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status.h"
#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"
#include "engine/symbolic/symbolic.h"

namespace kiln::codegen {

std::string_view OptOpName(OptOp op) {
  switch (op) {
    case OptOp::kUpcast: return "UPCAST";
    case OptOp::kUnroll: return "UNROLL";
    case OptOp::kThread: return "THREAD";
    case OptOp::kLocal: return "LOCAL";
    case OptOp::kGroup: return "GROUP";
    case OptOp::kGroupTop: return "GROUPTOP";
  }
  return "?";
}

std::string Opt::ToString() const { return absl::StrFormat("%s(%d,%d)", std::string(OptOpName(op)), axis, arg); }

int64_t LowerContext::OrderOf(int64_t id) const {
  auto it = std::find(order.begin(), order.end(), id);
  if (it != order.end()) return it - order.begin();
  return static_cast<int64_t>(order.size()) + id;
}

int64_t LowerContext::OrderOf(const UOp* range) const {
  const auto* a = std::get_if<AxisArg>(&range->arg());
  return a == nullptr ? static_cast<int64_t>(order.size()) : OrderOf(a->id);
}

namespace {

bool IsReduceType(AxisType t) { return t == AxisType::kReduce || t == AxisType::kUnroll || t == AxisType::kGroupReduce; }

int64_t RangeSize(const UOp* r) {
  int64_t v = 0;
  return ConstInt(r->src(0), &v) ? v : -1;
}

}  // namespace

absl::Status InitAxes(const UOpPtr& sink, LowerContext& ctx) {
  if (!sink || sink->op() != Op::SINK) return absl::InvalidArgumentError("kernel AST: root must be a SINK");
  if (sink->num_src() == 0) return absl::InvalidArgumentError("kernel AST: SINK has no stores");
  for (const UOpPtr& s : sink->src()) {
    if (s->op() != Op::END && s->op() != Op::STORE)
      return absl::InvalidArgumentError(
          absl::StrCat("kernel AST: SINK sources must be END or STORE, got ", std::string(OpName(s->op()))));
  }
  absl::flat_hash_map<int64_t, const UOp*> by_id;
  std::vector<std::pair<int64_t, bool>> ids;  // (id, is_reduce)
  ctx.has_reduce = false;
  for (const UOp* u : Toposort(sink)) {
    if (IsTensorOnly(u->op()))
      return absl::InvalidArgumentError(
          absl::StrCat("kernel AST: tensor-level op ", std::string(OpName(u->op())), " in a kernel"));
    if (u->op() == Op::REDUCE) ctx.has_reduce = true;
    if (u->op() != Op::RANGE) continue;
    const auto* a = std::get_if<AxisArg>(&u->arg());
    if (a == nullptr) return absl::InvalidArgumentError("kernel AST: RANGE without an AxisArg");
    auto [it, fresh] = by_id.emplace(a->id, u);
    if (!fresh && it->second != u)
      return absl::InvalidArgumentError(absl::StrCat("kernel AST: two different RANGEs share axis id ", a->id));
    if (fresh) ids.push_back({a->id, IsReduceType(a->type)});
  }
  // Reduce nesting level of each range: a REDUCE inside the value of another REDUCE (a pool or conv followed by a
  // sum in one kernel) runs its loops inside the outer one's, so its ranges come after the outer reduce's ranges in
  // the loop nest, whatever their ids. Level 0 = output axes; level k = ranges of a REDUCE nested k-1 deep.
  absl::flat_hash_map<const UOp*, int> depth;  // REDUCEs enclosing a node's use
  absl::flat_hash_map<int64_t, int> level;     // axis id -> level
  {
    std::vector<const UOp*> topo = Toposort(sink);
    for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
      const UOp* u = *it;
      const int d = depth[u];
      if (u->op() == Op::REDUCE) {
        for (size_t i = 1; i < u->num_src(); ++i) {
          const UOp* r = u->src(i).get();
          if (const auto* a = r->op() == Op::RANGE ? std::get_if<AxisArg>(&r->arg()) : nullptr) {
            int& l = level[a->id];
            l = std::max(l, d + 1);
          }
        }
        if (u->num_src() > 0) {
          int& s = depth[u->src(0).get()];
          s = std::max(s, d + 1);
        }
        continue;
      }
      for (const UOpPtr& s : u->src()) {
        int& sd = depth[s.get()];
        sd = std::max(sd, d);
      }
    }
  }
  auto level_of = [&](int64_t id) {
    auto it = level.find(id);
    return it == level.end() ? 0 : it->second;
  };
  std::sort(ids.begin(), ids.end(), [&](const auto& x, const auto& y) {
    if (x.second != y.second) return !x.second;
    const int lx = level_of(x.first), ly = level_of(y.first);
    return lx != ly ? lx < ly : x.first < y.first;
  });
  ctx.order.clear();
  ctx.next_axis_id = 0;
  for (const auto& [id, red] : ids) {
    ctx.order.push_back(id);
    ctx.next_axis_id = std::max(ctx.next_axis_id, id + 1);
  }
  return absl::OkStatus();
}

std::vector<UOpPtr> AxesOfType(const UOpPtr& sink, const LowerContext& ctx, std::initializer_list<AxisType> types) {
  std::vector<UOpPtr> out;
  for (const UOp* u : Toposort(sink)) {
    if (u->op() != Op::RANGE) continue;
    const auto* a = std::get_if<AxisArg>(&u->arg());
    if (a != nullptr && std::find(types.begin(), types.end(), a->type) != types.end())
      out.push_back(UOpPtr::FromRaw(u));
  }
  std::sort(out.begin(), out.end(),
            [&](const UOpPtr& x, const UOpPtr& y) { return ctx.OrderOf(x.get()) < ctx.OrderOf(y.get()); });
  return out;
}

namespace {

// Splits RANGE `r` (size n) into `amt` lanes of `new_type`: bottom split r -> outer*amt + new, top split
// r -> new*(n/amt) + outer. amt == n retypes r in place. END/REDUCE range lists get both ranges.
absl::StatusOr<UOpPtr> SplitRange(const UOpPtr& sink, const UOpPtr& r, int64_t amt, AxisType new_type, bool top,
                                  LowerContext& ctx) {
  const int64_t n = RangeSize(r.get());
  const AxisArg arg = std::get<AxisArg>(r->arg());
  if (n < 0) return absl::InvalidArgumentError("opt: cannot split an axis of symbolic size");
  if (amt <= 0 || n % amt != 0)
    return absl::InvalidArgumentError(absl::StrCat("opt: split amount ", amt, " does not divide axis size ", n));
  std::vector<UOpPtr> parts;  // loop-nest order
  UOpPtr expr;
  const int64_t pos = ctx.OrderOf(arg.id);
  if (amt == n) {
    UOpPtr nr = UOp::Make(Op::RANGE, r->dtype(), {r->src(0)}, AxisArg{arg.id, new_type});
    parts = {nr};
    expr = nr;
  } else {
    int64_t new_id = ctx.next_axis_id++;
    UOpPtr outer = UOp::Make(Op::RANGE, r->dtype(), {UOp::Const(r->dtype(), n / amt)}, arg);
    UOpPtr inner = UOp::Make(Op::RANGE, r->dtype(), {UOp::Const(r->dtype(), amt)}, AxisArg{new_id, new_type});
    if (top) {
      parts = {inner, outer};
      expr = inner * (n / amt) + outer;
      ctx.order.insert(ctx.order.begin() + pos, new_id);
    } else {
      parts = {outer, inner};
      expr = outer * amt + inner;
      ctx.order.insert(ctx.order.begin() + pos + 1, new_id);
    }
  }
  const UOp* target = r.get();
  return RewriteBottomUp(sink, [&](const UOp* orig, const UOpPtr& rebuilt) -> UOpPtr {
    if (orig == target) return expr;
    if (orig->op() != Op::END && orig->op() != Op::REDUCE) return nullptr;
    bool has = false;
    for (const UOpPtr& s : orig->src()) has |= s.get() == target;
    if (!has) return nullptr;
    UOpVec src;
    for (size_t i = 0; i < orig->num_src(); ++i) {
      if (orig->src(i).get() == target && (orig->op() == Op::END || i > 0)) {
        for (const UOpPtr& p : parts) src.push_back(p);
      } else {
        src.push_back(rebuilt->src(i));
      }
    }
    return rebuilt->WithSrc(src);
  });
}

}  // namespace

absl::StatusOr<UOpPtr> ApplyOpt(const UOpPtr& sink, const Opt& opt, LowerContext& ctx) {
  const bool reduce_side = opt.op == OptOp::kUnroll || opt.op == OptOp::kGroup || opt.op == OptOp::kGroupTop;
  std::vector<UOpPtr> axes = reduce_side ? AxesOfType(sink, ctx, {AxisType::kReduce})
                                         : AxesOfType(sink, ctx, {AxisType::kLoop, AxisType::kGlobal});
  const std::string what = opt.ToString();
  if (opt.axis < 0 || opt.axis >= static_cast<int>(axes.size()))
    return absl::InvalidArgumentError(
        absl::StrCat("opt ", what, ": axis out of range (kernel has ", axes.size(),
                     reduce_side ? " reduce axes)" : " output axes)"));
  const UOpPtr& r = axes[opt.axis];
  const int64_t n = RangeSize(r.get());
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("opt ", what, ": axis has a symbolic size"));
  const int64_t amt = opt.arg == 0 ? n : opt.arg;
  if (amt <= 0 || n % amt != 0)
    return absl::InvalidArgumentError(absl::StrCat("opt ", what, ": ", amt, " does not divide axis size ", n));
  UOpPtr out;
  switch (opt.op) {
    case OptOp::kUpcast: {
      if (amt > 16) return absl::InvalidArgumentError(absl::StrCat("opt ", what, ": upcast amount above 16"));
      KILN_ASSIGN_OR_RETURN(out, SplitRange(sink, r, amt, AxisType::kUpcast, false, ctx));
      break;
    }
    case OptOp::kUnroll: {
      if (amt > 32) return absl::InvalidArgumentError(absl::StrCat("opt ", what, ": unroll amount above 32"));
      KILN_ASSIGN_OR_RETURN(out, SplitRange(sink, r, amt, AxisType::kUnroll, false, ctx));
      break;
    }
    case OptOp::kThread: {
      if (!ctx.target.has_threads)
        return absl::InvalidArgumentError(absl::StrCat("opt ", what, ": target has no threads"));
      if (amt > ctx.target.max_threads)
        return absl::InvalidArgumentError(
            absl::StrCat("opt ", what, ": more threads than the target's ", ctx.target.max_threads));
      if (ctx.threads != 1) return absl::InvalidArgumentError(absl::StrCat("opt ", what, ": only one THREAD opt"));
      KILN_ASSIGN_OR_RETURN(out, SplitRange(sink, r, amt, AxisType::kThread, true, ctx));
      ctx.threads = static_cast<int>(amt);
      break;
    }
    case OptOp::kLocal:
    case OptOp::kGroup:
    case OptOp::kGroupTop: {
      // Work-group axes (GPU targets): validated in gpu_opt.cc, lowered by "lower group reduces" and "lower gpu dims".
      KILN_RETURN_IF_ERROR(CheckLocalOpt(sink, opt, amt, ctx));
      const bool local = opt.op == OptOp::kLocal;
      KILN_ASSIGN_OR_RETURN(out, SplitRange(sink, r, amt, local ? AxisType::kLocal : AxisType::kGroupReduce,
                                            opt.op == OptOp::kGroupTop, ctx));
      break;
    }
  }
  ctx.applied_opts.push_back(what);
  return out;
}

// ---------------------------------------------------------------------------------------------
// The hand-coded heuristic
// ---------------------------------------------------------------------------------------------

namespace {

// Register tile for a reduce kernel with >= 2 output axes (a matmul C[m, n] = sum_k A[m, k] * B[k, n], batched or
// not): the innermost output axis n is upcast by two SIMD vectors' worth of floats (its lanes are contiguous in C and
// in B, so LLVM turns each row of lanes into vector loads and vector math), the next output axis m by tm rows (each
// A element is loaded once and broadcast over the row), and the last reduce axis is unrolled by 2 (4 measured no
// faster and doubles the LLVM compile time of the 512-lane body). That leaves tm * 2 vector accumulators live
// across the K loop (AVX-512: 8 x 32 floats = 16 zmm of 32; AVX2: 4 x 16 = 8 ymm of 16). Threads split the
// outermost output axis. Finally the n loop is placed outside the m loop, so one B panel (K x tn floats) is reused
// from cache by every row block of the thread (measured ~1.3-1.5x faster at 2048^3 than m outside n; a 16 x 16
// tile measured slower). Only when LanesContiguous holds for n. Returns false (nothing applied) when the kernel
// does not fit the pattern; errors only for opts that fail to apply (a bug).
// True when every global-buffer INDEX in the kernel moves by 0 or 1 element when output axis `n` steps from 0 to 1
// (all other ranges at 0), and at least one moves by 1: the n lanes are contiguous or broadcast in every buffer, so
// they vectorize without gathers. Indices whose offsets do not fold to constants count as non-contiguous.
bool LanesContiguous(const UOpPtr& sink, const UOpPtr& n) {
  absl::flat_hash_map<const UOp*, UOpPtr> at0, at1;
  for (const UOp* u : Toposort(sink)) {
    if (u->op() != Op::RANGE) continue;
    at0.emplace(u, UOp::Const(u->dtype(), int64_t{0}));
    at1.emplace(u, UOp::Const(u->dtype(), int64_t{u == n.get() ? 1 : 0}));
  }
  bool any = false;
  for (const UOp* u : Toposort(sink)) {
    if (u->op() != Op::INDEX || u->num_src() < 2 || u->src(0)->op() != Op::PARAM) continue;
    int64_t a = 0, b = 0;
    if (!ConstInt(Simplify(Substitute(u->src(1), at0)), &a) ||
        !ConstInt(Simplify(Substitute(u->src(1), at1)), &b))
      return false;
    if (b - a != 0 && b - a != 1) return false;
    any |= b - a == 1;
  }
  return any;
}

template <typename Apply>
absl::StatusOr<bool> MatmulTile(UOpPtr& cur, LowerContext& ctx, const std::vector<int64_t>& out,
                                const std::vector<int64_t>& red, int64_t work, Apply& apply) {
  if (!ctx.has_reduce || out.size() < 2 || red.empty() || work < (int64_t{1} << 18)) return false;
  const int vf = std::max(4, ctx.target.vector_bytes / 4);  // floats per SIMD register
  const int nm = static_cast<int>(out.size()) - 2, nn = static_cast<int>(out.size()) - 1;
  const int64_t n = out[nn], m = out[nm], k = red.back();
  if (!LanesContiguous(cur, AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal})[nn]))
    return false;
  int64_t tn = 0;
  for (int64_t c : {int64_t{2} * vf, int64_t{vf}}) {
    if (n % c == 0) {
      tn = c;
      break;
    }
  }
  if (tn == 0) return false;
  int64_t tm = 0;
  static constexpr int64_t kRowsWide[] = {8, 6, 4, 2}, kRowsNarrow[] = {4, 3, 2, 0};
  for (int64_t c : vf >= 16 ? kRowsWide : kRowsNarrow) {
    if (c > 0 && m % c == 0) {
      tm = c;
      break;
    }
  }
  if (tm == 0) return false;
  // Threads over the outermost output axis (m itself when there is no batch axis), keeping whole row tiles.
  int threads = 1;
  if (ctx.target.has_threads && ctx.target.max_threads > 1) {
    const int64_t unit = nm == 0 ? tm : 1;
    for (int t : {32, 16, 12, 8, 6, 5, 4, 3, 2}) {
      if (t <= ctx.target.max_threads && out[0] % (t * unit) == 0 && work / t >= 128 * 1024) {
        threads = t;
        break;
      }
    }
  }
  if (threads > 1) KILN_RETURN_IF_ERROR(apply({OptOp::kThread, 0, threads}));
  // The THREAD split may have used up a batch axis entirely: count the output axes again.
  const int left =
      static_cast<int>(AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal}).size());
  if (left < 2) return true;
  const int am = left - 2, an = left - 1;
  KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, an, std::min<int64_t>(tn, 16)}));
  if (tn > 16) KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, an, tn / 16}));
  KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, am, tm}));
  const int last = static_cast<int>(red.size()) - 1;
  if (k % 2 == 0 && k > 2) {
    KILN_RETURN_IF_ERROR(apply({OptOp::kUnroll, last, 2}));
  } else if (k == 2) {
    KILN_RETURN_IF_ERROR(apply({OptOp::kUnroll, last, 0}));
  }
  // Loop order: the remaining n loop outside the remaining m loop.
  std::vector<UOpPtr> rest = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
  if (rest.size() >= 2 && n > tn && RangeSize(rest.back().get()) == n / tn) {
    const int64_t id_m = std::get<AxisArg>(rest[rest.size() - 2]->arg()).id;
    const int64_t id_n = std::get<AxisArg>(rest[rest.size() - 1]->arg()).id;
    auto pm = std::find(ctx.order.begin(), ctx.order.end(), id_m);
    auto pn = std::find(ctx.order.begin(), ctx.order.end(), id_n);
    if (pm != ctx.order.end() && pn != ctx.order.end()) std::iter_swap(pm, pn);
  }
  return true;
}

}  // namespace

absl::StatusOr<UOpPtr> ApplyHeuristic(const UOpPtr& sink, LowerContext& ctx, std::vector<Opt>* chosen) {
  UOpPtr cur = sink;
  auto apply = [&](Opt o) -> absl::Status {
    KILN_ASSIGN_OR_RETURN(cur, ApplyOpt(cur, o, ctx));
    chosen->push_back(o);
    return absl::OkStatus();
  };
  auto sizes = [&](std::initializer_list<AxisType> t) {
    std::vector<int64_t> s;
    for (const UOpPtr& r : AxesOfType(cur, ctx, t)) s.push_back(RangeSize(r.get()));
    return s;
  };
  std::vector<int64_t> out = sizes({AxisType::kLoop, AxisType::kGlobal});
  std::vector<int64_t> red = sizes({AxisType::kReduce});
  if (std::any_of(out.begin(), out.end(), [](int64_t s) { return s < 0; }) ||
      std::any_of(red.begin(), red.end(), [](int64_t s) { return s < 0; }))
    return cur;  // symbolic sizes: leave the kernel as it is
  int64_t work = 1;
  for (int64_t s : out) work *= s;
  for (int64_t s : red) work *= s;

  // 0. matmul-like reduce kernels get a register-blocked micro-kernel (see MatmulTile).
  KILN_ASSIGN_OR_RETURN(bool tiled, MatmulTile(cur, ctx, out, red, work, apply));
  if (tiled) return cur;

  // 1. unroll the last reduce axis: fully when small, else by 4 (tinygrad step 7).
  int64_t lanes = 1;
  if (!red.empty()) {
    const int last = static_cast<int>(red.size()) - 1;
    const int64_t s = red[last];
    if (s > 1 && s <= 16) {
      KILN_RETURN_IF_ERROR(apply({OptOp::kUnroll, last, 0}));
      lanes *= s;
    } else if (s > 16 && s % 4 == 0) {
      KILN_RETURN_IF_ERROR(apply({OptOp::kUnroll, last, 4}));
      lanes *= 4;
    }
  }
  // 2. upcast the innermost output axis by 8 or 4 (vectorizable straight-line lanes; tinygrad steps 6 and 8);
  // elementwise kernels by a whole SIMD register when that is wider (16 floats with AVX-512).
  if (!out.empty()) {
    const int last = static_cast<int>(out.size()) - 1;
    const int64_t s = out[last];
    const int64_t simd = std::clamp(ctx.target.vector_bytes / 4, 8, 16);
    for (int64_t amt : {simd, int64_t{8}, int64_t{4}}) {
      const int64_t cap =
          ctx.has_reduce ? ctx.target.max_upcast : std::max<int64_t>(ctx.target.max_upcast, simd);
      if (amt <= cap && s % amt == 0 && s >= amt && lanes * amt <= 32) {
        KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, last, amt}));
        break;
      }
    }
  }
  // 3. threads over the outermost output axis with >= 128K ops per thread (tinygrad step 10).
  if (ctx.target.has_threads && ctx.target.max_threads > 1) {
    std::vector<int64_t> now = sizes({AxisType::kLoop, AxisType::kGlobal});
    if (!now.empty()) {
      for (int64_t t : {32, 16, 12, 8, 6, 5, 4, 3, 2}) {
        if (t <= ctx.target.max_threads && now[0] % t == 0 && work / t >= 128 * 1024) {
          KILN_RETURN_IF_ERROR(apply({OptOp::kThread, 0, t}));
          break;
        }
      }
    }
  }
  return cur;
}

std::string KernelName(const UOpPtr& sink, const LowerContext& ctx) {
  std::string name = ctx.has_reduce ? "r" : "E";
  std::vector<UOpPtr> axes = AxesOfType(
      sink, ctx, {AxisType::kThread, AxisType::kGlobal, AxisType::kLocal, AxisType::kLoop, AxisType::kGroupReduce,
                  AxisType::kReduce, AxisType::kUpcast, AxisType::kUnroll});
  auto rank = [](const UOpPtr& r) {
    AxisType t = std::get<AxisArg>(r->arg()).type;
    return t == AxisType::kThread ? -1 : static_cast<int>(t);
  };
  std::stable_sort(axes.begin(), axes.end(), [&](const UOpPtr& a, const UOpPtr& b) { return rank(a) < rank(b); });
  for (const UOpPtr& r : axes) {
    int64_t s = RangeSize(r.get());
    absl::StrAppend(&name, "_", s < 0 ? std::string("n") : absl::StrCat(s));
  }
  return name;
}

}  // namespace kiln::codegen
