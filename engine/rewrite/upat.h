// UPat: a pattern over UOps, the left-hand side of a rewrite rule (tinygrad's UPat).
//
// A UPat constrains a node's op (one op or an op set; none = any op), dtype (one or a set; a
// scalar dtype also matches vectors of it, as in tinygrad), arg (exact equality), extra
// predicates, and its sources:
//   Src({a, b})      exact ordered tuple; the node must have exactly that many sources, or at least
//                    that many with AllowAnyLen() (the tuple then matches a prefix);
//   SrcPerm({a, b})  some permutation of the sources matches the tuple (commutative matching);
//   SrcRepeat(p)     every source (any count, including zero) matches p.
// A non-empty name binds the matched node; the same name used twice in one pattern must bind the
// same node (pointer equality, i.e. structural equality for interned UOps). UPat::Any tries
// alternatives in order. Matching enumerates every way the pattern can match (permutations and
// alternatives); a PatternMatcher offers each complete binding to the rule's callback until one
// returns a replacement.
//
// UPat is an immutable value with cheap copies (shared structure); builder methods return a
// modified copy. Patterns are compiled into a fast form when a PatternMatcher is built; they are
// not used for matching directly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/dtype/dtype.h"
#include "engine/uop/arg.h"
#include "engine/uop/ops.h"
#include "engine/uop/uop.h"

namespace kiln {

class UPat;

namespace internal {
// The shared, immutable description of a pattern. Read by the PatternMatcher compiler.
struct UPatData {
  enum class SrcKind : uint8_t { kNone, kExact, kPerm, kRepeat };
  OpSet ops;                   // empty = any op
  std::vector<DType> dtypes;   // empty = any dtype
  std::optional<Arg> arg;      // exact arg match
  // CONST value match (UPat::Const): the node is a CONST whose value equals this.
  bool has_const = false;
  bool const_is_int = false;
  int64_t const_int = 0;
  double const_float = 0.0;
  std::string name;            // binding name; empty = unbound
  SrcKind src_kind = SrcKind::kNone;
  std::vector<UPat> src;       // kExact/kPerm: the tuple; kRepeat: one element
  bool allow_any_len = false;
  std::vector<std::function<bool(const UOp&)>> preds;
  std::vector<UPat> any;       // non-empty: this pattern is an alternation (other fields unused)
};
}  // namespace internal

class UPat {
 public:
  // ---- leaves ----
  static UPat Var(std::string name = "");           // any node
  static UPat Var(std::string name, DType dtype);   // any node of that dtype
  static UPat CVar(std::string name = "");          // any CONST
  static UPat CVar(std::string name, DType dtype);  // any CONST of that dtype
  // A CONST whose value equals v (any dtype: int, float and bool CONSTs compare by value).
  static UPat Const(int64_t v);
  static UPat Const(double v);

  // ---- general patterns ----
  explicit UPat(Op op);
  explicit UPat(OpSet ops);
  UPat Named(std::string name) const;
  UPat WithDType(DType d) const;
  UPat WithDTypes(std::vector<DType> ds) const;
  UPat WithArg(Arg a) const;
  UPat Src(std::vector<UPat> exact) const;
  UPat SrcPerm(std::vector<UPat> srcs) const;
  UPat SrcRepeat(UPat each) const;
  UPat AllowAnyLen() const;
  // An extra predicate on the node, checked after op/dtype/arg; may be chained (all must hold).
  UPat Where(std::function<bool(const UOp&)> pred) const;
  // Alternatives, tried in order. Each alternative may bind names; a callback sees the bindings
  // of the alternative that matched.
  static UPat Any(std::vector<UPat> alternatives);

  const internal::UPatData& data() const { return *data_; }
  // A short human-readable description ("ADD(x, CONST)"), for stats tables and errors.
  std::string ToString() const;

 private:
  UPat() : data_(std::make_shared<internal::UPatData>()) {}
  // Copy-on-write: a fresh copy of the data to modify.
  internal::UPatData& Mutable();
  std::shared_ptr<const internal::UPatData> data_;
};

// ---- operator sugar building ALU patterns. Commutative ops (ADD MUL MAX AND OR XOR CMPNE CMPEQ)
// use SrcPerm; the others use an exact tuple. An int64/double operand becomes UPat::Const(v). ----
UPat operator+(const UPat& a, const UPat& b);
UPat operator*(const UPat& a, const UPat& b);
UPat operator/(const UPat& a, const UPat& b);  // CDIV
UPat operator%(const UPat& a, const UPat& b);  // CMOD
UPat operator&(const UPat& a, const UPat& b);  // AND
UPat operator|(const UPat& a, const UPat& b);  // OR
UPat operator^(const UPat& a, const UPat& b);  // XOR
// Scalar operands (any integer or floating type) become UPat::Const(v).
template <typename T>
concept UPatScalar = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;
template <UPatScalar T>
UPat ScalarPat(T v) {
  if constexpr (std::is_integral_v<T>) {
    return UPat::Const(static_cast<int64_t>(v));
  } else {
    return UPat::Const(static_cast<double>(v));
  }
}
template <UPatScalar T> UPat operator+(const UPat& a, T b) { return a + ScalarPat(b); }
template <UPatScalar T> UPat operator*(const UPat& a, T b) { return a * ScalarPat(b); }
template <UPatScalar T> UPat operator/(const UPat& a, T b) { return a / ScalarPat(b); }
template <UPatScalar T> UPat operator%(const UPat& a, T b) { return a % ScalarPat(b); }
template <UPatScalar T> UPat operator+(T a, const UPat& b) { return ScalarPat(a) + b; }
template <UPatScalar T> UPat operator*(T a, const UPat& b) { return ScalarPat(a) * b; }
UPat Lt(const UPat& a, const UPat& b);   // CMPLT
template <UPatScalar T> UPat Lt(const UPat& a, T b) { return Lt(a, ScalarPat(b)); }
UPat Ne(const UPat& a, const UPat& b);   // CMPNE
template <UPatScalar T> UPat Ne(const UPat& a, T b) { return Ne(a, ScalarPat(b)); }
UPat Eq(const UPat& a, const UPat& b);   // CMPEQ
UPat Max(const UPat& a, const UPat& b);  // MAX
UPat Where(const UPat& c, const UPat& t, const UPat& f);  // WHERE(c, t, f)
UPat Cast(const UPat& x);                // CAST(x), any dtype
// A binary/ternary ALU pattern of any op (SrcPerm when the op is commutative).
UPat AluPat(Op op, std::vector<UPat> srcs);

}  // namespace kiln
