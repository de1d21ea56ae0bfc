#include "engine/symbolic/rules_util.h"

#include <cstdlib>
#include <numeric>

namespace kiln::symbolic_internal {

void SplitAdd(const UOpPtr& u, Terms* out) {
  absl::InlinedVector<const UOpPtr*, 16> stack = {&u};
  while (!stack.empty()) {
    const UOpPtr* n = stack.back();
    stack.pop_back();
    if ((*n)->op() == Op::ADD && out->size() + stack.size() + 2 <= kMaxTerms) {
      stack.push_back(&(*n)->src(1));  // src(0) first
      stack.push_back(&(*n)->src(0));
    } else {
      out->push_back(*n);
    }
  }
}

std::pair<UOpPtr, int64_t> PopConst(const UOpPtr& u) {
  if (u->op() == Op::ADD) {
    if (auto c = IntConstOf(*u->src(1))) return {u->src(0), *c};
  }
  return {u, 0};
}

std::pair<UOpPtr, int64_t> PopMulConst(const UOpPtr& u) {
  if (u->op() == Op::MUL) {
    if (auto c = IntConstOf(*u->src(1))) return {u->src(0), *c};
    if (auto c = IntConstOf(*u->src(0))) return {u->src(1), *c};
  }
  return {u, 1};
}

int64_t ConstFactor(const UOpPtr& u) {
  if (auto c = IntConstOf(*u)) return *c;
  if (u->op() == Op::MUL) {
    if (auto c = IntConstOf(*u->src(1))) return *c;
    if (auto c = IntConstOf(*u->src(0))) return *c;
  }
  if (u->op() == Op::ADD) {
    int64_t g = Gcd(ConstFactor(u->src(0)), ConstFactor(u->src(1)));
    return g == 0 ? 1 : g;
  }
  return 1;
}

UOpPtr Divides(const UOpPtr& u, int64_t v) {
  if (v == 1) return u;
  if (v == 0) return nullptr;
  if (auto c = IntConstOf(*u)) {
    if (*c % v != 0) return nullptr;
    return MakeConst(u->dtype(), *c / v);
  }
  if (u->op() == Op::ADD) {
    UOpPtr a = Divides(u->src(0), v);
    if (!a) return nullptr;
    UOpPtr b = Divides(u->src(1), v);
    if (!b) return nullptr;
    return AddU(a, b);
  }
  if (u->op() == Op::MUL) {
    if (UOpPtr a = Divides(u->src(0), v)) return a * u->src(1);
    if (UOpPtr b = Divides(u->src(1), v)) {
      if (auto c = IntConstOf(*b); c && *c == 1) return u->src(0);
      return u->src(0) * b;
    }
  }
  return nullptr;
}

UOpPtr MulC(const UOpPtr& x, int64_t c) {
  if (c == 1) return x;
  if (c == 0) return MakeConst(x->dtype(), 0);
  if (auto xc = IntConstOf(*x)) return MakeConst(x->dtype(), static_cast<int64_t>(static_cast<uint64_t>(*xc) * static_cast<uint64_t>(c)));
  return x * MakeConst(x->dtype(), c);
}

UOpPtr AddC(const UOpPtr& x, int64_t c) {
  if (c == 0) return x;
  if (auto xc = IntConstOf(*x)) return MakeConst(x->dtype(), static_cast<int64_t>(static_cast<uint64_t>(*xc) + static_cast<uint64_t>(c)));
  return x + MakeConst(x->dtype(), c);
}

UOpPtr AddU(const UOpPtr& a, const UOpPtr& b) {
  if (auto c = IntConstOf(*b)) return AddC(a, *c);
  if (auto c = IntConstOf(*a)) return AddC(b, *c);
  return a + b;
}

UOpPtr Sum(absl::Span<const UOpPtr> terms, DType d) {
  UOpPtr acc;
  int64_t k = 0;
  for (const UOpPtr& t : terms) {
    if (auto c = IntConstOf(*t)) {
      k += *c;
      continue;
    }
    acc = acc ? acc + t : t;
  }
  if (!acc) return MakeConst(d, k);
  return AddC(acc, k);
}

int64_t FloorDivI(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t FloorModI(int64_t a, int64_t b) { return a - FloorDivI(a, b) * b; }
int64_t Gcd(int64_t a, int64_t b) { return std::gcd(a < 0 ? -a : a, b < 0 ? -b : b); }

std::vector<DType> IntDTypes() {
  return {dtypes::kIndex, dtypes::kInt64,  dtypes::kInt32, dtypes::kInt16, dtypes::kInt8,
          dtypes::kUInt64, dtypes::kUInt32, dtypes::kUInt16, dtypes::kUInt8};
}

OpSet OpsWithFlag(uint32_t flag) {
  OpSet s;
  for (int i = 0; i < kNumOps; ++i) {
    if (HasFlag(static_cast<Op>(i), flag)) s.Add(static_cast<Op>(i));
  }
  return s;
}

UPat Neg(const UPat& x) { return UPat(Op::NEG).Src({x}); }
UPat NotPat(const UPat& x) { return UPat(Op::CMPNE).Src({x, UPat::Const(int64_t{1}).WithDType(dtypes::kBool)}); }
UOpPtr LogicalNot(const UOpPtr& x) { return Ne(x, UOp::ConstBool(true)); }

}  // namespace kiln::symbolic_internal
