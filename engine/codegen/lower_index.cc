// Late lowering: index dtype -> int32/int64, gates moved from INDEX to LOAD/STORE, integer division guards.
#include <limits>

#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"
#include "engine/rewrite/graph_rewrite.h"
#include "engine/rewrite/pattern_matcher.h"
#include "engine/symbolic/range.h"

namespace kiln::codegen {
namespace {

// "lower index dtype": every index-typed node (scalar, vector or pointer) takes ctx.index_dtype's scalar type.
const PatternMatcher& IndexDTypeRules() {
  static const PatternMatcher pm(
      {{UPat::Var("x").Where([](const UOp& u) { return u.dtype().scalar == ScalarType::kIndex; }),
        [](const Bindings& b) -> UOpPtr {
          const DType d = b.root()->dtype();
          DType nd = b.ctx<LowerContext>()->index_dtype;
          nd.count = d.count;
          nd.is_ptr = d.is_ptr;
          nd.addrspace = d.addrspace;
          return b.root()->WithDType(nd);
        },
        "index -> int32/int64"}},
      "lower_index_dtype");
  return pm;
}

// "move gates": LOAD(INDEX(p, i, g)) -> LOAD(INDEX(p, i), 0, g); STORE(INDEX(p, i, g), v) -> STORE(INDEX(p, i), v, g).
// A LOAD that already has alt/gate sources is left to the spec verifier (the exact source tuples do not match it).
const PatternMatcher& MoveGatesRules() {
  static const PatternMatcher pm(
      [] {
        const UPat gated = UPat(Op::INDEX).Src({UPat::Var("p"), UPat::Var("i"), UPat::Var("g")}).Named("ix");
        auto plain = [](const Bindings& b) {
          const UOpPtr& ix = b["ix"];
          return UOp::Make(Op::INDEX, ix->dtype(), {b["p"], b["i"]}, ix->arg());
        };
        return std::vector<Rule>{
            {UPat(Op::LOAD).Src({gated}),
             [plain](const Bindings& b) -> UOpPtr {
               const UOpPtr& u = b.root();
               UOpPtr alt = u->dtype().IsBool() ? UOp::ConstBool(false) : UOp::Const(u->dtype(), int64_t{0});
               return UOp::Make(Op::LOAD, u->dtype(), {plain(b), alt, b["g"]}, u->arg());
             },
             "load(index(p,i,g)) -> load(index(p,i),0,g)"},
            {UPat(Op::STORE).Src({gated, UPat::Var("v")}),
             [plain](const Bindings& b) -> UOpPtr {
               const UOpPtr& u = b.root();
               return UOp::Make(Op::STORE, u->dtype(), {plain(b), b["v"], b["g"]}, u->arg());
             },
             "store(index(p,i,g),v) -> store(index(p,i),v,g)"},
        };
      }(),
      "move_gates");
  return pm;
}

// "guard division": integer CDIV/CMOD/FLOORDIV/FLOORMOD whose divisor may be 0 (or -1 with a dividend that may be
// the minimum) -> WHERE-guarded forms (codegen.h's output conventions). Bounds: engine/symbolic's range analysis.

UOpPtr GuardDiv(const Bindings& b) {
  const UOpPtr& u = b.root();
  const Op op = u->op();
  const DType d = u->dtype();
  if (!d.IsInt() || d.count != 1) return nullptr;
  const UOpPtr& x = b["x"];
  const UOpPtr& y = b["y"];
  auto [lo, hi] = VMinMax(y);
  const bool maybe_zero = lo <= 0 && hi >= 0;
  // INT_MIN / -1 overflows (and traps on x86): guard signed divisors that may be -1 when x may be the minimum.
  const bool maybe_m1 = !d.IsUnsigned() && lo <= -1 && hi >= -1 && VMin(x) <= DTypeMin(d);
  if (!maybe_zero && !maybe_m1) return nullptr;
  UOpPtr zero = UOp::Const(d, int64_t{0});
  UOpPtr one = UOp::Const(d, int64_t{1});
  UOpPtr is0 = maybe_zero ? Eq(y, zero) : nullptr;
  UOpPtr ism1 = maybe_m1 ? Eq(y, UOp::Const(d, int64_t{-1})) : nullptr;
  UOpPtr bad = is0 && ism1 ? UOp::Make(Op::OR, dtypes::kBool, {is0, ism1}) : (is0 ? is0 : ism1);
  UOpPtr safe = UOp::Make(op, d, {x, Where(bad, one, y)});
  UOpPtr res = safe;
  if (ism1) {
    const bool is_div = op == Op::CDIV || op == Op::FLOORDIV;
    res = Where(ism1, is_div ? UOp::Make(Op::SUB, d, {zero, x}) : zero, res);
  }
  if (is0) res = Where(is0, zero, res);
  return res;
}

const PatternMatcher& GuardDivisionRules() {
  static const PatternMatcher pm(
      {{UPat(OpSet{Op::CDIV, Op::CMOD, Op::FLOORDIV, Op::FLOORMOD}).Src({UPat::Var("x"), UPat::Var("y")}), GuardDiv,
        "x/y -> where(y==0, 0, x/where(y==0, 1, y)) (and y==-1)"}},
      "guard_division");
  return pm;
}

}  // namespace

absl::StatusOr<UOpPtr> LowerIndexDType(const UOpPtr& sink, LowerContext& ctx) {
  constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
  constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
  bool wide = false;
  for (const UOp* u : Toposort(sink)) {
    if (u->dtype().scalar != ScalarType::kIndex || u->dtype().is_ptr) continue;
    if (u->op() == Op::CONST || u->op() == Op::DEFINE_VAR || u->op() == Op::RANGE || u->op() == Op::SPECIAL ||
        IsALU(u->op())) {
      auto [lo, hi] = VMinMax(*u);
      if (lo < kI32Min || hi > kI32Max) {
        wide = true;
        break;
      }
    }
  }
  ctx.index_dtype = wide || ctx.target.wide_index ? dtypes::kInt64 : dtypes::kInt32;
  return GraphRewrite(sink, IndexDTypeRules(), ctx.PassOptions("lower index dtype", /*walk=*/true));
}

absl::StatusOr<UOpPtr> MoveGates(const UOpPtr& sink, LowerContext& ctx) {
  return GraphRewrite(sink, MoveGatesRules(), ctx.PassOptions("move gates", /*walk=*/true));
}

absl::StatusOr<UOpPtr> GuardDivision(const UOpPtr& sink, LowerContext& ctx) {
  return GraphRewrite(sink, GuardDivisionRules(), ctx.PassOptions("guard division", /*walk=*/true));
}

}  // namespace kiln::codegen
