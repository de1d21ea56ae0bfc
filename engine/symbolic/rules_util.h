// Internal helpers shared by the symbolic rule tables (tinygrad's split_uop, pop_const,
// const_factor, divides, usum). Not part of the public API.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "engine/rewrite/pattern_matcher.h"
#include "engine/rewrite/upat.h"
#include "engine/symbolic/const_fold.h"
#include "engine/symbolic/range.h"
#include "engine/uop/uop.h"

namespace kiln::symbolic_internal {

using Terms = absl::InlinedVector<UOpPtr, 8>;

// At most this many terms are split out of a sum; deeper ADD chains stay one term (keeps rules
// linear on long chains).
inline constexpr size_t kMaxTerms = 32;

// Integer (not bool, not float) dtype, index included.
inline bool IsIntDType(DType d) { return d.IsInt() && !d.is_ptr; }
// The integer value of an int CONST, else nullopt.
inline std::optional<int64_t> IntConstOf(const UOp& u) {
  if (u.op() != Op::CONST || !IsIntDType(u.dtype())) return std::nullopt;
  return ConstInt(u);
}

// The summands of an ADD tree (a non-ADD node is its own single term).
void SplitAdd(const UOpPtr& u, Terms* out);
// u = x + c (c an int CONST on the right) -> (x, c); else (u, 0).
std::pair<UOpPtr, int64_t> PopConst(const UOpPtr& u);
// u = x * c (c an int CONST) -> (x, c); else (u, 1).
std::pair<UOpPtr, int64_t> PopMulConst(const UOpPtr& u);
// The constant factor of a term: CONST -> its value, x*c -> c, ADD -> gcd of its terms', else 1.
int64_t ConstFactor(const UOpPtr& u);
// u / v when that division is exact term by term (tinygrad divides), else null. v != 0.
UOpPtr Divides(const UOpPtr& u, int64_t v);

// Builders that skip trivial nodes: x*1 -> x, x*0 -> 0, x+0 -> x. Consts take x's dtype.
UOpPtr MulC(const UOpPtr& x, int64_t c);
UOpPtr AddC(const UOpPtr& x, int64_t c);
UOpPtr AddU(const UOpPtr& a, const UOpPtr& b);  // a+b, dropping a zero CONST side
// Sum of terms (dtype d for the empty sum).
UOpPtr Sum(absl::Span<const UOpPtr> terms, DType d);

// Floor division / modulo of int64 (b != 0), and gcd (non-negative).
int64_t FloorDivI(int64_t a, int64_t b);
int64_t FloorModI(int64_t a, int64_t b);
int64_t Gcd(int64_t a, int64_t b);

// Pattern helpers.
std::vector<DType> IntDTypes();                       // index and every integer dtype
inline UPat IVar(std::string name) { return UPat::Var(std::move(name)).WithDTypes(IntDTypes()); }
inline UPat ICVar(std::string name) { return UPat::CVar(std::move(name)).WithDTypes(IntDTypes()); }
inline UPat BVar(std::string name) { return UPat::Var(std::move(name), dtypes::kBool); }
OpSet OpsWithFlag(uint32_t flag);
UPat Neg(const UPat& x);                              // NEG(x)
UPat NotPat(const UPat& x);                           // x != true (tinygrad logical_not)
inline UPat Op2(Op op, const UPat& a, const UPat& b) { return AluPat(op, {a, b}); }
UOpPtr LogicalNot(const UOpPtr& x);                   // x != true

// The rule lists, concatenated by symbolic.cc.
std::vector<Rule> SimpleRules();
std::vector<Rule> CommutativeRules();
std::vector<Rule> SymbolicRules();
std::vector<Rule> DivModRules();
std::vector<Rule> SymExtraRules();

}  // namespace kiln::symbolic_internal
