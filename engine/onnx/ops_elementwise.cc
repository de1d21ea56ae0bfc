// Elementwise ONNX ops: arithmetic, comparisons, logic, casts, Where, Clip and the variadic Max/Min/Sum/Mean.
#include <cmath>
#include <limits>

#include "engine/onnx/ops_util.h"

namespace kiln::onnx {
namespace {

// Before opset 7, binary ops broadcast only with broadcast=1, aligning B at `axis` (default: trailing).
absl::StatusOr<std::pair<Tensor, Tensor>> BinaryInputs(OpContext& ctx) {
  ONNX_INPUT(a, 0);
  ONNX_INPUT(b, 1);
  if (ctx.opset() < 7 && ctx.Int("broadcast", 0) == 1 && ctx.HasAttr("axis") && b.ndim() < a.ndim()) {
    KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", 0), a.ndim()));
    std::vector<int64_t> shape(axis, 1);
    for (int64_t d : b.shape()) shape.push_back(d);
    while (static_cast<int64_t>(shape.size()) < a.ndim()) shape.push_back(1);
    b = b.Reshape(shape);
  }
  return std::make_pair(a, b);
}

using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

OpImpl Binary(BinaryFn fn) {
  return [fn](OpContext& ctx) -> absl::StatusOr<std::vector<Value>> {
    KILN_ASSIGN_OR_RETURN(auto ab, BinaryInputs(ctx));
    return One(fn(ab.first, ab.second));
  };
}

using UnaryFn = Tensor (*)(const Tensor&);

// A unary float op, computed in float32 for float16/bfloat16.
OpImpl UnaryFloat(UnaryFn fn) {
  return [fn](OpContext& ctx) -> absl::StatusOr<std::vector<Value>> {
    ONNX_INPUT(x, 0);
    return One(InF32(x, fn));
  };
}

OpImpl Unary(UnaryFn fn) {
  return [fn](OpContext& ctx) -> absl::StatusOr<std::vector<Value>> {
    ONNX_INPUT(x, 0);
    return One(fn(x));
  };
}

Tensor DivOp(const Tensor& a, const Tensor& b) {
  if (a.dtype().IsFloat()) return InF32(a, [&](const Tensor& x) { return x.TrueDiv(b.Cast(x.dtype())); });
  return a.TruncDiv(b);
}

Tensor PowOp(const Tensor& base, const Tensor& e) {
  // ONNX Pow(T, T1) -> T: the exponent may have another dtype.
  if (base.dtype().IsFloat()) {
    return InF32(base, [&](const Tensor& x) { return x.Pow(e.Cast(x.dtype())); });
  }
  if (e.dtype().IsFloat()) return base.Cast(e.dtype()).Pow(e).Cast(base.dtype());
  return base.Pow(e.Cast(base.dtype()));
}

absl::StatusOr<std::vector<Value>> Pow(OpContext& ctx) {
  ONNX_INPUT(a, 0);
  // A constant scalar exponent takes the exact repeated-squaring / sqrt path.
  if (!ctx.Has(1)) return ctx.Error("input 1 is required");
  const Value& ev = ctx.In(1);
  if (ev.host && ev.host_constant && ev.host->numel() == 1 && static_cast<int64_t>(ev.host->shape.size()) <= a.ndim() &&
      a.dtype().IsFloat()) {
    const double e = ev.host->GetDouble(0);
    return One(InF32(a, [&](const Tensor& x) { return x.Pow(e); }));
  }
  KILN_ASSIGN_OR_RETURN(auto ab, BinaryInputs(ctx));
  return One(PowOp(ab.first, ab.second));
}

absl::StatusOr<std::vector<Value>> Mod(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(auto ab, BinaryInputs(ctx));
  const bool fmod = ctx.Int("fmod", 0) != 0;
  if (ab.first.dtype().IsFloat() && !fmod) return ctx.Error("floating point Mod needs fmod=1");
  if (fmod) return One(InF32(ab.first, [&](const Tensor& x) { return x.Fmod(ab.second.Cast(x.dtype())); }));
  return One(ab.first.Mod(ab.second));
}

absl::StatusOr<std::vector<Value>> BitShift(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(auto ab, BinaryInputs(ctx));
  const std::string dir = ctx.String("direction", "");
  Tensor two = ab.first.FullLike(2);
  Tensor scale = two.Pow(ab.second.Cast(ab.first.dtype()));
  if (dir == "LEFT") return One(ab.first.Mul(scale));
  if (dir == "RIGHT") return One(ab.first.FloorDiv(scale));
  return ctx.Error("direction must be LEFT or RIGHT");
}

absl::StatusOr<std::vector<Value>> Cast(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(DType to, OnnxToDType(static_cast<int32_t>(ctx.Int("to", 1))));
  if (x.dtype() == to) return One(x);
  if (x.dtype().IsFloat() && !to.IsFloat() && !to.IsBool()) {
    // float -> int truncates toward zero (numpy astype); through int64 so that narrow targets wrap.
    Tensor t = x.Cast(dtypes::kFloat64 == x.dtype() ? dtypes::kFloat64 : dtypes::kFloat32).Trunc();
    if (to.ItemSize() < 8) return One(t.Cast(dtypes::kInt64).Cast(to));
    return One(t.Cast(to));
  }
  if (IsLowFloat(x.dtype()) && IsLowFloat(to)) return One(x.Cast(dtypes::kFloat32).Cast(to));
  return One(x.Cast(to));
}

absl::StatusOr<std::vector<Value>> CastLike(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  if (!ctx.Has(1)) return ctx.Error("input 1 is required");
  const DType to = ctx.In(1).dtype();
  if (x.dtype() == to) return One(x);
  if (x.dtype().IsFloat() && !to.IsFloat() && !to.IsBool()) {
    Tensor t = x.Trunc();
    if (to.ItemSize() < 8) return One(t.Cast(dtypes::kInt64).Cast(to));
    return One(t.Cast(to));
  }
  if (IsLowFloat(x.dtype()) && IsLowFloat(to)) return One(x.Cast(dtypes::kFloat32).Cast(to));
  return One(x.Cast(to));
}

absl::StatusOr<std::vector<Value>> Where(OpContext& ctx) {
  ONNX_INPUT(c, 0);
  ONNX_INPUT(x, 1);
  ONNX_INPUT(y, 2);
  return One(c.Where(x, y));
}

absl::StatusOr<std::vector<Value>> Clip(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  Tensor r = x;
  if (ctx.opset() < 11) {
    const double inf = std::numeric_limits<double>::infinity();
    const double lo = ctx.Float("min", -inf), hi = ctx.Float("max", inf);
    if (lo != -inf) r = r.Maximum(x.FullLike(lo));
    if (hi != inf) r = r.Minimum(x.FullLike(hi));
    return One(r);
  }
  if (ctx.Has(1)) {
    ONNX_INPUT(lo, 1);
    r = r.Maximum(lo.Cast(x.dtype()));
  }
  if (ctx.Has(2)) {
    ONNX_INPUT(hi, 2);
    r = r.Minimum(hi.Cast(x.dtype()));
  }
  return One(r);
}

// Max / Min / Sum / Mean of any number of broadcast inputs.
OpImpl Variadic(BinaryFn fn, bool mean) {
  return [fn, mean](OpContext& ctx) -> absl::StatusOr<std::vector<Value>> {
    ONNX_INPUT(acc, 0);
    size_t n = 1;
    for (size_t i = 1; i < ctx.num_inputs(); ++i) {
      if (!ctx.Has(i)) continue;
      ONNX_INPUT(x, i);
      acc = fn(acc, x);
      ++n;
    }
    if (mean) acc = InF32(acc, [&](const Tensor& t) { return t.Div(static_cast<double>(n)); });
    return One(acc);
  };
}

absl::StatusOr<std::vector<Value>> IsInf(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  return One(x.IsInf(ctx.Int("detect_positive", 1) != 0, ctx.Int("detect_negative", 1) != 0));
}

// ** activations **
absl::StatusOr<std::vector<Value>> LeakyRelu(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  const double alpha = ctx.Float("alpha", 0.01);
  return One(InF32(x, [&](const Tensor& t) { return t.Gt(0).Where(t, t.Mul(alpha)); }));
}
absl::StatusOr<std::vector<Value>> Elu(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  const double alpha = ctx.Float("alpha", 1.0);
  return One(InF32(x, [&](const Tensor& t) { return t.Gt(0).Where(t, t.Exp().Sub(1.0).Mul(alpha)); }));
}
absl::StatusOr<std::vector<Value>> Selu(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  const double alpha = ctx.Float("alpha", 1.67326319217681884765625);
  const double gamma = ctx.Float("gamma", 1.05070102214813232421875);
  return One(InF32(x, [&](const Tensor& t) { return t.Gt(0).Where(t, t.Exp().Sub(1.0).Mul(alpha)).Mul(gamma); }));
}
absl::StatusOr<std::vector<Value>> Celu(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  const double alpha = ctx.Float("alpha", 1.0);
  return One(InF32(x, [&](const Tensor& t) {
    return t.Maximum(0.0).Add(t.Div(alpha).Exp().Sub(1.0).Mul(alpha).Minimum(0.0));
  }));
}
absl::StatusOr<std::vector<Value>> ThresholdedRelu(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  const double alpha = ctx.Float("alpha", 1.0);
  return One(x.Gt(alpha).Where(x, x.ZerosLike()));
}
absl::StatusOr<std::vector<Value>> HardSigmoid(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  const double alpha = ctx.Float("alpha", 0.2), beta = ctx.Float("beta", 0.5);
  return One(InF32(x, [&](const Tensor& t) { return t.Mul(alpha).Add(beta).Maximum(0.0).Minimum(1.0); }));
}
absl::StatusOr<std::vector<Value>> Shrink(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  const double bias = ctx.Float("bias", 0.0), lambd = ctx.Float("lambd", 0.5);
  Tensor xf = x.Cast(x.dtype().IsFloat() ? x.dtype() : dtypes::kFloat64);
  Tensor r = xf.Lt(-lambd).Where(xf.Add(bias), xf.Gt(lambd).Where(xf.Sub(bias), xf.ZerosLike()));
  return One(r.Cast(x.dtype()));
}
absl::StatusOr<std::vector<Value>> Gelu(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  const std::string approx = ctx.String("approximate", "none");
  if (approx == "tanh") return One(InF32(x, [](const Tensor& t) { return t.Gelu(); }));
  if (approx != "none") return ctx.Error("approximate must be none or tanh");
  return One(InF32(x, [](const Tensor& t) { return t.Mul(0.5).Mul(t.Mul(M_SQRT1_2).Erf().Add(1.0)); }));
}
absl::StatusOr<std::vector<Value>> Swish(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  const double alpha = ctx.Float("alpha", 1.0);
  return One(InF32(x, [&](const Tensor& t) { return t.Mul(t.Mul(alpha).Sigmoid()); }));
}
absl::StatusOr<std::vector<Value>> PRelu(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(slope, 1);
  if (slope.ndim() == 1 && x.ndim() > 2 && slope.size(0) == x.size(1) && slope.size(0) != x.size(-1)) {
    std::vector<int64_t> s(x.ndim() - 1, 1);
    s[0] = slope.size(0);
    slope = slope.Reshape(s);  // per-channel slope (opset < 7 exports)
  }
  return One(x.Lt(0).Where(x.Mul(slope), x));
}


// clang-format off
Tensor AddFn(const Tensor& a, const Tensor& b) { return a.Add(b); }
Tensor SubFn(const Tensor& a, const Tensor& b) { return a.Sub(b); }
Tensor MulFn(const Tensor& a, const Tensor& b) { return a.Mul(b); }
Tensor MaxFn(const Tensor& a, const Tensor& b) { return a.Maximum(b); }
Tensor MinFn(const Tensor& a, const Tensor& b) { return a.Minimum(b); }
Tensor EqFn(const Tensor& a, const Tensor& b) { return a.Eq(b); }
Tensor LtFn(const Tensor& a, const Tensor& b) { return a.Lt(b); }
Tensor LeFn(const Tensor& a, const Tensor& b) { return a.Le(b); }
Tensor GtFn(const Tensor& a, const Tensor& b) { return a.Gt(b); }
Tensor GeFn(const Tensor& a, const Tensor& b) { return a.Ge(b); }
Tensor AndFn(const Tensor& a, const Tensor& b) { return a.LogicalAnd(b); }
Tensor OrFn(const Tensor& a, const Tensor& b) { return a.LogicalOr(b); }
Tensor XorFn(const Tensor& a, const Tensor& b) { return a.Cast(dtypes::kBool).BitwiseXor(b.Cast(dtypes::kBool)); }
Tensor BAndFn(const Tensor& a, const Tensor& b) { return a.BitwiseAnd(b); }
Tensor BOrFn(const Tensor& a, const Tensor& b) { return a.BitwiseOr(b); }
Tensor BXorFn(const Tensor& a, const Tensor& b) { return a.BitwiseXor(b); }
// clang-format on

}  // namespace

void RegisterElementwiseOps(OpTable* t) {
  const std::vector<std::string> legacy = {"broadcast", "axis", "consumed_inputs"};
  // ** arithmetic (opset < 7 forms take broadcast/axis) **
  Reg(t, "Add", 1, kMaxOnnxOpset, legacy, Binary(AddFn));
  Reg(t, "Sub", 1, kMaxOnnxOpset, legacy, Binary(SubFn));
  Reg(t, "Mul", 1, kMaxOnnxOpset, legacy, Binary(MulFn));
  Reg(t, "Div", 1, kMaxOnnxOpset, legacy, Binary(DivOp));
  Reg(t, "Pow", 1, kMaxOnnxOpset, legacy, Pow);
  Reg(t, "Mod", 10, kMaxOnnxOpset, {"fmod"}, Mod);
  Reg(t, "BitShift", 11, kMaxOnnxOpset, {"direction"}, BitShift);
  // ** comparisons and logic **
  Reg(t, "Equal", 1, kMaxOnnxOpset, legacy, Binary(EqFn));
  Reg(t, "Less", 1, kMaxOnnxOpset, legacy, Binary(LtFn));
  Reg(t, "LessOrEqual", 12, kMaxOnnxOpset, {}, Binary(LeFn));
  Reg(t, "Greater", 1, kMaxOnnxOpset, legacy, Binary(GtFn));
  Reg(t, "GreaterOrEqual", 12, kMaxOnnxOpset, {}, Binary(GeFn));
  Reg(t, "And", 1, kMaxOnnxOpset, legacy, Binary(AndFn));
  Reg(t, "Or", 1, kMaxOnnxOpset, legacy, Binary(OrFn));
  Reg(t, "Xor", 1, kMaxOnnxOpset, legacy, Binary(XorFn));
  Reg(t, "BitwiseAnd", 18, kMaxOnnxOpset, {}, Binary(BAndFn));
  Reg(t, "BitwiseOr", 18, kMaxOnnxOpset, {}, Binary(BOrFn));
  Reg(t, "BitwiseXor", 18, kMaxOnnxOpset, {}, Binary(BXorFn));
  Reg(t, "Not", 1, kMaxOnnxOpset, {}, Unary([](const Tensor& x) { return x.LogicalNot(); }));
  Reg(t, "BitwiseNot", 18, kMaxOnnxOpset, {}, Unary([](const Tensor& x) { return x.BitwiseNot(); }));
  // ** variadic **
  Reg(t, "Max", 1, kMaxOnnxOpset, {"consumed_inputs"}, Variadic(MaxFn, false));
  Reg(t, "Min", 1, kMaxOnnxOpset, {"consumed_inputs"}, Variadic(MinFn, false));
  Reg(t, "Sum", 1, kMaxOnnxOpset, {"consumed_inputs"}, Variadic(AddFn, false));
  Reg(t, "Mean", 1, kMaxOnnxOpset, {"consumed_inputs"}, Variadic(AddFn, true));
  // ** casts, selection **
  Reg(t, "Cast", 1, kMaxOnnxOpset, {"to", "saturate"}, Cast);
  Reg(t, "CastLike", 15, kMaxOnnxOpset, {"saturate"}, CastLike);
  Reg(t, "Where", 9, kMaxOnnxOpset, {}, Where);
  Reg(t, "Clip", 1, kMaxOnnxOpset, {"min", "max", "consumed_inputs"}, Clip);
  // ** unary math **
  const std::vector<std::string> ci = {"consumed_inputs"};
  Reg(t, "Neg", 1, kMaxOnnxOpset, ci, Unary([](const Tensor& x) { return x.Neg(); }));
  Reg(t, "Abs", 1, kMaxOnnxOpset, ci, Unary([](const Tensor& x) { return x.Abs(); }));
  Reg(t, "Sign", 9, kMaxOnnxOpset, {}, Unary([](const Tensor& x) { return x.Sign(); }));
  Reg(t, "Reciprocal", 1, kMaxOnnxOpset, ci, UnaryFloat([](const Tensor& x) { return x.Reciprocal(); }));
  Reg(t, "Sqrt", 1, kMaxOnnxOpset, ci, UnaryFloat([](const Tensor& x) { return x.Sqrt(); }));
  Reg(t, "Exp", 1, kMaxOnnxOpset, ci, UnaryFloat([](const Tensor& x) { return x.Exp(); }));
  Reg(t, "Log", 1, kMaxOnnxOpset, ci, UnaryFloat([](const Tensor& x) { return x.Log(); }));
  Reg(t, "Sin", 7, kMaxOnnxOpset, {}, UnaryFloat([](const Tensor& x) { return x.Sin(); }));
  Reg(t, "Cos", 7, kMaxOnnxOpset, {}, UnaryFloat([](const Tensor& x) { return x.Cos(); }));
  Reg(t, "Tan", 7, kMaxOnnxOpset, {}, UnaryFloat([](const Tensor& x) { return x.Tan(); }));
  Reg(t, "Asin", 7, kMaxOnnxOpset, {}, UnaryFloat([](const Tensor& x) { return x.Asin(); }));
  Reg(t, "Acos", 7, kMaxOnnxOpset, {}, UnaryFloat([](const Tensor& x) { return x.Acos(); }));
  Reg(t, "Atan", 7, kMaxOnnxOpset, {}, UnaryFloat([](const Tensor& x) { return x.Atan(); }));
  Reg(t, "Sinh", 9, kMaxOnnxOpset, {}, UnaryFloat([](const Tensor& x) { return x.Sinh(); }));
  Reg(t, "Cosh", 9, kMaxOnnxOpset, {}, UnaryFloat([](const Tensor& x) { return x.Cosh(); }));
  Reg(t, "Asinh", 9, kMaxOnnxOpset, {}, UnaryFloat([](const Tensor& x) { return x.Asinh(); }));
  Reg(t, "Acosh", 9, kMaxOnnxOpset, {}, UnaryFloat([](const Tensor& x) { return x.Acosh(); }));
  Reg(t, "Atanh", 9, kMaxOnnxOpset, {}, UnaryFloat([](const Tensor& x) { return x.Atanh(); }));
  Reg(t, "Erf", 9, kMaxOnnxOpset, {}, UnaryFloat([](const Tensor& x) { return x.Erf(); }));
  Reg(t, "Floor", 1, kMaxOnnxOpset, ci, Unary([](const Tensor& x) { return x.Floor(); }));
  Reg(t, "Ceil", 1, kMaxOnnxOpset, ci, Unary([](const Tensor& x) { return x.Ceil(); }));
  Reg(t, "Round", 11, kMaxOnnxOpset, {}, Unary([](const Tensor& x) { return x.Round(); }));
  Reg(t, "IsNaN", 9, kMaxOnnxOpset, {}, Unary([](const Tensor& x) { return x.IsNan(); }));
  Reg(t, "IsInf", 10, kMaxOnnxOpset, {"detect_negative", "detect_positive"}, IsInf);
  // ** activations **
  Reg(t, "Relu", 1, kMaxOnnxOpset, ci, Unary([](const Tensor& x) { return x.Relu(); }));
  Reg(t, "Sigmoid", 1, kMaxOnnxOpset, ci, UnaryFloat([](const Tensor& x) { return x.Sigmoid(); }));
  Reg(t, "Tanh", 1, kMaxOnnxOpset, ci, UnaryFloat([](const Tensor& x) { return x.Tanh(); }));
  Reg(t, "Softplus", 1, kMaxOnnxOpset, {}, UnaryFloat(Softplus));
  Reg(t, "Softsign", 1, kMaxOnnxOpset, {},
                UnaryFloat([](const Tensor& x) { return x.Div(x.Abs().Add(1.0)); }));
  Reg(t, "Mish", 18, kMaxOnnxOpset, {},
                UnaryFloat([](const Tensor& x) { return x.Mul(Softplus(x).Tanh()); }));
  Reg(t, "HardSwish", 14, kMaxOnnxOpset, {}, UnaryFloat([](const Tensor& x) {
                  return x.Mul(x.Div(6.0).Add(0.5).Maximum(0.0).Minimum(1.0));
                }));
  Reg(t, "LeakyRelu", 1, kMaxOnnxOpset, {"alpha", "consumed_inputs"}, LeakyRelu);
  Reg(t, "Elu", 1, kMaxOnnxOpset, {"alpha", "consumed_inputs"}, Elu);
  Reg(t, "Selu", 1, kMaxOnnxOpset, {"alpha", "gamma", "consumed_inputs"}, Selu);
  Reg(t, "Celu", 12, kMaxOnnxOpset, {"alpha"}, Celu);
  Reg(t, "ThresholdedRelu", 10, kMaxOnnxOpset, {"alpha"}, ThresholdedRelu);
  Reg(t, "HardSigmoid", 1, kMaxOnnxOpset, {"alpha", "beta", "consumed_inputs"}, HardSigmoid);
  Reg(t, "Shrink", 9, kMaxOnnxOpset, {"bias", "lambd"}, Shrink);
  Reg(t, "Gelu", 20, kMaxOnnxOpset, {"approximate"}, Gelu);
  Reg(t, "Swish", 24, kMaxOnnxOpset, {"alpha"}, Swish);
  Reg(t, "PRelu", 1, kMaxOnnxOpset, ci, PRelu);
}

}  // namespace kiln::onnx
