// Reduce lowering (REDUCE -> DEFINE_REG accumulator + loop, docs/kernel-ir.md §3), THREAD -> SPECIAL core_id,
// and END normalisation (one single-range END per RANGE).
#include <algorithm>
#include <vector>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"
#include "engine/rewrite/graph_rewrite.h"
#include "engine/rewrite/pattern_matcher.h"

namespace kiln::codegen {
namespace {

UOpPtr Identity(Op op, DType d) {
  if (d.IsBool()) return UOp::ConstBool(op == Op::MUL);
  switch (op) {
    case Op::MUL: return UOp::Const(d, int64_t{1});
    case Op::MAX:
      if (d.IsFloat()) return UOp::Const(d, -std::numeric_limits<double>::infinity());
      return UOp::Const(d, d.IsUnsigned() ? int64_t{0} : DTypeMin(d));
    default: return UOp::Const(d, int64_t{0});
  }
}

UOpPtr Combine(Op op, const UOpPtr& a, const UOpPtr& b) {
  if (op == Op::MAX) return Max(a, b);
  if (a->dtype().IsBool()) return UOp::Make(op == Op::MUL ? Op::AND : Op::OR, a->dtype(), {a, b});
  return UOp::Make(op == Op::MUL ? Op::MUL : Op::ADD, a->dtype(), {a, b});
}

// acc (op) v for a float sum whose value is a left-leaning chain of adds, ((x0 + x1) + x2) + ..., as ExpandReduce
// combines UNROLL lanes: the accumulator takes the terms one by one, ((acc + x0) + x1) + ..., as tinygrad's
// reduce_to_acc does. Each term that is a product then contracts with the running sum into one FMA; combined first,
// two lanes cost a multiply, an FMA and an add (2048^3 matmul at 512-bit width: 48 vector ops per 32 FMAs' work,
// 71% of OpenBLAS). Only the order of float additions changes, and only when every term is a product (lanes of a dot
// product): a sum like sum(x + (-mean)) keeps its own grouping, where taking x into the accumulator first would
// cancel catastrophically.
UOpPtr AccumulateLanes(Op rop, const UOpPtr& acc, const UOpPtr& v) {
  if (rop != Op::ADD || !v->dtype().IsFloat() || v->op() != Op::ADD) return Combine(rop, acc, v);
  std::vector<UOpPtr> terms;
  UOpPtr left = v;
  while (left->op() == Op::ADD && left->dtype() == v->dtype()) {
    terms.push_back(left->src(1));
    left = left->src(0);
  }
  if (left->op() != Op::MUL) return Combine(rop, acc, v);
  for (const UOpPtr& t : terms)
    if (t->op() != Op::MUL) return Combine(rop, acc, v);
  UOpPtr out = Combine(rop, acc, left);
  for (size_t i = terms.size(); i-- > 0;) out = Combine(rop, out, terms[i]);
  return out;
}

void SortByOrder(std::vector<UOpPtr>& v, const LowerContext& ctx) {
  std::stable_sort(v.begin(), v.end(),
                   [&](const UOpPtr& a, const UOpPtr& b) { return ctx.OrderOf(a.get()) < ctx.OrderOf(b.get()); });
}

// The outer ranges of each REDUCE's accumulator: the ranges its value lives in besides its own, made
// common to every REDUCE that shares one of its reduce ranges (and, transitively, theirs). Sibling
// reduces over one RANGE update in one loop, which sits inside the outer ranges of all of them; an
// accumulator reset outside one of those loops would count on across its iterations (issue #17: an
// AvgPool's counts over an expanded constant, fused with its sums, came out 4, 8, 12, ... not 4).
// A REDUCE alone on its ranges keeps its own set, so one that depends on no output range is hoisted.
absl::flat_hash_map<const UOp*, std::vector<const UOp*>> OuterRanges(const std::vector<const UOp*>& reduces,
                                                                     const RangeSets& rs) {
  absl::flat_hash_map<const UOp*, std::vector<const UOp*>> outer;
  absl::flat_hash_map<const UOp*, std::vector<const UOp*>> by_range;  // reduce RANGE -> its REDUCEs
  for (const UOp* r : reduces) {
    outer[r] = rs.Of(r);
    for (size_t i = 1; i < r->num_src(); ++i) by_range[r->src(i).get()].push_back(r);
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& [range, group] : by_range) {
      if (group.size() < 2) continue;
      std::vector<const UOp*> all;
      for (const UOp* r : group) all.insert(all.end(), outer[r].begin(), outer[r].end());
      std::sort(all.begin(), all.end());
      all.erase(std::unique(all.begin(), all.end()), all.end());
      for (const UOp* r : group) {
        if (outer[r] != all) {
          outer[r] = all;
          changed = true;
        }
      }
    }
  }
  return outer;
}

void Flatten(const UOpPtr& u, UOpVec& out) {
  if (u->op() == Op::GROUP) {
    for (const UOpPtr& s : u->src()) Flatten(s, out);
  } else if (std::find(out.begin(), out.end(), u) == out.end()) {
    out.push_back(u);
  }
}

// What the reduce rules need: one accumulator slot per REDUCE (in toposort order, per dtype), the DEFINE_REG of
// each dtype, and each REDUCE's outer ranges (OuterRanges), all keyed by the original REDUCE node. The table runs
// top-down (RewriteOptions::bottom_up), so a rule sees a REDUCE as it was before the pass, and the REDUCEs nested in
// its value are lowered after it, inside its replacement.
struct ReduceLowering {
  const LowerContext* ctx;
  absl::flat_hash_map<const UOp*, int64_t> slot;
  absl::flat_hash_map<DType, UOpPtr> regs;
  absl::flat_hash_map<const UOp*, std::vector<const UOp*>> outer_of;
};

// REDUCE(v, r...) -> the accumulator loop: reg[k] = identity once per iteration of the outer ranges; for r...:
// reg[k] = reg[k] (op) v; the value is reg[k] after the loop.
UOpPtr LowerReduce(const Bindings& b) {
  const ReduceLowering& rl = *b.ctx<ReduceLowering>();
  const UOpPtr& u = b.root();
  const Op rop = std::get<Op>(u->arg());
  const DType d = u->dtype();
  const UOpPtr& reg = rl.regs.at(d);
  const UOpPtr k = UOp::Const(dtypes::kIndex, rl.slot.at(u.get()));
  // The ranges the value (and its siblings', OuterRanges) lives in besides its own: the accumulator is
  // reset once per iteration of those.
  std::vector<UOpPtr> outer;
  for (const UOp* r : rl.outer_of.at(u.get())) outer.push_back(UOpPtr::FromRaw(r));
  SortByOrder(outer, *rl.ctx);
  std::vector<UOpPtr> red(u->src().begin() + 1, u->src().end());
  SortByOrder(red, *rl.ctx);
  UOpPtr init_base = reg;
  if (!outer.empty()) {
    UOpVec s{reg};
    for (const UOpPtr& r : outer) s.push_back(r);
    init_base = UOp::Make(Op::AFTER, reg->dtype(), s);
  }
  UOpPtr init = UOp::Make(Op::STORE, dtypes::kVoid,
                          {UOp::Make(Op::INDEX, reg->dtype(), {init_base, k}), Identity(rop, d)});
  UOpVec loop_deps{reg, init};
  for (const UOpPtr& r : red) loop_deps.push_back(r);
  UOpPtr cur = UOp::Make(Op::LOAD, d, {UOp::Make(Op::INDEX, reg->dtype(),
                                                 {UOp::Make(Op::AFTER, reg->dtype(), loop_deps), k})});
  UOpPtr upd = UOp::Make(Op::STORE, dtypes::kVoid,
                         {UOp::Make(Op::INDEX, reg->dtype(), {reg, k}), AccumulateLanes(rop, cur, u->src(0))});
  UOpPtr end = upd;
  for (size_t i = red.size(); i-- > 0;) end = UOp::Make(Op::END, dtypes::kVoid, {end, red[i]});
  return UOp::Make(Op::LOAD, d, {UOp::Make(Op::INDEX, reg->dtype(),
                                           {UOp::Make(Op::AFTER, reg->dtype(), {reg, end}), k})});
}

const PatternMatcher& ReduceRules() {
  static const PatternMatcher pm(
      {{UPat(Op::REDUCE).Src({UPat::Var("v")}), [](const Bindings& b) { return b["v"]; }, "reduce(v) -> v"},
       {UPat(Op::REDUCE), LowerReduce, "reduce(v, r...) -> accumulator loop over r"}},
      "lower_reduces");
  return pm;
}

}  // namespace

absl::StatusOr<UOpPtr> LowerReduces(const UOpPtr& sink, LowerContext& ctx) {
  ReduceLowering rl{&ctx, {}, {}, {}};
  absl::flat_hash_map<DType, int64_t> count;
  std::vector<const UOp*> topo = Toposort(sink);
  for (const UOp* u : topo) {
    if (u->op() != Op::REDUCE || u->num_src() < 2) continue;
    if (u->dtype().count != 1 || u->dtype().is_ptr)
      return absl::InvalidArgumentError("reduce: only scalar REDUCE dtypes are supported");
    rl.slot.emplace(u, count[u->dtype()]++);
  }
  for (const auto& [d, n] : count) rl.regs[d] = UOp::Make(Op::DEFINE_REG, d.Ptr(AddrSpace::kReg), {}, n);
  RangeSets rs(sink);
  std::vector<const UOp*> reduces;
  for (const auto& [r, n] : rl.slot) reduces.push_back(r);
  rl.outer_of = OuterRanges(reduces, rs);
  RewriteOptions o = ctx.PassOptions("lower reduces", /*walk=*/false);
  o.bottom_up = true;
  o.ctx = &rl;
  return GraphRewrite(sink, ReduceRules(), o);
}

absl::StatusOr<UOpPtr> LowerThreads(const UOpPtr& sink, LowerContext& ctx) {
  auto is_thread = [](const UOp* u) {
    const auto* a = u->op() == Op::RANGE ? std::get_if<AxisArg>(&u->arg()) : nullptr;
    return a != nullptr && a->type == AxisType::kThread;
  };
  int found = 0;
  UOpPtr out = RewriteBottomUp(sink, [&](const UOp* orig, const UOpPtr& u) -> UOpPtr {
    if (is_thread(orig)) {
      ++found;
      return UOp::Make(Op::SPECIAL, u->dtype(), {u->src(0)}, std::string("core_id"));
    }
    if (u->op() == Op::SINK) {
      UOpVec vals;
      for (const UOpPtr& s : u->src()) Flatten(s, vals);
      return vals.size() == u->num_src() ? nullptr : UOp::Sink(vals);
    }
    if (orig->op() != Op::END) return nullptr;
    UOpVec vals, ranges;
    bool dropped = false;
    for (size_t i = 0; i < orig->num_src(); ++i) {
      if (is_thread(orig->src(i).get())) {
        dropped = true;
      } else if (orig->src(i)->op() == Op::RANGE) {
        ranges.push_back(u->src(i));
      } else {
        vals.push_back(u->src(i));
      }
    }
    if (!dropped) return nullptr;
    if (ranges.empty()) return vals.size() == 1 ? vals[0] : UOp::Make(Op::GROUP, dtypes::kVoid, vals);
    for (const UOpPtr& r : ranges) vals.push_back(r);
    return u->WithSrc(vals);
  });
  if (found > 1) return absl::InvalidArgumentError("threads: more than one THREAD axis");
  return out;
}

namespace {

// NormalizeEnds step 1: END(vals..., ra, rb) -> END(END(vals..., rb), ra), outermost range outside; an END with no
// range left -> its value (or a GROUP of them).
UOpPtr SplitEnd(const Bindings& b) {
  const UOpPtr& u = b.root();
  const LowerContext& ctx = *b.ctx<LowerContext>();
  UOpVec vals;
  std::vector<UOpPtr> ranges;
  for (const UOpPtr& s : u->src()) {
    if (s->op() == Op::RANGE) ranges.push_back(s);
    else Flatten(s, vals);
  }
  if (ranges.empty()) return vals.size() == 1 ? vals[0] : UOp::Make(Op::GROUP, dtypes::kVoid, vals);
  if (ranges.size() == 1 && u->src(u->num_src() - 1) == ranges[0] && vals.size() + 1 == u->num_src()) return nullptr;
  SortByOrder(ranges, ctx);
  UOpVec inner = vals;
  UOpPtr e;
  for (size_t i = ranges.size(); i-- > 0;) {
    UOpVec s = e ? UOpVec{e} : inner;
    s.push_back(ranges[i]);
    e = UOp::Make(Op::END, dtypes::kVoid, s);
  }
  return e;
}

const PatternMatcher& SplitEndsRules() {
  static const PatternMatcher pm({{UPat(Op::END), SplitEnd, "end(vals, ra, rb) -> end(end(vals, rb), ra)"}},
                                 "split_ends");
  return pm;
}

}  // namespace

absl::StatusOr<UOpPtr> NormalizeEnds(const UOpPtr& sink, LowerContext& ctx) {
  // 1. END(vals..., ra, rb) -> END(END(vals..., rb), ra), outermost range outside (table "split_ends").
  KILN_ASSIGN_OR_RETURN(UOpPtr cur, GraphRewrite(sink, SplitEndsRules(), ctx.PassOptions("normalize ends", true)));
  {
    UOpVec vals;
    for (const UOpPtr& s : cur->src()) Flatten(s, vals);
    cur = UOp::Sink(vals);
  }
  // 2. Merge ENDs that close the same RANGE into one, repeatedly (innermost merges first come first in toposort).
  for (int iter = 0; iter < 10000; ++iter) {
    std::vector<const UOp*> topo = Toposort(cur);
    absl::flat_hash_map<const UOp*, std::vector<const UOp*>> by_range;
    const UOp* pick = nullptr;
    for (const UOp* u : topo) {
      if (u->op() != Op::END) continue;
      auto& v = by_range[u->src(u->num_src() - 1).get()];
      v.push_back(u);
      if (v.size() == 2 && pick == nullptr) pick = u->src(u->num_src() - 1).get();
    }
    if (pick == nullptr) return cur;
    const std::vector<const UOp*>& group = by_range[pick];
    absl::flat_hash_map<const UOp*, UOpPtr> map;
    UOpVec vals;
    const absl::flat_hash_set<const UOp*> members(group.begin(), group.end());
    // An END that depends on another END of the same range would make the merged END its own source. One walk below
    // all the members' sources finds any member another one reaches (the graph is acyclic, so none reaches itself);
    // a walk per member cost a toposort of most of the kernel per END.
    {
      absl::flat_hash_set<const UOp*> seen;
      std::vector<const UOp*> stack;
      for (const UOp* e : group)
        for (const UOpPtr& s : e->src()) stack.push_back(s.get());
      while (!stack.empty()) {
        const UOp* x = stack.back();
        stack.pop_back();
        if (!seen.insert(x).second) continue;
        if (members.contains(x))
          return absl::InvalidArgumentError("lowering: a range is reused by dependent loops (cannot merge ENDs)");
        for (const UOpPtr& s : x->src()) stack.push_back(s.get());
      }
    }
    for (const UOp* e : group) {
      for (size_t i = 0; i + 1 < e->num_src(); ++i)
        if (std::find(vals.begin(), vals.end(), e->src(i)) == vals.end()) vals.push_back(e->src(i));
    }
    vals.push_back(UOpPtr::FromRaw(pick));
    UOpPtr merged = UOp::Make(Op::END, dtypes::kVoid, vals);
    for (const UOp* e : group) map.emplace(e, merged);
    cur = Substitute(cur, map);
    UOpVec sv;
    for (const UOpPtr& s : cur->src()) Flatten(s, sv);
    cur = UOp::Sink(sv);
  }
  return absl::InternalError("lowering: END merging did not converge");
}

}  // namespace kiln::codegen
