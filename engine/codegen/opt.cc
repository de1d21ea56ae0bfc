// Kernel optimisations: Opt application by splitting RANGEs (tinygrad shift_to), and kernel names. The hand-coded
// heuristic that picks the opts is heuristic.cc.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status.h"
#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"

namespace kiln::codegen {

std::string_view OptOpName(OptOp op) {
  switch (op) {
    case OptOp::kUpcast: return "UPCAST";
    case OptOp::kUnroll: return "UNROLL";
    case OptOp::kThread: return "THREAD";
    case OptOp::kLocal: return "LOCAL";
    case OptOp::kGroup: return "GROUP";
    case OptOp::kGroupTop: return "GROUPTOP";
    case OptOp::kAcc: return "ACC";
    case OptOp::kTc: return "TC";
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

}  // namespace

int64_t RangeSize(const UOp* r) {
  int64_t v = 0;
  return ConstInt(r->src(0), &v) ? v : -1;
}

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

std::vector<UOpPtr> AxesOfType(const UOpPtr& sink, const LowerContext& ctx, std::initializer_list<AxisType> types,
                               bool symbolic) {
  std::vector<UOpPtr> out;
  for (const UOp* u : Toposort(sink)) {
    if (u->op() != Op::RANGE) continue;
    const auto* a = std::get_if<AxisArg>(&u->arg());
    if (a == nullptr || (!symbolic && !IsReduceType(a->type) && RangeSize(u) < 0)) continue;
    if (std::find(types.begin(), types.end(), a->type) != types.end())
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

// Splits reduce RANGE `r` (size n) into r_o (n / amt, still REDUCE) and `amt` UNROLL lanes r_i, and rewrites every
// REDUCE over r into REDUCE(REDUCE(x, ..., r_o), r_i): after expansion each lane is its own inner REDUCE (its own
// accumulator, all sharing one loop nest) and the lanes are combined once, after the loop.
absl::StatusOr<UOpPtr> SplitAcc(const UOpPtr& sink, const UOpPtr& r, int64_t amt, LowerContext& ctx) {
  const int64_t n = RangeSize(r.get());
  const AxisArg arg = std::get<AxisArg>(r->arg());
  if (n < 0 || amt <= 1 || n % amt != 0)
    return absl::InvalidArgumentError(absl::StrCat("opt: accumulator split ", amt, " does not divide axis size ", n));
  const int64_t new_id = ctx.next_axis_id++;
  UOpPtr outer = amt == n ? nullptr : UOp::Make(Op::RANGE, r->dtype(), {UOp::Const(r->dtype(), n / amt)}, arg);
  UOpPtr inner = UOp::Make(Op::RANGE, r->dtype(), {UOp::Const(r->dtype(), amt)}, AxisArg{new_id, AxisType::kUnroll});
  UOpPtr expr = outer ? outer * amt + inner : inner;
  ctx.order.insert(ctx.order.begin() + ctx.OrderOf(arg.id) + 1, new_id);
  const UOp* target = r.get();
  return RewriteBottomUp(sink, [&](const UOp* orig, const UOpPtr& rebuilt) -> UOpPtr {
    if (orig == target) return expr;
    if (orig->op() != Op::REDUCE) return nullptr;
    bool has = false;
    for (size_t i = 1; i < orig->num_src(); ++i) has |= orig->src(i).get() == target;
    if (!has) return nullptr;
    UOpVec src{rebuilt->src(0)};
    for (size_t i = 1; i < orig->num_src(); ++i) {
      if (orig->src(i).get() != target) src.push_back(rebuilt->src(i));
      else if (outer) src.push_back(outer);
    }
    UOpPtr in = src.size() == 1 ? src[0] : rebuilt->WithSrc(src);
    return UOp::Make(Op::REDUCE, rebuilt->dtype(), {in, inner}, rebuilt->arg());
  });
}

}  // namespace

absl::StatusOr<UOpPtr> ApplyOpt(const UOpPtr& sink, const Opt& opt, LowerContext& ctx) {
  if (opt.op == OptOp::kTc) return ApplyTensorCore(sink, opt, ctx);  // tc.cc
  const bool reduce_side = opt.op == OptOp::kUnroll || opt.op == OptOp::kGroup || opt.op == OptOp::kGroupTop ||
                           opt.op == OptOp::kAcc;
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
  // UPCAST(axis, -amt): the lanes split off the top of the axis (lane j at j * (n / amt) + i), so lanes lie n / amt
  // apart rather than side by side (see MatmulTile's row axis).
  const bool top = opt.op == OptOp::kUpcast && opt.arg < 0;
  const int64_t amt = opt.arg == 0 ? n : (top ? -opt.arg : opt.arg);
  if (amt <= 0 || n % amt != 0)
    return absl::InvalidArgumentError(absl::StrCat("opt ", what, ": ", amt, " does not divide axis size ", n));
  UOpPtr out;
  switch (opt.op) {
    case OptOp::kUpcast: {
      if (amt > 16) return absl::InvalidArgumentError(absl::StrCat("opt ", what, ": upcast amount above 16"));
      KILN_ASSIGN_OR_RETURN(out, SplitRange(sink, r, amt, AxisType::kUpcast, top, ctx));
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
    case OptOp::kAcc: {
      if (amt > 32) return absl::InvalidArgumentError(absl::StrCat("opt ", what, ": more than 32 accumulator lanes"));
      KILN_ASSIGN_OR_RETURN(out, SplitAcc(sink, r, amt, ctx));
      break;
    }
    case OptOp::kTc:
      return ApplyTensorCore(sink, opt, ctx);
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

std::string KernelName(const UOpPtr& sink, const LowerContext& ctx) {
  std::string name = ctx.has_reduce ? "r" : "E";
  std::vector<UOpPtr> axes = AxesOfType(
      sink, ctx, {AxisType::kThread, AxisType::kGlobal, AxisType::kLocal, AxisType::kLoop, AxisType::kGroupReduce,
                  AxisType::kReduce, AxisType::kUpcast, AxisType::kUnroll},
      /*symbolic=*/true);
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
