// Late lowering: index dtype -> int32/int64, gates moved from INDEX to LOAD/STORE, integer division guards.
#include <limits>

#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"

namespace kiln::codegen {

absl::StatusOr<UOpPtr> LowerIndexDType(const UOpPtr& sink, LowerContext& ctx) {
  constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
  constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
  Bounds bounds;
  bool wide = false;
  for (const UOp* u : Toposort(sink)) {
    if (u->dtype().scalar != ScalarType::kIndex || u->dtype().is_ptr) continue;
    if (u->op() == Op::CONST || u->op() == Op::DEFINE_VAR || u->op() == Op::RANGE || u->op() == Op::SPECIAL ||
        IsALU(u->op())) {
      auto [lo, hi] = bounds.Of(UOpPtr::FromRaw(u));
      if (lo < kI32Min || hi > kI32Max) {
        wide = true;
        break;
      }
    }
  }
  ctx.index_dtype = wide || ctx.target.wide_index ? dtypes::kInt64 : dtypes::kInt32;
  const DType idx = ctx.index_dtype;
  return RewriteBottomUp(sink, [&](const UOp*, const UOpPtr& u) -> UOpPtr {
    DType d = u->dtype();
    if (d.scalar != ScalarType::kIndex) return nullptr;
    DType nd = idx;
    nd.count = d.count;
    nd.is_ptr = d.is_ptr;
    nd.addrspace = d.addrspace;
    return u->WithDType(nd);
  });
}

absl::StatusOr<UOpPtr> MoveGates(const UOpPtr& sink, LowerContext& ctx) {
  return RewriteBottomUp(sink, [&](const UOp*, const UOpPtr& u) -> UOpPtr {
    if ((u->op() != Op::LOAD && u->op() != Op::STORE) || u->src(0)->op() != Op::INDEX ||
        u->src(0)->num_src() != 3)
      return nullptr;
    const UOpPtr& ix = u->src(0);
    UOpPtr plain = UOp::Make(Op::INDEX, ix->dtype(), {ix->src(0), ix->src(1)}, ix->arg());
    const UOpPtr& gate = ix->src(2);
    if (u->op() == Op::LOAD) {
      if (u->num_src() != 1) return nullptr;  // already has alt/gate: leave it to the spec verifier
      UOpPtr alt = u->dtype().IsBool() ? UOp::ConstBool(false) : UOp::Const(u->dtype(), int64_t{0});
      return UOp::Make(Op::LOAD, u->dtype(), {plain, alt, gate}, u->arg());
    }
    if (u->num_src() != 2) return nullptr;
    return UOp::Make(Op::STORE, u->dtype(), {plain, u->src(1), gate}, u->arg());
  });
}

absl::StatusOr<UOpPtr> GuardDivision(const UOpPtr& sink, LowerContext& ctx) {
  Bounds bounds;
  return RewriteBottomUp(sink, [&](const UOp* orig, const UOpPtr& u) -> UOpPtr {
    const Op op = u->op();
    if (op != Op::CDIV && op != Op::CMOD && op != Op::FLOORDIV && op != Op::FLOORMOD) return nullptr;
    const DType d = u->dtype();
    if (!d.IsInt() || d.count != 1) return nullptr;
    const UOpPtr& x = u->src(0);
    const UOpPtr& y = u->src(1);
    auto [lo, hi] = bounds.Of(y);
    const bool maybe_zero = lo <= 0 && hi >= 0;
    // INT_MIN / -1 overflows (and traps on x86): guard signed divisors that may be -1 when x may be the minimum.
    const bool maybe_m1 = !d.IsUnsigned() && lo <= -1 && hi >= -1 && bounds.Of(x).first <= DTypeMin(d);
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
  });
}

}  // namespace kiln::codegen
