// More Tensor math, composed from the existing ops (no new UOps): C-style division and remainder, erf, inverse
// trigonometric and hyperbolic functions, nan/inf tests, running sums and products, triangles. Added for the ONNX
// frontend (engine/onnx); semantics as numpy.
#include <cmath>
#include <limits>

#include "engine/tensor/tensor.h"
#include "engine/tensor/tensor_internal.h"

namespace kiln {

using tensor_internal::Invalid;
using tensor_internal::NormAxis;

namespace {
constexpr double kPi = 3.14159265358979323846;

// p[0] + x * (p[1] + x * (...)) (Horner).
Tensor Poly(const Tensor& x, std::initializer_list<double> coeffs) {
  std::vector<double> c(coeffs);
  Tensor r = x.FullLike(c.back());
  for (size_t i = c.size() - 1; i-- > 0;) r = r.Mul(x).Add(c[i]);
  return r;
}
}  // namespace

Tensor Tensor::TruncDiv(const Operand& y) const {
  if (!ok()) return *this;
  Tensor yt = y.is_tensor() ? y.tensor() : Full({}, y.scalar(), dtype(), device());
  if (!yt.ok()) return yt;
  if (dtype().IsFloat()) return Div(yt).Trunc();
  auto b = Broadcasted(*this, yt, false);
  if (!b.ok()) return FromStatus(b.status());
  return b->first.Node(Op::CDIV, b->first.dtype(), {b->first.uop_, b->second.uop_});
}

Tensor Tensor::TrueDiv(const Operand& y) const {
  if (!ok()) return *this;
  Tensor yt = y.is_tensor() ? y.tensor() : Full({}, y.scalar(), LeastUpperFloat(dtype()), device());
  if (!yt.ok()) return yt;
  auto b = Broadcasted(*this, yt, false);
  if (!b.ok()) return FromStatus(b.status());
  const DType fd = LeastUpperFloat(b->first.dtype());
  Tensor x = b->first.Cast(fd), d = b->second.Cast(fd);
  return x.Node(Op::FDIV, fd, {x.uop_, d.uop_});
}

Tensor Tensor::Fmod(const Operand& y) const {
  if (!ok()) return *this;
  Tensor yt = y.is_tensor() ? y.tensor() : Full({}, y.scalar(), dtype(), device());
  if (!yt.ok()) return yt;
  if (dtype().IsFloat()) return Sub(yt.Mul(Div(yt).Trunc()));
  auto b = Broadcasted(*this, yt, false);
  if (!b.ok()) return FromStatus(b.status());
  return b->first.Node(Op::CMOD, b->first.dtype(), {b->first.uop_, b->second.uop_});
}

Tensor Tensor::Erf() const {
  if (!ok()) return *this;
  Tensor x = Cast(LeastUpperFloat(dtype()));
  // |x| < 0.5: the Maclaurin series (relative error < 1e-8); beyond, A&S 7.1.26 (absolute error < 1.5e-7).
  Tensor x2 = x.Square();
  Tensor series = x.Mul(Poly(x2, {1.0, -1.0 / 3, 1.0 / 10, -1.0 / 42, 1.0 / 216, -1.0 / 1320, 1.0 / 9360}))
                      .Mul(2.0 / std::sqrt(kPi));
  Tensor a = x.Abs();
  Tensor t = a.Mul(0.3275911).Add(1.0).Reciprocal();
  Tensor tail = Poly(t, {0.0, 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429})
                    .Mul(x2.Neg().Exp())
                    .RSub(1.0);
  Tensor big = x.Lt(0).Where(tail.Neg(), tail);
  return a.Lt(0.5).Where(series, big);
}

Tensor Tensor::Atan() const {
  if (!ok()) return *this;
  Tensor x = Cast(LeastUpperFloat(dtype()));
  Tensor a = x.Abs();
  Tensor inv = a.Gt(1.0);
  Tensor t = inv.Where(a.Reciprocal(), a);  // t in [0, 1]
  // atan(t) on [0, 1]: odd minimax polynomial (|error| < 2e-8 after reduction to [0, tan(pi/8)] below)
  // reduce further: t > tan(pi/8) -> pi/4 + atan((t - 1) / (t + 1))
  const double tan_pi_8 = 0.41421356237309503;
  Tensor mid = t.Gt(tan_pi_8);
  Tensor u = mid.Where(t.Sub(1.0).Div(t.Add(1.0)), t);
  Tensor u2 = u.Square();
  Tensor core = u.Mul(Poly(u2, {1.0, -1.0 / 3, 1.0 / 5, -1.0 / 7, 1.0 / 9, -1.0 / 11, 1.0 / 13, -1.0 / 15, 1.0 / 17}));
  Tensor r = mid.Where(core.Add(kPi / 4), core);
  r = inv.Where(r.RSub(kPi / 2), r);
  r = x.Lt(0).Where(r.Neg(), r);
  return x.Ne(x).Where(x, r);  // nan stays nan
}

Tensor Tensor::Asin() const {
  if (!ok()) return *this;
  Tensor x = Cast(LeastUpperFloat(dtype()));
  return x.Div(x.Square().RSub(1.0).Sqrt()).Atan();  // asin(x) = atan(x / sqrt(1 - x^2)); |x| > 1 -> nan
}

Tensor Tensor::Acos() const { return Asin().RSub(kPi / 2); }

Tensor Tensor::Sinh() const {
  Tensor x = Cast(LeastUpperFloat(dtype()));
  return x.Exp().Sub(x.Neg().Exp()).Mul(0.5);
}

Tensor Tensor::Cosh() const {
  Tensor x = Cast(LeastUpperFloat(dtype()));
  return x.Exp().Add(x.Neg().Exp()).Mul(0.5);
}

Tensor Tensor::Asinh() const {
  Tensor x = Cast(LeastUpperFloat(dtype()));
  Tensor a = x.Abs();
  Tensor r = a.Add(a.Square().Add(1.0).Sqrt()).Log();
  return x.Lt(0).Where(r.Neg(), r);
}

Tensor Tensor::Acosh() const {
  Tensor x = Cast(LeastUpperFloat(dtype()));
  return x.Add(x.Square().Sub(1.0).Sqrt()).Log();
}

Tensor Tensor::Atanh() const {
  Tensor x = Cast(LeastUpperFloat(dtype()));
  return x.Add(1.0).Div(x.RSub(1.0)).Log().Mul(0.5);
}

Tensor Tensor::IsNan() const {
  if (!ok()) return *this;
  if (!dtype().IsFloat()) return FullLike(false, dtypes::kBool);
  return Ne(*this);
}

Tensor Tensor::IsInf(bool positive, bool negative) const {
  if (!ok()) return *this;
  if (!dtype().IsFloat()) return FullLike(false, dtypes::kBool);
  const double inf = std::numeric_limits<double>::infinity();
  Tensor r = FullLike(false, dtypes::kBool);
  if (positive) r = r.LogicalOr(Eq(inf));
  if (negative) r = r.LogicalOr(Eq(-inf));
  return r;
}

namespace {

// Running reduction along `axis` with window sums/products of a padded view.
Tensor CumOp(const Tensor& self, int64_t axis, bool exclusive, bool reverse, bool product) {
  if (!self.ok()) return self;
  if (self.ndim() == 0) return self;
  auto ax = NormAxis(product ? "CumProd" : "CumSum", axis, self.ndim());
  if (!ax.ok()) return Tensor::FromStatus(ax.status());
  const int64_t n = self.shape()[*ax];
  IntVec perm;
  for (int64_t i = 0; i < self.ndim(); ++i) {
    if (i != *ax) perm.push_back(i);
  }
  perm.push_back(*ax);
  IntVec inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  Tensor x = self.Permute(perm);
  if (reverse) x = x.Flip(-1);
  if (n == 0) return self;
  std::vector<std::pair<int64_t, int64_t>> pad(x.ndim(), {0, 0});
  const Scalar identity = product ? Scalar(1) : Scalar(0);
  if (exclusive) {
    pad.back() = {1, -1};
    x = x.Pad(pad, identity);
  }
  pad.back() = {n - 1, 0};
  // windows (..., n, n): row i holds padded[i .. i + n - 1] = x[i - n + 1 .. i]. Built by repeating the padded
  // axis (length w = 2n - 1) n times, flattening, padding by n and reading it back as (n, w + 1): element (i, j)
  // is then flat position i * w + (i + j), i.e. padded[i + j].
  Tensor padded = x.Pad(pad, identity);
  const int64_t w = 2 * n - 1;
  IntVec lead(padded.shape().begin(), padded.shape().end() - 1);
  IntVec r1 = lead, e1 = lead, flat = lead, r2 = lead;
  r1.insert(r1.end(), {1, w});
  e1.insert(e1.end(), {n, w});
  flat.push_back(n * w);
  r2.insert(r2.end(), {n, w + 1});
  Tensor rows = padded.Reshape(r1).Expand(e1).Reshape(flat);
  std::vector<std::pair<int64_t, int64_t>> tail(rows.ndim(), {0, 0});
  tail.back() = {0, n};
  rows = rows.Pad(tail, identity).Reshape(r2);
  std::vector<std::pair<int64_t, int64_t>> keep;
  for (int64_t d : lead) keep.emplace_back(0, d);
  keep.emplace_back(0, n);
  keep.emplace_back(0, n);
  rows = rows.Shrink(keep);
  Tensor r = product ? rows.Prod(-1) : rows.Sum(-1, false, self.dtype());
  r = r.Cast(self.dtype());
  if (reverse) r = r.Flip(-1);
  return r.Permute(inverse);
}

Tensor Triangle(const Tensor& self, int64_t k, bool lower) {
  if (!self.ok()) return self;
  if (self.ndim() < 2) return Tensor::FromStatus(Invalid(lower ? "Tril" : "Triu", "needs rank >= 2"));
  const int64_t rows = self.size(-2), cols = self.size(-1);
  Tensor r = Tensor::Arange(0, rows, 1, dtypes::kInt64, self.device()).Reshape({rows, 1});
  Tensor c = Tensor::Arange(0, cols, 1, dtypes::kInt64, self.device()).Reshape({1, cols});
  Tensor d = c.Sub(r);
  Tensor mask = lower ? d.Le(k) : d.Ge(k);
  return mask.Where(self, self.ZerosLike());
}

}  // namespace

Tensor Tensor::CumSum(int64_t axis, bool exclusive, bool reverse) const {
  return CumOp(*this, axis, exclusive, reverse, false);
}
Tensor Tensor::CumProd(int64_t axis, bool exclusive, bool reverse) const {
  return CumOp(*this, axis, exclusive, reverse, true);
}
Tensor Tensor::Tril(int64_t k) const { return Triangle(*this, k, true); }
Tensor Tensor::Triu(int64_t k) const { return Triangle(*this, k, false); }

}  // namespace kiln
