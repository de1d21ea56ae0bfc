// Quantization ONNX ops with integer types kiln has (uint8/int8/uint16/int16; float8/int4/int2 are dtype gaps):
// QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearMatMul, QLinearConv, ConvInteger.
#include <limits>

#include "engine/onnx/ops_util.h"

namespace kiln::onnx {
namespace {

// Scale / zero point broadcast against x: a scalar, a per-axis vector, or a blocked tensor (repeated block_size
// times along `axis`).
absl::StatusOr<Tensor> QuantParam(OpContext& ctx, const Tensor& p, const Tensor& x, int64_t axis_attr, int64_t block) {
  if (p.ndim() == 0 || p.numel() == 1) return p.Reshape({});
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, axis_attr, x.ndim()));
  if (block <= 0) {
    if (p.ndim() != 1 || p.size(0) != x.size(axis)) return ctx.Error("per-axis parameters must match the axis length");
    std::vector<int64_t> s(x.ndim(), 1);
    s[axis] = p.size(0);
    return p.Reshape(s);
  }
  // blocked: repeat each entry block times along axis, then cut to x's length
  std::vector<int64_t> shape = Dims(p);
  std::vector<int64_t> unsq = shape, expd = shape;
  unsq.insert(unsq.begin() + axis + 1, 1);
  expd.insert(expd.begin() + axis + 1, block);
  std::vector<int64_t> merged = shape;
  merged[axis] *= block;
  Tensor r = p.Reshape(unsq).Expand(expd).Reshape(merged);
  std::vector<std::pair<int64_t, int64_t>> b;
  for (int64_t d = 0; d < r.ndim(); ++d) b.emplace_back(0, d == axis ? x.size(axis) : r.size(d));
  return r.Shrink(b);
}

std::pair<double, double> IntRange(DType d) {
  return {static_cast<double>(DTypeMin(d)), static_cast<double>(DTypeMax(d))};
}

bool QuantType(DType d) {
  return d == dtypes::kUInt8 || d == dtypes::kInt8 || d == dtypes::kUInt16 || d == dtypes::kInt16;
}

// clip(rint(v) + zp, range) as `to` (v float32).
Tensor Requantize(const Tensor& v, const std::optional<Tensor>& zp, DType to) {
  Tensor r = v.Round();
  if (zp) r = r.Add(zp->Cast(dtypes::kFloat32));
  auto [lo, hi] = IntRange(to);
  return r.Maximum(lo).Minimum(hi).Cast(to);
}

absl::StatusOr<std::vector<Value>> QuantizeLinear(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(scale, 1);
  const int64_t axis = ctx.Int("axis", 1);
  const int64_t block = ctx.Int("block_size", 0);
  DType to = dtypes::kUInt8;
  if (ctx.HasAttr("output_dtype")) { KILN_ASSIGN_OR_RETURN(to, OnnxToDType(static_cast<int32_t>(ctx.Int("output_dtype", 2)))); }
  std::optional<Tensor> zp;
  if (ctx.Has(2)) {
    ONNX_INPUT(z, 2);
    to = z.dtype();
    KILN_ASSIGN_OR_RETURN(Tensor zb, QuantParam(ctx, z, x, axis, block));
    zp = zb;
  }
  if (!QuantType(to)) return ctx.Error(absl::StrCat("quantized type ", to.Name(), " is not supported"));
  KILN_ASSIGN_OR_RETURN(Tensor s, QuantParam(ctx, scale, x, axis, block));
  DType f = dtypes::kFloat32;
  if (ctx.HasAttr("precision")) { KILN_ASSIGN_OR_RETURN(f, OnnxToDType(static_cast<int32_t>(ctx.Int("precision", 1)))); }
  Tensor v = x.Cast(f).TrueDiv(s.Cast(f)).Cast(dtypes::kFloat32);
  return One(Requantize(v, zp, to));
}

absl::StatusOr<std::vector<Value>> DequantizeLinear(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(scale, 1);
  const int64_t axis = ctx.Int("axis", 1);
  const int64_t block = ctx.Int("block_size", 0);
  Tensor dx = x.Cast(dtypes::kFloat32);
  if (ctx.Has(2)) {
    ONNX_INPUT(z, 2);
    KILN_ASSIGN_OR_RETURN(Tensor zb, QuantParam(ctx, z, x, axis, block));
    dx = dx.Sub(zb.Cast(dtypes::kFloat32));
  }
  KILN_ASSIGN_OR_RETURN(Tensor s, QuantParam(ctx, scale, x, axis, block));
  DType out = scale.dtype();
  if (ctx.HasAttr("output_dtype")) { KILN_ASSIGN_OR_RETURN(out, OnnxToDType(static_cast<int32_t>(ctx.Int("output_dtype", 1)))); }
  return One(dx.Mul(s.Cast(dtypes::kFloat32)).Cast(out));
}

// x is read three times (its minimum, its maximum, the quantization): a computed x (a GELU's output in a dynamically
// quantized transformer's FFN, 128 x 1536 with an erf per element) is stored once rather than recomputed by each,
// and its two reduces then read memory (quantized MiniLM: 1.55 ms per layer for the minimum and maximum).
absl::StatusOr<std::vector<Value>> DynamicQuantizeLinear(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  Tensor xf = x.Cast(dtypes::kFloat32);
  if (!xf.IsRealized()) xf = xf.Contiguous();
  Tensor lo = xf.Min().Minimum(0.0), hi = xf.Max().Maximum(0.0);
  Tensor scale = hi.Sub(lo).TrueDiv(255.0);
  Tensor zp = lo.Neg().TrueDiv(scale).Round().Maximum(0.0).Minimum(255.0);
  Tensor y = xf.TrueDiv(scale).Round().Add(zp).Maximum(0.0).Minimum(255.0).Cast(dtypes::kUInt8);
  return std::vector<Value>{Value::Of(y), Value::Of(scale), Value::Of(zp.Cast(dtypes::kUInt8))};
}

// (q - zp) as int32, with a per-row/column zero point reshaped along `axis_dims` when it is a vector.
Tensor Centered(const Tensor& q, const std::optional<Tensor>& zp, const std::vector<int64_t>& vec_shape) {
  Tensor r = q.Cast(dtypes::kInt32);
  if (!zp) return r;
  Tensor z = zp->Cast(dtypes::kInt32);
  if (z.numel() > 1) z = z.Reshape(vec_shape);
  else z = z.Reshape({});
  return r.Sub(z);
}

absl::StatusOr<std::vector<Value>> QLinearMatMul(OpContext& ctx) {
  ONNX_INPUT(a, 0);
  ONNX_INPUT(as, 1);
  ONNX_INPUT(az, 2);
  ONNX_INPUT(b, 3);
  ONNX_INPUT(bs, 4);
  ONNX_INPUT(bz, 5);
  ONNX_INPUT(ys, 6);
  ONNX_INPUT(yz, 7);
  // int32 accumulation, as onnxruntime's: float32 sums of K products lose bits past 2^24 (K >= 515 at the extremes)
  Tensor acc = IntegerMatmul(a, b, az, bz).Cast(dtypes::kFloat32);
  Tensor asf = as.Cast(dtypes::kFloat32), bsf = bs.Cast(dtypes::kFloat32);
  if (asf.numel() > 1) asf = asf.Reshape({-1, 1});
  if (bsf.numel() > 1) bsf = bsf.Reshape({1, -1});
  Tensor v = acc.Mul(asf.Mul(bsf)).TrueDiv(ys.Cast(dtypes::kFloat32).Reshape({}));
  return One(Requantize(v, yz.Reshape({}), yz.dtype()));
}

ConvOptions ConvOpts(OpContext& ctx, const Tensor& x, const Tensor& w, absl::Status* st) {
  ConvOptions o;
  const int64_t n = x.ndim() - 2;
  std::vector<int64_t> kernel = ctx.Ints("kernel_shape").value_or(std::vector<int64_t>(w.shape().begin() + 2, w.shape().end()));
  o.stride = ctx.Ints("strides").value_or(std::vector<int64_t>(n, 1));
  o.dilation = ctx.Ints("dilations").value_or(std::vector<int64_t>(n, 1));
  o.groups = ctx.Int("group", 1);
  std::vector<int64_t> pads = ctx.Ints("pads").value_or(std::vector<int64_t>(2 * n, 0));
  const std::string auto_pad = ctx.String("auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t in = x.size(2 + i), s = o.stride[i];
      const int64_t out = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>((out - 1) * s + (kernel[i] - 1) * o.dilation[i] + 1 - in, 0);
      pads[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[i + n] = total - pads[i];
    }
  } else if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    *st = ctx.Error("unsupported auto_pad");
  }
  if (auto_pad == "VALID") std::fill(pads.begin(), pads.end(), 0);
  o.padding.clear();
  for (int64_t i = 0; i < n && static_cast<size_t>(i + n) < pads.size(); ++i) {
    o.padding.push_back(pads[i]);
    o.padding.push_back(pads[i + n]);
  }
  return o;
}

absl::StatusOr<std::vector<Value>> ConvInteger(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(w, 1);
  absl::Status st;
  ConvOptions o = ConvOpts(ctx, x, w, &st);
  KILN_RETURN_IF_ERROR(st);
  std::vector<int64_t> wz(w.ndim(), 1);
  wz[0] = -1;
  Tensor xi = Centered(x, ctx.OptT(2), {-1});
  Tensor wi = Centered(w, ctx.OptT(3), wz);
  return One(xi.Conv2d(wi, std::nullopt, o).Cast(dtypes::kInt32));
}

absl::StatusOr<std::vector<Value>> QLinearConv(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(xs, 1);
  ONNX_INPUT(xz, 2);
  ONNX_INPUT(w, 3);
  ONNX_INPUT(ws, 4);
  ONNX_INPUT(wz, 5);
  ONNX_INPUT(ys, 6);
  ONNX_INPUT(yz, 7);
  absl::Status st;
  ConvOptions o = ConvOpts(ctx, x, w, &st);
  KILN_RETURN_IF_ERROR(st);
  std::vector<int64_t> wshape(w.ndim(), 1);
  wshape[0] = -1;
  Tensor xi = Centered(x, xz, {-1});
  Tensor wi = Centered(w, wz, wshape);
  Tensor acc = xi.Conv2d(wi, std::nullopt, o);
  std::vector<int64_t> chan(x.ndim(), 1);
  chan[1] = -1;
  if (ctx.Has(8)) {
    ONNX_INPUT(bias, 8);
    acc = acc.Add(bias.Cast(dtypes::kInt32).Reshape(chan));
  }
  Tensor wsf = ws.Cast(dtypes::kFloat32);
  wsf = wsf.numel() > 1 ? wsf.Reshape(chan) : wsf.Reshape({});
  Tensor v = acc.Cast(dtypes::kFloat32).Mul(xs.Cast(dtypes::kFloat32).Reshape({})).Mul(wsf).TrueDiv(
      ys.Cast(dtypes::kFloat32).Reshape({}));
  return One(Requantize(v, yz.Reshape({}), yz.dtype()));
}

}  // namespace

void RegisterQuantOps(OpTable* t) {
  Reg(t, "QuantizeLinear", 10, kMaxOnnxOpset, {"axis", "block_size", "output_dtype", "precision", "saturate"},
      QuantizeLinear);
  Reg(t, "DequantizeLinear", 10, kMaxOnnxOpset, {"axis", "block_size", "output_dtype"}, DequantizeLinear);
  Reg(t, "DynamicQuantizeLinear", 11, kMaxOnnxOpset, {}, DynamicQuantizeLinear);
  Reg(t, "QLinearMatMul", 10, kMaxOnnxOpset, {}, QLinearMatMul);
  const std::vector<std::string> conv = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"};
  Reg(t, "QLinearConv", 10, kMaxOnnxOpset, conv, QLinearConv);
  Reg(t, "ConvInteger", 10, kMaxOnnxOpset, conv, ConvInteger);
}

}  // namespace kiln::onnx
