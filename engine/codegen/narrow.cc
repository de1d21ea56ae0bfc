// Narrowing of reduce loops to the window where their padded input is valid (docs/architecture.md §5).
//
// A convolution over a padded view reads its input through a gate, `WHERE(lo <= oy + ky < hi, load, 0)`, and the
// product with the weight is 0 wherever the gate fails: a conv input gradient (the output gradient padded by
// kernel - 1) spends 30-45% of its multiply-adds on those zeros. When every REDUCE(ADD) over a reduce loop `r` has
// such a factor, and the gate's conditions are `r + f < b`-style comparisons with `f` and `b` fixed outside the
// reduce, the loop runs only over [L, U) (the intersection of the conditions with [0, N)) and the conditions, now
// always true, are dropped from the gates. The skipped terms were exact zeros, so the sums keep their values and
// their order (up to the sign of a zero sum, and a NaN that an infinite weight times a padded 0 would have made).
#include <algorithm>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "engine/codegen/graph_util.h"
#include "engine/base/status.h"
#include "engine/codegen/lower_context.h"
#include "engine/symbolic/symbolic.h"
#include "engine/symbolic/variable.h"

namespace kiln::codegen {
namespace {

const AxisArg* AxisOf(const UOp* u) {
  return u->op() == Op::RANGE ? std::get_if<AxisArg>(&u->arg()) : nullptr;
}

bool IsZeroConst(const UOp* u) {
  if (u->op() != Op::CONST) return false;
  if (const auto* f = std::get_if<ConstFloat>(&u->arg())) return f->value == 0.0;
  if (const auto* i = std::get_if<int64_t>(&u->arg())) return *i == 0;
  if (const auto* b = std::get_if<bool>(&u->arg())) return !*b;
  return false;
}

// The scalar conjuncts of a bool expression.
void Conjuncts(const UOp* c, std::vector<const UOp*>& out) {
  std::vector<const UOp*> stack{c};
  while (!stack.empty()) {
    const UOp* u = stack.back();
    stack.pop_back();
    if (u->op() == Op::AND) {
      for (const UOpPtr& s : u->src()) stack.push_back(s.get());
    } else if (u->dtype().IsBool() && u->dtype().count == 1) {
      out.push_back(u);
    }
  }
}

// Conditions under which `v` is certainly 0 when one of them is false: the gates of zero-padded loads reached
// through products, casts and negations, and those common to both terms of a sum (a reduce's unrolled lanes).
// Sorted by pointer. `depth` bounds the recursion (sums of sums of unrolled lanes are shallow).
std::vector<const UOp*> ZeroUnless(const UOp* v, int depth = 0) {
  std::vector<const UOp*> out;
  if (depth > 16) return out;
  switch (v->op()) {
    case Op::MUL:
      for (const UOpPtr& s : v->src()) {
        std::vector<const UOp*> c = ZeroUnless(s.get(), depth + 1);
        out.insert(out.end(), c.begin(), c.end());
      }
      break;
    case Op::ADD: {
      std::vector<const UOp*> a = ZeroUnless(v->src(0).get(), depth + 1),
                              b = ZeroUnless(v->src(1).get(), depth + 1);
      std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
      return out;
    }
    case Op::CAST:
    case Op::NEG:
      return ZeroUnless(v->src(0).get(), depth + 1);
    case Op::WHERE:
      if (IsZeroConst(v->src(2).get())) {
        Conjuncts(v->src(0).get(), out);
        std::vector<const UOp*> c = ZeroUnless(v->src(1).get(), depth + 1);
        out.insert(out.end(), c.begin(), c.end());
      }
      break;
    case Op::LOAD: {
      if (v->num_src() >= 2 && !IsZeroConst(v->src(1).get())) break;
      const UOp* gate = v->num_src() >= 3 ? v->src(2).get()
                        : v->src(0)->op() == Op::INDEX && v->src(0)->num_src() == 3
                            ? v->src(0)->src(2).get()
                            : nullptr;
      if (gate != nullptr) Conjuncts(gate, out);
      break;
    }
    default:
      break;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// `e` as coef * r + rest, where rest depends on no reduce range; false when `e` is not of that form.
class Affine {
 public:
  Affine(const UOp* r, const RangeSets& rs) : r_(r), rs_(rs) {}

  bool Of(const UOp* e, int64_t* coef, UOpPtr* rest) {
    const auto& ranges = rs_.Of(e);
    if (std::find(ranges.begin(), ranges.end(), r_) == ranges.end()) {
      for (const UOp* x : ranges) {
        const AxisArg* a = AxisOf(x);
        if (a == nullptr || a->type == AxisType::kReduce || a->type == AxisType::kGroupReduce)
          return false;
      }
      *coef = 0;
      *rest = UOpPtr::FromRaw(e);
      return true;
    }
    if (e == r_) {
      *coef = 1;
      *rest = UOp::Const(e->dtype(), int64_t{0});
      return true;
    }
    int64_t c0 = 0, c1 = 0, k = 0;
    UOpPtr r0, r1;
    switch (e->op()) {
      case Op::ADD:
      case Op::SUB:
        if (!Of(e->src(0).get(), &c0, &r0) || !Of(e->src(1).get(), &c1, &r1)) return false;
        *coef = e->op() == Op::ADD ? c0 + c1 : c0 - c1;
        *rest = e->op() == Op::ADD ? r0 + r1 : r0 - r1;
        return true;
      case Op::NEG:
        if (!Of(e->src(0).get(), &c0, &r0)) return false;
        *coef = -c0;
        *rest = -r0;
        return true;
      case Op::MUL:
        for (int i = 0; i < 2; ++i) {
          if (ConstInt(e->src(1 - i), &k) && Of(e->src(i).get(), &c0, &r0)) {
            *coef = c0 * k;
            *rest = r0 * k;
            return true;
          }
        }
        return false;
      default:
        return false;
    }
  }

 private:
  const UOp* r_;
  const RangeSets& rs_;
};

// The window of `r` a condition allows: CMPLT(a, b) with a - b = coef * r + rest, coef = +-1, gives r < -rest
// (coef 1) or r >= rest + 1 (coef -1). Sets *lower or *upper.
bool Bound(const UOp* cond, const UOp* r, const RangeSets& rs, UOpPtr* lower, UOpPtr* upper) {
  if (cond->op() != Op::CMPLT || !cond->src(0)->dtype().IsInt()) return false;
  Affine aff(r, rs);
  int64_t ca = 0, cb = 0;
  UOpPtr ra, rb;
  if (!aff.Of(cond->src(0).get(), &ca, &ra) || !aff.Of(cond->src(1).get(), &cb, &rb)) return false;
  const int64_t coef = ca - cb;
  const UOpPtr rest = ra - rb;
  if (coef == 1) {
    *upper = Simplify(-rest);
    return true;
  }
  if (coef == -1) {
    *lower = Simplify(rest + 1);
    return true;
  }
  return false;
}

UOpPtr Min(const UOpPtr& a, const UOpPtr& b) { return -Max(-a, -b); }

// After narrowing: a gate that became `true` disappears (table "drop_true_gates").
const PatternMatcher& DropTrueGatesRules() {
  static const PatternMatcher pm(
      [] {
        const UPat t = UPat(Op::CONST).Where([](const UOp& u) { return u.dtype().IsBool() && !IsZeroConst(&u); });
        const UPat x = UPat::Var("x"), y = UPat::Var("y");
        return std::vector<Rule>{
            {UPat(Op::AND).Src({t, x}), [](const Bindings& b) { return b["x"]; }, "true&x -> x"},
            {UPat(Op::AND).Src({x, t}), [](const Bindings& b) { return b["x"]; }, "x&true -> x"},
            {UPat(Op::WHERE).Src({t, x, y}), [](const Bindings& b) { return b["x"]; }, "where(true,x,y) -> x"},
            {UPat(Op::INDEX).Src({x, y, t}), [](const Bindings& b) { return b.root()->WithSrc({b["x"], b["y"]}); },
             "index(p,i,true) -> index(p,i)"},
            {UPat(Op::LOAD).Src({x, y, t}), [](const Bindings& b) { return b.root()->WithSrc({b["x"]}); },
             "load(ix,alt,true) -> load(ix)"},
        };
      }(),
      "drop_true_gates");
  return pm;
}

absl::StatusOr<UOpPtr> DropTrueGates(const UOpPtr& sink, LowerContext& ctx) {
  return GraphRewrite(sink, DropTrueGatesRules(), ctx.PassOptions("narrow gated reduces", /*walk=*/true));
}

// Narrows one reduce loop of `sink`; returns null when none qualifies.
absl::StatusOr<UOpPtr> NarrowOne(const UOpPtr& sink, absl::flat_hash_set<const UOp*>& done, LowerContext& ctx) {
  // For each reduce range: the REDUCEs over it.
  absl::flat_hash_map<const UOp*, std::vector<const UOp*>> reduces;
  std::vector<const UOp*> order;
  std::optional<RangeSets> rs;  // built on the first gate condition: most kernels have none
  for (const UOp* u : Toposort(sink)) {
    if (u->op() != Op::REDUCE) continue;
    for (size_t i = 1; i < u->num_src(); ++i) {
      const UOp* r = u->src(i).get();
      if (reduces[r].empty()) order.push_back(r);
      reduces[r].push_back(u);
    }
  }
  for (const UOp* r : order) {
    const AxisArg* a = AxisOf(r);
    int64_t n = 0;
    if (a == nullptr || a->type != AxisType::kReduce || done.contains(r) ||
        !ConstInt(r->src(0), &n))
      continue;
    done.insert(r);
    // Every REDUCE over r must add values that are 0 outside the same window.
    std::vector<const UOp*> used;
    UOpPtr lower, upper;
    bool ok = true, first = true;
    for (const UOp* red : reduces[r]) {
      const Op* rop = std::get_if<Op>(&red->arg());
      if (rop == nullptr || *rop != Op::ADD) {
        ok = false;
        break;
      }
      UOpPtr lo, hi;
      std::vector<const UOp*> conds;
      for (const UOp* c : ZeroUnless(red->src(0).get())) {
        UOpPtr l, h;
        if (!rs) rs.emplace(sink);
        if (!Bound(c, r, *rs, &l, &h)) continue;
        if (l) lo = lo ? Max(lo, l) : l;
        if (h) hi = hi ? Min(hi, h) : h;
        conds.push_back(c);
      }
      if (conds.empty() || (!first && (lo != lower || hi != upper || conds != used))) {
        ok = false;
        break;
      }
      first = false;
      lower = lo;
      upper = hi;
      used = conds;
    }
    if (!ok) continue;
    const UOpPtr rp = UOpPtr::FromRaw(r);
    const UOpPtr zero = UOp::Const(rp->dtype(), int64_t{0}), size = rp->src(0);
    const UOpPtr start = Simplify(lower ? Max(lower, zero) : zero);
    const UOpPtr stop = Simplify(upper ? Min(upper, size) : size);
    const UOpPtr nr = UOp::Make(Op::RANGE, rp->dtype(), {Simplify(stop - start)}, r->arg());
    const UOpPtr shifted = start + nr;
    absl::flat_hash_map<const UOp*, UOpPtr> map;
    map.emplace(r, shifted);
    for (const UOp* c : used) map.emplace(c, UOp::ConstBool(true));
    done.insert(nr.get());
    // The REDUCEs close the new loop itself, not its shifted index.
    UOpPtr out = RewriteBottomUp(Substitute(sink, map), [&](const UOp*, const UOpPtr& u) -> UOpPtr {
      if (u->op() != Op::REDUCE) return nullptr;
      UOpVec src(u->src().begin(), u->src().end());
      bool changed = false;
      for (size_t i = 1; i < src.size(); ++i) {
        if (src[i] == shifted) {
          src[i] = nr;
          changed = true;
        }
      }
      return changed ? u->WithSrc(src) : nullptr;
    });
    return DropTrueGates(out, ctx);
  }
  return UOpPtr();
}

// One-hot reduces. Largest reduce checked term by term (a vocabulary of 131,072 entries).
constexpr int64_t kMaxOneHotRange = int64_t{1} << 17;

// Whether `s`, an integer expression of reduce range `r` (size n) and of nothing else (no other range, variable or
// load), equals r + *off for every r in [0, n). Tensor::Arange's values reach kernels as a sum of bit planes of the
// range (where((r / 2^j) % 2 != 0, 2^j, 0) summed over j), which no rule folds back to r, so this evaluates the
// expression at each r (n <= kMaxOneHotRange).
bool IsShiftedRange(const UOp* s, const UOp* r, int64_t n, int64_t* off) {
  if (!s->dtype().IsInt() || s->dtype().count != 1 || n > kMaxOneHotRange) return false;
  for (const UOp* u : Toposort(UOpPtr::FromRaw(s))) {
    if (u->op() == Op::RANGE && u != r) return false;
    if (u->op() == Op::LOAD || u->op() == Op::DEFINE_VAR || u->op() == Op::SPECIAL || u->op() == Op::BIND ||
        u->op() == Op::INDEX)
      return false;
  }
  const std::string name = "onehot_r";
  absl::flat_hash_map<UOpPtr, UOpPtr> subs;
  subs.emplace(UOpPtr::FromRaw(r), UOp::Variable(name, 0, n - 1));
  const UOpPtr e = Substitute(UOpPtr::FromRaw(s), subs);
  VarVals vals;
  for (int64_t i = 0; i < n; ++i) {
    vals[name] = i;
    absl::StatusOr<int64_t> v = Evaluate(e, vals);
    if (!v.ok()) return false;
    if (i == 0) *off = *v;
    if (*v != i + *off) return false;
  }
  return true;
}

// The reduce-range side of CMPEQ `c` as r + off and the other side `e` (so the condition holds at r = e - off);
// false when c is not such an equality.
bool OneHotCondition(const UOp* c, const UOp* r, int64_t n, const RangeSets& rs, UOpPtr* e, int64_t* off) {
  if (c->op() != Op::CMPEQ || !c->src(0)->dtype().IsInt()) return false;
  for (int side = 0; side < 2; ++side) {
    const UOp* a = c->src(side).get();
    const UOp* b = c->src(1 - side).get();
    const auto& rb = rs.Of(b);
    if (std::find(rb.begin(), rb.end(), r) != rb.end()) continue;
    bool other_reduce = false;
    for (const UOp* x : rb) {
      const AxisArg* ax = AxisOf(x);
      other_reduce |= ax == nullptr || ax->type == AxisType::kReduce || ax->type == AxisType::kGroupReduce;
    }
    if (other_reduce) continue;
    if (!IsShiftedRange(a, r, n, off)) continue;
    *e = UOpPtr::FromRaw(b);
    return true;
  }
  return false;
}

}  // namespace

// sum over r of a value that is 0 unless r == e, with e fixed outside the reduce, is that value at r = e (0 when e
// is outside [0, n)): an embedding lookup or ONNX Gather, built as tinygrad's OneHot(idx).Where(table, 0).Sum().
// Without this, MiniLM's word-embedding lookup ran as a [128 x 30522] x [30522 x 384] product (98 of its 156 ms).
// r is replaced by e clamped into [0, n) (so the table read stays in bounds) and the sum by WHERE(0 <= e < n, ...).
absl::StatusOr<UOpPtr> CollapseOneHotReduces(const UOpPtr& sink, LowerContext& ctx) {
  (void)ctx;
  UOpPtr cur = sink;
  for (int guard = 0; guard < 8; ++guard) {
    absl::flat_hash_map<const UOp*, std::vector<const UOp*>> reduces;
    std::vector<const UOp*> order;
    for (const UOp* u : Toposort(cur)) {
      if (u->op() != Op::REDUCE) continue;
      for (size_t i = 1; i < u->num_src(); ++i) {
        if (reduces[u->src(i).get()].empty()) order.push_back(u->src(i).get());
        reduces[u->src(i).get()].push_back(u);
      }
    }
    std::optional<RangeSets> rs;
    UOpPtr next;
    for (const UOp* r : order) {
      const AxisArg* a = AxisOf(r);
      int64_t n = 0;
      if (a == nullptr || a->type != AxisType::kReduce || !ConstInt(r->src(0), &n) || n < 1) continue;
      // Every REDUCE over r adds values that are 0 unless the same one-hot condition holds.
      const UOp* cond = nullptr;
      UOpPtr e;
      int64_t off = 0;
      bool ok = true;
      for (const UOp* red : reduces[r]) {
        const Op* rop = std::get_if<Op>(&red->arg());
        if (rop == nullptr || *rop != Op::ADD) {
          ok = false;
          break;
        }
        const UOp* found = nullptr;
        for (const UOp* c : ZeroUnless(red->src(0).get())) {
          if (c == cond || (cond == nullptr && c->op() == Op::CMPEQ)) {
            if (cond == nullptr) {
              if (!rs) rs.emplace(cur);
              if (!OneHotCondition(c, r, n, *rs, &e, &off)) continue;
            }
            found = c;
            break;
          }
        }
        if (found == nullptr) {
          ok = false;
          break;
        }
        cond = found;
      }
      if (!ok || cond == nullptr) continue;
      const DType dt = e->dtype();
      const UOpPtr t = Simplify(e - UOp::Const(dt, off));
      const UOpPtr valid = UOp::Make(Op::AND, dtypes::kBool,
                                     {UOp::Make(Op::CMPLT, dtypes::kBool, {UOp::Const(dt, int64_t{-1}), t}),
                                      UOp::Make(Op::CMPLT, dtypes::kBool, {t, UOp::Const(dt, n)})});
      // Clamped with MIN/MAX, not a WHERE on `valid`: range analysis then bounds the table index by [0, n) (BEAM
      // sizes its candidates' buffers by it; a loaded index is otherwise unbounded).
      const UOpPtr at =
          UOp::Make(Op::CAST, r->dtype(), {Max(Min(t, UOp::Const(dt, n - 1)), UOp::Const(dt, int64_t{0}))});
      absl::flat_hash_map<const UOp*, UOpPtr> map;
      map.emplace(r, at);
      map.emplace(cond, UOp::ConstBool(true));
      absl::flat_hash_set<const UOp*> targets(reduces[r].begin(), reduces[r].end());
      next = RewriteBottomUp(cur, [&](const UOp* orig, const UOpPtr& u) -> UOpPtr {
        if (orig == r) return at;
        if (orig == cond) return UOp::ConstBool(true);
        if (!targets.contains(orig)) return nullptr;
        UOpVec src;
        for (size_t i = 1; i < orig->num_src(); ++i)
          if (orig->src(i).get() != r) src.push_back(u->src(i));
        const DType vt = u->src(0)->dtype();
        const UOpPtr zero = vt.IsFloat() ? UOp::Const(vt, 0.0) : UOp::Const(vt, int64_t{0});
        UOpPtr body = UOp::Make(Op::WHERE, vt, {valid, u->src(0), zero});
        if (src.empty()) return body;
        src.insert(src.begin(), body);
        return u->WithSrc(src);
      });
      break;
    }
    if (!next) break;
    cur = DropTrueGates(next, ctx).value_or(next);
  }
  return cur;
}

absl::StatusOr<UOpPtr> NarrowGatedReduces(const UOpPtr& sink, LowerContext& ctx) {
  UOpPtr cur = sink;
  absl::flat_hash_set<const UOp*> done;
  std::vector<UOpPtr> keep;  // `done` holds raw pointers of replaced ranges
  while (true) {
    KILN_ASSIGN_OR_RETURN(UOpPtr next, NarrowOne(cur, done, ctx));
    if (!next) break;
    keep.push_back(cur);
    cur = next;
  }
  return cur;
}

}  // namespace kiln::codegen
