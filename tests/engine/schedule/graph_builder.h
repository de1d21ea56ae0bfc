// Test helpers that build tensor graphs (docs/kernel-ir.md §1) directly with UOp factories, the way engine/tensor
// does: explicit broadcasting (RESHAPE + EXPAND), keepdim reductions, realized inputs as RESHAPE(BUFFER).
#pragma once

#include <cmath>
#include <numeric>
#include <vector>

#include "engine/schedule/schedule.h"
#include "engine/uop/uop.h"

namespace kiln::testing {

inline UOpPtr Input(const Shape& shape, DType dt = dtypes::kFloat32, const std::string& dev = "CPU") {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  UOpPtr b = NewBuffer(dt, n, dev);
  if (shape.size() == 1) return b;
  return UOp::Make(Op::RESHAPE, dt, {b}, IntVec(shape.begin(), shape.end()));
}

inline UOpPtr Mv(Op op, const UOpPtr& x, IntVec arg) { return UOp::Make(op, x->dtype(), {x}, std::move(arg)); }
inline UOpPtr Reshape(const UOpPtr& x, IntVec s) { return Mv(Op::RESHAPE, x, std::move(s)); }
inline UOpPtr Expand(const UOpPtr& x, IntVec s) { return Mv(Op::EXPAND, x, std::move(s)); }
inline UOpPtr Permute(const UOpPtr& x, IntVec p) { return Mv(Op::PERMUTE, x, std::move(p)); }
inline UOpPtr Pad(const UOpPtr& x, IntVec p) { return Mv(Op::PAD, x, std::move(p)); }
inline UOpPtr Shrink(const UOpPtr& x, IntVec p) { return Mv(Op::SHRINK, x, std::move(p)); }
inline UOpPtr Flip(const UOpPtr& x, IntVec p) { return Mv(Op::FLIP, x, std::move(p)); }
inline UOpPtr Contiguous(const UOpPtr& x) { return UOp::Make(Op::CONTIGUOUS, x->dtype(), {x}); }

// Broadcasts x to `shape` (numpy rules): reshape to the rank, then expand.
inline UOpPtr BroadcastTo(const UOpPtr& x, const Shape& shape) {
  if (x->shape() == shape) return x;
  Shape s = x->shape();
  IntVec r(shape.size() - s.size(), 1);
  r.insert(r.end(), s.begin(), s.end());
  UOpPtr y = Shape(r.begin(), r.end()) == s ? x : Reshape(x, r);
  if (Shape(r.begin(), r.end()) == shape) return y;
  return Expand(y, IntVec(shape.begin(), shape.end()));
}

inline UOpPtr Scalar(double v, const Shape& shape, DType dt = dtypes::kFloat32) {
  return BroadcastTo(UOp::Const(dt, v), shape);
}

inline UOpPtr Bin(Op op, const UOpPtr& a, const UOpPtr& b) {
  Shape s = *BroadcastShapes(a->shape(), b->shape());
  UOpPtr x = BroadcastTo(a, s), y = BroadcastTo(b, s);
  DType dt = IsComparison(op) ? dtypes::kBool : a->dtype();
  return UOp::Make(op, dt, {x, y});
}
inline UOpPtr Add(const UOpPtr& a, const UOpPtr& b) { return Bin(Op::ADD, a, b); }
inline UOpPtr Mul(const UOpPtr& a, const UOpPtr& b) { return Bin(Op::MUL, a, b); }
inline UOpPtr Neg(const UOpPtr& a) { return UOp::Make(Op::NEG, a->dtype(), {a}); }
inline UOpPtr Sub(const UOpPtr& a, const UOpPtr& b) { return Add(a, Neg(b)); }
inline UOpPtr AddC(const UOpPtr& a, double c) { return Add(a, Scalar(c, a->shape(), a->dtype())); }
inline UOpPtr MulC(const UOpPtr& a, double c) { return Mul(a, Scalar(c, a->shape(), a->dtype())); }
inline UOpPtr Relu(const UOpPtr& a) { return Bin(Op::MAX, a, Scalar(0, a->shape(), a->dtype())); }
inline UOpPtr Sqrt(const UOpPtr& a) { return UOp::Make(Op::SQRT, a->dtype(), {a}); }
inline UOpPtr Recip(const UOpPtr& a) { return UOp::Make(Op::RECIPROCAL, a->dtype(), {a}); }

inline UOpPtr Reduce(Op op, const UOpPtr& x, IntVec axes, bool keepdim) {
  for (int64_t& a : axes)
    if (a < 0) a += static_cast<int64_t>(x->shape().size());
  std::sort(axes.begin(), axes.end());
  UOpPtr r = UOp::Make(Op::REDUCE_AXIS, x->dtype(), {x}, ReduceArg{op, axes});
  if (keepdim) return r;
  IntVec s;
  for (size_t i = 0; i < x->shape().size(); ++i)
    if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) == axes.end()) s.push_back(x->shape()[i]);
  return Reshape(r, s);
}
inline UOpPtr Sum(const UOpPtr& x, IntVec axes, bool keepdim = false) { return Reduce(Op::ADD, x, axes, keepdim); }
inline UOpPtr MaxR(const UOpPtr& x, IntVec axes, bool keepdim = false) { return Reduce(Op::MAX, x, axes, keepdim); }
inline UOpPtr SumAll(const UOpPtr& x) {
  IntVec axes(x->shape().size());
  std::iota(axes.begin(), axes.end(), 0);
  return Reduce(Op::ADD, x, axes, false);
}
inline UOpPtr Mean(const UOpPtr& x, IntVec axes, bool keepdim = false) {
  int64_t n = 1;
  for (int64_t a : axes) n *= x->shape()[a < 0 ? a + x->shape().size() : a];
  UOpPtr s = Sum(x, axes, keepdim);
  return MulC(s, 1.0 / static_cast<double>(n));
}
inline UOpPtr Std(const UOpPtr& x, int64_t axis) {
  int64_t n = x->shape()[axis < 0 ? axis + x->shape().size() : axis];
  UOpPtr d = Sub(x, Mean(x, {axis}, true));
  return Sqrt(MulC(Sum(Mul(d, d), {axis}), 1.0 / static_cast<double>(n - 1)));
}
inline UOpPtr LayerNorm(const UOpPtr& x, IntVec axes, const UOpPtr& w, const UOpPtr& b, double eps = 1e-5) {
  UOpPtr y = Sub(x, Mean(x, axes, true));
  UOpPtr var = Mean(Mul(y, y), axes, true);
  UOpPtr out = Mul(y, Recip(Sqrt(AddC(var, eps))));
  return Add(Mul(out, w), b);
}
// (M,K) @ (K,N) as reshape * mul * sum.
inline UOpPtr Matmul(const UOpPtr& a, const UOpPtr& b) {
  int64_t m = a->shape()[0], k = a->shape()[1], n = b->shape()[1];
  UOpPtr x = Expand(Reshape(a, {m, 1, k}), {m, n, k});
  UOpPtr y = Expand(Reshape(Permute(b, {1, 0}), {1, n, k}), {m, n, k});
  return Sum(Mul(x, y), {2});
}

// tinygrad's _pool for 2-D windows, stride 1, dilation 1: (N,C,H,W) -> (N,C,OH,OW,KH,KW).
inline UOpPtr Pool2d(const UOpPtr& x, int64_t kh, int64_t kw) {
  const Shape& s = x->shape();
  int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  int64_t oh = h - kh + 1, ow = w - kw + 1;
  int64_t eh = (kh * (h + 1) + h - 1) / h, ew = (kw * (w + 1) + w - 1) / w;
  UOpPtr y = Reshape(x, {n, c, 1, h, 1, w});
  y = Expand(y, {n, c, eh, h, ew, w});
  y = Reshape(y, {n, c, eh * h, ew * w});
  y = Shrink(y, {0, n, 0, c, 0, kh * (h + 1), 0, kw * (w + 1)});
  y = Reshape(y, {n, c, kh, h + 1, kw, w + 1});
  y = Shrink(y, {0, n, 0, c, 0, kh, 0, oh, 0, kw, 0, ow});
  return Permute(y, {0, 1, 3, 5, 2, 4});
}
// Conv2d (no padding, stride 1): x (N,C,H,W), w (O,C,KH,KW), b (O) -> (N,O,OH,OW).
inline UOpPtr Conv2d(const UOpPtr& x, const UOpPtr& w, const UOpPtr& b) {
  int64_t n = x->shape()[0], c = x->shape()[1], o = w->shape()[0], kh = w->shape()[2], kw = w->shape()[3];
  UOpPtr p = Pool2d(x, kh, kw);
  int64_t oh = p->shape()[2], ow = p->shape()[3];
  UOpPtr xe = Expand(Reshape(p, {n, 1, c, oh, ow, kh, kw}), {n, o, c, oh, ow, kh, kw});
  UOpPtr we = Expand(Reshape(w, {1, o, c, 1, 1, kh, kw}), {n, o, c, oh, ow, kh, kw});
  UOpPtr s = Sum(Mul(xe, we), {2, 5, 6});
  return Add(s, Reshape(b, {1, o, 1, 1}));
}

}  // namespace kiln::testing
