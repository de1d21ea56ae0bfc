// Elementwise Tensor ops: unary math, binary arithmetic with broadcasting and promotion, comparisons,
// logical and bitwise ops, where, and the free operators. Lowering follows tinygrad (tensor.h).
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tensor/tensor.h"
#include "engine/tensor/tensor_internal.h"

namespace kiln {

using tensor_internal::Invalid;

namespace {
constexpr double kLn2 = 0.69314718055994530942;
constexpr double kPi = 3.14159265358979323846;

// A new error from promotion/broadcasting, named after the op that hit it.
absl::Status Annotate(const char* op, const absl::Status& st) {
  return absl::Status(st.code(), absl::StrCat(op, ": ", std::string(st.message())));
}

// Pow of two broadcast tensors of one dtype.
Tensor PowPair(const Tensor& base, const Tensor& e) {
  DType dt = base.dtype();
  if (!dt.IsFloat()) {
    // integer (or bool) result: compute in float, round, cast back (numpy's int ** int is exact for
    // results the float mantissa holds); through int64 so that results out of a narrow dtype's range
    // wrap as in numpy (a float -> narrow int cast of such a value is undefined)
    DType fd = LeastUpperFloat(dt);
    Tensor r = PowPair(base.Cast(fd), e.Cast(fd)).Round();
    return (dt.ItemSize() < 8 && !dt.IsBool() ? r.Cast(dtypes::kInt64) : r).Cast(dt);
  }
  // |b|**e = exp(e * log|b|); the sign is negative for a negative base and an odd integer exponent;
  // a negative base with a non-integer exponent is nan; 0**0 = 1.
  Tensor mag = base.Abs().Log().Mul(e).Exp();
  Tensor neg = base.Lt(0);
  Tensor odd = e.Mod(2).Ne(0);
  Tensor signed_mag = neg.LogicalAnd(odd).Where(mag.Neg(), mag);
  Tensor nan_mask = neg.LogicalAnd(e.Ne(e.Trunc()));
  Tensor r = nan_mask.Where(std::nan(""), signed_mag);
  return base.Eq(0).LogicalAnd(e.Eq(0)).Where(1, r);
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// Binary core
// ---------------------------------------------------------------------------------------------

Tensor Tensor::BinaryOp(Op op, const Operand& y, bool reverse) const {
  if (!ok()) return *this;
  if (y.is_tensor() && !y.tensor().ok()) return y.tensor();
  auto b = Broadcasted(*this, y, reverse);
  if (!b.ok()) return FromStatus(Annotate(std::string(OpName(op)).c_str(), b.status()));
  const Tensor& x = b->first;
  return x.Node(op, x.dtype(), {x.uop_, b->second.uop_});
}

Tensor Tensor::Compare(Op op, const Operand& y, bool reverse) const {
  if (!ok()) return *this;
  if (y.is_tensor() && !y.tensor().ok()) return y.tensor();
  auto b = Broadcasted(*this, y, reverse);
  if (!b.ok()) return FromStatus(Annotate(std::string(OpName(op)).c_str(), b.status()));
  const Tensor& x = b->first;
  return x.Node(op, dtypes::kBool, {x.uop_, b->second.uop_});
}

#define KILN_PAIR_OR_RETURN(name, y, reverse)                                   \
  if (!ok()) return *this;                                                      \
  if ((y).is_tensor() && !(y).tensor().ok()) return (y).tensor();               \
  auto pair_ = Broadcasted(*this, (y), (reverse));                              \
  if (!pair_.ok()) return FromStatus(Annotate(name, pair_.status()));           \
  Tensor a = std::move(pair_->first);                                           \
  Tensor c = std::move(pair_->second)

Tensor Tensor::Add(const Operand& y) const { return BinaryOp(Op::ADD, y); }
Tensor Tensor::Mul(const Operand& y) const { return BinaryOp(Op::MUL, y); }
Tensor Tensor::Maximum(const Operand& y) const { return BinaryOp(Op::MAX, y); }
Tensor Tensor::BitwiseAnd(const Operand& y) const { return BinaryOp(Op::AND, y); }
Tensor Tensor::BitwiseOr(const Operand& y) const { return BinaryOp(Op::OR, y); }
Tensor Tensor::BitwiseXor(const Operand& y) const { return BinaryOp(Op::XOR, y); }

Tensor Tensor::Sub(const Operand& y) const {
  if (ok() && !y.is_tensor() && dtype() != dtypes::kBool) {
    // x - s = x + (-s)
    const Scalar& s = y.scalar();
    return Add(s.IsFloat() ? Scalar(-s.f) : Scalar(-s.i));
  }
  KILN_PAIR_OR_RETURN("Sub", y, false);
  if (a.dtype() == dtypes::kBool) return FromStatus(Invalid("Sub", "cannot subtract bool tensors"));
  return a.Add(c.Neg());
}

Tensor Tensor::RSub(Scalar s) const {
  KILN_PAIR_OR_RETURN("Sub", Operand(s), true);
  if (a.dtype() == dtypes::kBool) return FromStatus(Invalid("Sub", "cannot subtract bool tensors"));
  return a.Add(c.Neg());
}

Tensor Tensor::Div(const Operand& y) const {
  KILN_PAIR_OR_RETURN("Div", y, false);
  DType fd = LeastUpperFloat(a.dtype());
  return a.Cast(fd).Mul(c.Cast(fd).Reciprocal());
}

Tensor Tensor::RDiv(Scalar s) const {
  KILN_PAIR_OR_RETURN("Div", Operand(s), true);
  DType fd = LeastUpperFloat(a.dtype());
  return a.Cast(fd).Mul(c.Cast(fd).Reciprocal());
}

Tensor Tensor::FloorDiv(const Operand& y) const {
  KILN_PAIR_OR_RETURN("FloorDiv", y, false);
  if (a.dtype().IsFloat()) return a.Div(c).Floor();
  return a.Node(Op::FLOORDIV, a.dtype(), {a.uop_, c.uop_});
}

Tensor Tensor::Mod(const Operand& y) const {
  KILN_PAIR_OR_RETURN("Mod", y, false);
  if (a.dtype().IsFloat()) return a.Sub(c.Mul(a.Div(c).Floor()));
  return a.Node(Op::FLOORMOD, a.dtype(), {a.uop_, c.uop_});
}

Tensor Tensor::Minimum(const Operand& y) const {
  KILN_PAIR_OR_RETURN("Minimum", y, false);
  return a.Inverse().Maximum(c.Inverse()).Inverse();
}

Tensor Tensor::Pow(const Operand& y) const {
  if (!ok()) return *this;
  if (!y.is_tensor()) {
    const Scalar& s = y.scalar();
    if (dtype().IsFloat() || s.IsFloat()) {
      Tensor x = s.IsFloat() ? Cast(LeastUpperFloat(dtype())) : *this;
      return x.PowScalar(s.AsDouble());
    }
    if (s.i < 0) return FromStatus(Invalid("Pow", "integers to negative integer powers are not allowed"));
    if (s.i <= (int64_t{1} << 20)) return PowScalar(static_cast<double>(s.i));
  }
  KILN_PAIR_OR_RETURN("Pow", y, false);
  return PowPair(a, c);
}

Tensor Tensor::RPow(Scalar s) const {
  KILN_PAIR_OR_RETURN("Pow", Operand(s), true);
  if (a.dtype().IsFloat() && s.AsDouble() > 0) return c.Mul(std::log(s.AsDouble())).Exp();  // s**x = exp(x ln s)
  return PowPair(a, c);
}

// x ** e for a constant e; integer e (|e| <= 2^20) by repeated squaring (exact for ints).
Tensor Tensor::PowScalar(double e) const {
  if (!ok()) return *this;
  bool is_int = e == std::trunc(e) && std::fabs(e) <= static_cast<double>(int64_t{1} << 20);
  bool is_half = !is_int && 2 * e == std::trunc(2 * e) && std::fabs(e) <= static_cast<double>(int64_t{1} << 20);
  if (e < 0 && (is_int || is_half) && dtype().IsFloat()) return Reciprocal().PowScalar(-e);
  if (e == 0) return FullLike(1);
  if (e == 1) return *this;
  if (is_half && e > 0) return PowScalar(e - 0.5).Mul(Sqrt());
  if (is_int) {
    Tensor half = PowScalar(std::floor(e / 2)).Square();
    return std::fmod(e, 2) != 0 ? half.Mul(*this) : half;
  }
  return PowPair(*this, FullLike(e));
}

Tensor Tensor::Where(const Operand& x, const Operand& y) const {
  if (!ok()) return *this;
  if (x.is_tensor() && !x.tensor().ok()) return x.tensor();
  if (y.is_tensor() && !y.tensor().ok()) return y.tensor();
  Tensor xt, yt;
  if (x.is_tensor()) {
    xt = x.tensor();
    yt = y.is_tensor() ? y.tensor() : xt.WeakScalar(y.scalar());
  } else if (y.is_tensor()) {
    yt = y.tensor();
    xt = yt.WeakScalar(x.scalar());
  } else {
    xt = ConstOf(x.scalar(), x.scalar().DefaultDType());
    yt = ConstOf(y.scalar(), y.scalar().DefaultDType());
  }
  auto xy = Broadcasted(xt, yt, false);
  if (!xy.ok()) return FromStatus(Annotate("WHERE", xy.status()));
  Tensor cond = Cast(dtypes::kBool);
  auto out = BroadcastShapes(cond.shape(), xy->first.shape());
  if (!out.ok()) return FromStatus(Annotate("WHERE", out.status()));
  cond = cond.BroadcastTo(*out);
  Tensor a = xy->first.BroadcastTo(*out), c = xy->second.BroadcastTo(*out);
  if (absl::Status st = tensor_internal::FirstError({&cond, &a, &c}); !st.ok()) return FromStatus(st);
  return a.Node(Op::WHERE, a.dtype(), {cond.uop_, a.uop_, c.uop_});
}

// ---------------------------------------------------------------------------------------------
// Comparisons, logical and bitwise
// ---------------------------------------------------------------------------------------------

Tensor Tensor::Lt(const Operand& y) const { return Compare(Op::CMPLT, y, false); }
Tensor Tensor::Gt(const Operand& y) const { return Compare(Op::CMPLT, y, true); }
Tensor Tensor::Eq(const Operand& y) const { return Compare(Op::CMPEQ, y, false); }
Tensor Tensor::Ne(const Operand& y) const { return Compare(Op::CMPNE, y, false); }
// a <= b as (a < b) | (a == b), so that comparisons with nan are false (numpy), not !(a > b).
Tensor Tensor::Le(const Operand& y) const {
  KILN_PAIR_OR_RETURN("Le", y, false);
  return a.Lt(c).BitwiseOr(a.Eq(c));
}
Tensor Tensor::Ge(const Operand& y) const {
  KILN_PAIR_OR_RETURN("Ge", y, false);
  return c.Lt(a).BitwiseOr(a.Eq(c));
}

Tensor Tensor::LogicalNot() const {
  if (!ok()) return *this;
  Tensor b = Cast(dtypes::kBool);
  return b.Compare(Op::CMPNE, true, false);
}

Tensor Tensor::LogicalAnd(const Operand& y) const {
  if (!ok()) return *this;
  Tensor yb = y.is_tensor() ? y.tensor().Cast(dtypes::kBool) : ConstOf(y.scalar().AsDouble() != 0, dtypes::kBool);
  return Cast(dtypes::kBool).BinaryOp(Op::AND, yb);
}

Tensor Tensor::LogicalOr(const Operand& y) const {
  if (!ok()) return *this;
  Tensor yb = y.is_tensor() ? y.tensor().Cast(dtypes::kBool) : ConstOf(y.scalar().AsDouble() != 0, dtypes::kBool);
  return Cast(dtypes::kBool).BinaryOp(Op::OR, yb);
}

Tensor Tensor::BitwiseNot() const {
  if (!ok()) return *this;
  if (dtype() == dtypes::kBool) return LogicalNot();
  if (!dtype().IsInt()) return FromStatus(Invalid("BitwiseNot", "needs an integer or bool dtype, got ", dtype().Name()));
  return BinaryOp(Op::XOR, ConstOf(-1, dtype()));  // ~x = x ^ all-ones
}

Tensor Tensor::Lshift(int64_t bits) const {
  if (!ok()) return *this;
  if (!dtype().IsInt() || bits < 0 || bits >= dtype().ItemSize() * 8)
    return FromStatus(Invalid("Lshift", "needs an integer dtype and 0 <= bits < width (", dtype().Name(), ", ", bits, ")"));
  return BinaryOp(Op::SHL, ConstOf(bits, dtype()));
}

Tensor Tensor::Rshift(int64_t bits) const {
  if (!ok()) return *this;
  if (!dtype().IsInt() || bits < 0 || bits >= dtype().ItemSize() * 8)
    return FromStatus(Invalid("Rshift", "needs an integer dtype and 0 <= bits < width (", dtype().Name(), ", ", bits, ")"));
  return BinaryOp(Op::SHR, ConstOf(bits, dtype()));
}

Tensor Tensor::Inverse() const {
  if (!ok()) return *this;
  if (dtype().IsFloat()) return Neg();
  return BitwiseNot();
}

// ---------------------------------------------------------------------------------------------
// Unary
// ---------------------------------------------------------------------------------------------

Tensor Tensor::UnaryFloat(Op op) const {
  if (!ok()) return *this;
  Tensor x = Cast(LeastUpperFloat(dtype()));
  return x.Node1(op, x.dtype());
}

Tensor Tensor::Neg() const {
  if (!ok()) return *this;
  if (dtype() == dtypes::kBool) return LogicalNot();
  return BinaryOp(Op::MUL, ConstOf(-1, dtype()));  // -x = x * -1 (all-ones for unsigned: wraps)
}

Tensor Tensor::Reciprocal() const { return UnaryFloat(Op::RECIPROCAL); }
Tensor Tensor::Exp2() const { return UnaryFloat(Op::EXP2); }
Tensor Tensor::Log2() const { return UnaryFloat(Op::LOG2); }
Tensor Tensor::Sqrt() const { return UnaryFloat(Op::SQRT); }
Tensor Tensor::Sin() const { return UnaryFloat(Op::SIN); }
Tensor Tensor::Exp() const { return Cast(LeastUpperFloat(dtype())).Mul(1.0 / kLn2).Exp2(); }  // exp(x) = 2^(x/ln2)
Tensor Tensor::Log() const { return Log2().Mul(kLn2); }                                       // ln(x) = log2(x)*ln2
Tensor Tensor::Rsqrt() const { return Sqrt().Reciprocal(); }
Tensor Tensor::Cos() const { return Cast(LeastUpperFloat(dtype())).RSub(kPi / 2).Sin(); }  // cos(x) = sin(pi/2 - x)
Tensor Tensor::Tan() const { return Sin().Div(Cos()); }
Tensor Tensor::Square() const { return Mul(*this); }

Tensor Tensor::Sign() const {
  if (!ok()) return *this;
  const Tensor s = Ne(0).Where(Lt(0).Where(FullLike(-1), FullLike(1)), FullLike(0));
  if (!dtype().IsFloat()) return s;
  // nan stays nan. tinygrad adds x*0 for that, which made sign(+-inf) nan, and so abs(inf) and tanh(inf) (found with
  // the differential test's values; numpy and PyTorch: 1, inf, 1).
  return Ne(*this).Where(*this, s);
}

Tensor Tensor::Abs() const {
  if (!ok()) return *this;
  if (dtype().IsUnsigned() || dtype() == dtypes::kBool) return *this;
  return Mul(Sign());  // tinygrad: x * sign(x)
}

// x <= 0 ? 0 : x, so nan stays nan (numpy, PyTorch; tinygrad's x > 0 ? x : 0 made it 0). relu'(0) = 0 either way.
Tensor Tensor::Relu() const { return Le(0).Where(ZerosLike(), *this); }
// 1 / (1 + e) for x >= 0 and e / (1 + e) below, with e = exp(-|x|) <= 1: nothing overflows, forward or backward.
// tinygrad's 1 / (1 + 2^(-x / ln 2)) is inf inside for x < -88.7 (its value still 0), and its gradient there was
// reciprocal's 0 times exp2's inf = NaN: a saturated logit poisoned a training step (found by the differential test's
// gradient cases). -|x| is taken as a where, not Abs: abs'(0) = 0 would make sigmoid'(0) 0 instead of 1/4.
Tensor Tensor::Sigmoid() const {
  const Tensor x = Cast(LeastUpperFloat(dtype()));
  const Tensor pos = x.Ge(0);
  const Tensor e = pos.Where(x.Neg(), x).Mul(1.0 / kLn2).Exp2();
  const Tensor r = e.Add(1.0).Reciprocal();
  return pos.Where(r, e.Mul(r));
}
// tanh(x) = sign(x) (1 - e) / (1 + e) with e = exp(-2|x|) (e -> 0 for large |x|: no overflow), except near 0, where
// 1 - e cancels (2 sigmoid(2x) - 1, tinygrad's form, is off by ~1e-7 absolute, 4e-4 relative at x = 1e-4): there the
// Taylor series x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835, whose first omitted term is below 1e-8 relative for
// |x| < 0.25. Found by the differential test (issue #17).
Tensor Tensor::Tanh() const {
  if (!ok()) return *this;
  const Tensor x = Cast(LeastUpperFloat(dtype()));
  const Tensor ax = x.Abs();
  const Tensor e = ax.Mul(-2.0 / kLn2).Exp2();
  const Tensor far = e.RSub(1.0).Div(e.Add(1.0));
  const Tensor x2 = x.Mul(x);
  const Tensor poly =
      x2.Mul(62.0 / 2835.0).Sub(17.0 / 315.0).Mul(x2).Add(2.0 / 15.0).Mul(x2).Sub(1.0 / 3.0).Mul(x2).Add(1.0);
  return ax.Lt(0.25).Where(x.Mul(poly), x.Lt(0.0).Where(far.Neg(), far));
}
Tensor Tensor::Gelu() const {
  // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
  Tensor x3 = Mul(*this).Mul(*this);
  return Mul(0.5).Mul(Add(x3.Mul(0.044715)).Mul(std::sqrt(2.0 / kPi)).Tanh().Add(1.0));
}
Tensor Tensor::Silu() const { return Mul(Sigmoid()); }

Tensor Tensor::Trunc() const {
  if (!ok() || !dtype().IsFloat()) return *this;
  return Node1(Op::TRUNC, dtype());
}
Tensor Tensor::Floor() const {
  if (!ok() || !dtype().IsFloat()) return *this;
  Tensor b = Trunc();
  return Lt(b).Where(b.Sub(1), b);
}
Tensor Tensor::Ceil() const {
  if (!ok() || !dtype().IsFloat()) return *this;
  Tensor b = Trunc();
  return Gt(b).Where(b.Add(1), b);
}
Tensor Tensor::Round() const {
  if (!ok() || !dtype().IsFloat()) return *this;
  // tinygrad: half to even
  Tensor b = Trunc().Div(2.0);
  return Gt(0).Eq(b.Trunc().Eq(b)).Where(Sub(0.5).Ceil(), Add(0.5).Floor());
}

Tensor Tensor::Clip(Scalar min, Scalar max) const { return Maximum(min).Minimum(max); }

// ---------------------------------------------------------------------------------------------
// Operators
// ---------------------------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Operand& b) { return a.Add(b); }
Tensor operator-(const Tensor& a, const Operand& b) { return a.Sub(b); }
Tensor operator*(const Tensor& a, const Operand& b) { return a.Mul(b); }
Tensor operator/(const Tensor& a, const Operand& b) { return a.Div(b); }
Tensor operator%(const Tensor& a, const Operand& b) { return a.Mod(b); }
Tensor operator&(const Tensor& a, const Operand& b) { return a.BitwiseAnd(b); }
Tensor operator|(const Tensor& a, const Operand& b) { return a.BitwiseOr(b); }
Tensor operator^(const Tensor& a, const Operand& b) { return a.BitwiseXor(b); }
Tensor operator<(const Tensor& a, const Operand& b) { return a.Lt(b); }
Tensor operator<=(const Tensor& a, const Operand& b) { return a.Le(b); }
Tensor operator>(const Tensor& a, const Operand& b) { return a.Gt(b); }
Tensor operator>=(const Tensor& a, const Operand& b) { return a.Ge(b); }
Tensor operator==(const Tensor& a, const Operand& b) { return a.Eq(b); }
Tensor operator!=(const Tensor& a, const Operand& b) { return a.Ne(b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return b.Add(a); }
Tensor operator-(const Scalar& a, const Tensor& b) { return b.RSub(a); }
Tensor operator*(const Scalar& a, const Tensor& b) { return b.Mul(a); }
Tensor operator/(const Scalar& a, const Tensor& b) { return b.RDiv(a); }
Tensor operator<(const Scalar& a, const Tensor& b) { return b.Gt(a); }
Tensor operator<=(const Scalar& a, const Tensor& b) { return b.Ge(a); }
Tensor operator>(const Scalar& a, const Tensor& b) { return b.Lt(a); }
Tensor operator>=(const Scalar& a, const Tensor& b) { return b.Le(a); }
Tensor operator-(const Tensor& a) { return a.Neg(); }
Tensor operator!(const Tensor& a) { return a.LogicalNot(); }
Tensor operator~(const Tensor& a) { return a.BitwiseNot(); }

}  // namespace kiln
