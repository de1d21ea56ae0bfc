// Expansion of UPCAST and UNROLL ranges into straight-line code: the body is replicated once per lane with the
// range replaced by the lane's constant. UNROLL lanes of a REDUCE are combined with the reduce op before the
// remaining reduce loop; UPCAST lanes of an output END become sibling stores in one END (their REDUCEs share the
// reduce ranges and so share one loop after reduce lowering).
#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"

namespace kiln::codegen {
namespace {

constexpr int64_t kMaxLanes = 1024;

bool IsExpandRange(const UOp* u) {
  if (u->op() != Op::RANGE) return false;
  const auto* a = std::get_if<AxisArg>(&u->arg());
  return a != nullptr && (a->type == AxisType::kUpcast || a->type == AxisType::kUnroll);
}

// Every assignment of constants to `ranges` (row-major, last range fastest), as substitution maps.
absl::StatusOr<std::vector<absl::flat_hash_map<const UOp*, UOpPtr>>> Lanes(const std::vector<UOpPtr>& ranges) {
  std::vector<int64_t> sizes;
  int64_t total = 1;
  for (const UOpPtr& r : ranges) {
    int64_t s = 0;
    if (!ConstInt(r->src(0), &s) || s <= 0) return absl::InvalidArgumentError("expand: symbolic upcast size");
    sizes.push_back(s);
    total *= s;
    if (total > kMaxLanes) return absl::InvalidArgumentError(absl::StrCat("expand: more than ", kMaxLanes, " lanes"));
  }
  std::vector<absl::flat_hash_map<const UOp*, UOpPtr>> out;
  for (int64_t lane = 0; lane < total; ++lane) {
    absl::flat_hash_map<const UOp*, UOpPtr> m;
    int64_t rest = lane;
    for (size_t i = ranges.size(); i-- > 0;) {
      m.emplace(ranges[i].get(), UOp::Const(ranges[i]->dtype(), rest % sizes[i]));
      rest /= sizes[i];
    }
    out.push_back(std::move(m));
  }
  return out;
}

UOpPtr Combine(Op op, const UOpPtr& a, const UOpPtr& b) {
  switch (op) {
    case Op::MAX: return Max(a, b);
    case Op::MUL: return UOp::Make(Op::MUL, a->dtype(), {a, b});
    default: return UOp::Make(Op::ADD, a->dtype(), {a, b});
  }
}

// Substitute(root, map) that follows only the branch a WHERE picks once its condition, with the lane's constants
// in, folds to a constant (FoldIndexMath: index and bool arithmetic). A select chain over an upcast axis (Winograd's
// stacked transforms: 36 slots, each a sum of up to 16 loads, selected per lane) then costs each lane its own slot,
// not a copy of all 36 for the symbolic passes to fold away (conv2's input transform took 5 s to lower).
UOpPtr SubstitutePicking(const UOpPtr& root, const absl::flat_hash_map<const UOp*, UOpPtr>& map) {
  absl::flat_hash_map<const UOp*, UOpPtr> memo;
  std::function<UOpPtr(const UOpPtr&)> go = [&](const UOpPtr& u) -> UOpPtr {
    if (auto it = map.find(u.get()); it != map.end()) return it->second;
    if (auto it = memo.find(u.get()); it != memo.end()) return it->second;
    UOpPtr out;
    if (u->op() == Op::WHERE) {
      const UOpPtr c = FoldIndexMath(go(u->src(0)));
      const bool* v = c->op() == Op::CONST ? std::get_if<bool>(&c->arg()) : nullptr;
      if (v != nullptr) out = go(*v ? u->src(1) : u->src(2));
    }
    if (!out) {
      UOpVec src;
      bool changed = false;
      for (const UOpPtr& x : u->src()) {
        src.push_back(go(x));
        changed |= src.back() != x;
      }
      out = changed ? u->WithSrc(src) : u;
    }
    memo.emplace(u.get(), out);
    return out;
  };
  return go(root);
}

void FlattenGroups(const UOpPtr& u, UOpVec& out) {
  if (u->op() == Op::GROUP) {
    for (const UOpPtr& s : u->src()) FlattenGroups(s, out);
  } else if (std::find(out.begin(), out.end(), u) == out.end()) {
    out.push_back(u);
  }
}

// The "expand upcasts" table's state: the lowering context (lanes_last) and the first error a rule hit (a rule
// cannot return a Status; once set, every rule declines).
struct ExpandContext {
  const LowerContext* lower;
  absl::Status err;
};

// END(vals..., ranges...) / SINK(vals...): UPCAST/UNROLL ranges replaced by one copy of the values per lane;
// GROUPs (lanes of an END with no range left) flattened into their user.
UOpPtr ExpandEnd(const Bindings& b) {
  ExpandContext& ec = *b.ctx<ExpandContext>();
  const UOpPtr& u = b.root();
  if (!ec.err.ok()) return nullptr;
  bool grouped = std::any_of(u->src().begin(), u->src().end(), [](const UOpPtr& s) { return s->op() == Op::GROUP; });
  UOpVec vals, ranges;
  std::vector<UOpPtr> expand;
  for (const UOpPtr& s : u->src()) {
    if (u->op() == Op::END && s->op() == Op::RANGE) {
      if (IsExpandRange(s.get())) expand.push_back(s);
      else ranges.push_back(s);
    } else {
      FlattenGroups(s, vals);
    }
  }
  if (expand.empty() && !grouped) return nullptr;
  if (u->op() == Op::SINK) return UOp::Sink(vals);
  const std::vector<int64_t>& lanes_last = ec.lower->lanes_last;
  if (!lanes_last.empty()) {
    auto rank = [&](const UOpPtr& r) -> int64_t {
      const int64_t id = std::get<AxisArg>(r->arg()).id;
      auto it = std::find(lanes_last.begin(), lanes_last.end(), id);
      return it == lanes_last.end() ? -1 : it - lanes_last.begin();
    };
    std::stable_sort(expand.begin(), expand.end(), [&](const UOpPtr& x, const UOpPtr& y) { return rank(x) < rank(y); });
  }
  auto lanes = Lanes(expand);
  if (!lanes.ok()) {
    ec.err = lanes.status();
    return nullptr;
  }
  UOpVec copies;
  for (const auto& m : *lanes) {
    for (const UOpPtr& v : vals) {
      UOpPtr c = SubstitutePicking(v, m);
      if (std::find(copies.begin(), copies.end(), c) == copies.end()) copies.push_back(c);
    }
  }
  if (ranges.empty()) return UOp::Make(Op::GROUP, dtypes::kVoid, copies);
  for (const UOpPtr& r : ranges) copies.push_back(r);
  return UOp::Make(Op::END, u->dtype(), copies, u->arg());
}

// REDUCE(val, ranges...): the UPCAST/UNROLL ranges' lanes combined with the reduce op (in lane order), the other
// ranges kept.
UOpPtr ExpandReduce(const Bindings& b) {
  ExpandContext& ec = *b.ctx<ExpandContext>();
  const UOpPtr& u = b.root();
  if (!ec.err.ok()) return nullptr;
  std::vector<UOpPtr> expand;
  UOpVec ranges;
  for (size_t i = 1; i < u->num_src(); ++i) {
    if (IsExpandRange(u->src(i).get())) expand.push_back(u->src(i));
    else ranges.push_back(u->src(i));
  }
  if (expand.empty()) return nullptr;
  auto lanes = Lanes(expand);
  if (!lanes.ok()) {
    ec.err = lanes.status();
    return nullptr;
  }
  const Op rop = std::get<Op>(u->arg());
  UOpPtr acc;
  for (const auto& m : *lanes) {
    UOpPtr c = SubstitutePicking(u->src(0), m);
    acc = acc ? Combine(rop, acc, c) : c;
  }
  if (ranges.empty()) return acc;
  UOpVec src{acc};
  for (const UOpPtr& r : ranges) src.push_back(r);
  return UOp::Make(Op::REDUCE, u->dtype(), src, u->arg());
}

const PatternMatcher& ExpandRules() {
  static const PatternMatcher pm({{UPat(OpSet{Op::SINK, Op::END}), ExpandEnd, "end(vals, upcast r) -> lane copies"},
                                  {UPat(Op::REDUCE), ExpandReduce, "reduce(v, upcast r) -> combined lanes"}},
                                 "expand");
  return pm;
}

}  // namespace

absl::StatusOr<UOpPtr> ExpandUpcasts(const UOpPtr& sink, LowerContext& ctx) {
  ExpandContext ec{&ctx, absl::OkStatus()};
  RewriteOptions o = ctx.PassOptions("expand upcasts", /*walk=*/true);
  o.ctx = &ec;
  KILN_ASSIGN_OR_RETURN(UOpPtr out, GraphRewrite(sink, ExpandRules(), o));
  if (!ec.err.ok()) return ec.err;
  // An upcast range that survived (used outside any END/REDUCE that closes it) is a malformed kernel.
  for (const UOp* u : Toposort(out)) {
    if (IsExpandRange(u))
      return absl::InvalidArgumentError("expand: an UPCAST/UNROLL range is used outside the END/REDUCE closing it");
  }
  return out;
}

}  // namespace kiln::codegen
