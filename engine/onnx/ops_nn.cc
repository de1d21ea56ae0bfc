// Neural-network ONNX ops: Conv, ConvTranspose, pools, normalizations, LRN, Dropout and the two losses.
#include <cmath>
#include <limits>
#include <random>

#include "engine/onnx/ops_util.h"

namespace kiln::onnx {
namespace {

struct Window {
  std::vector<int64_t> kernel, strides, dilations;
  std::vector<int64_t> pad_begin, pad_end;  // per spatial dim
  std::vector<int64_t> extra_end;           // ceil_mode: padding added past pad_end so the last window fits
};

// Resolves kernel/strides/dilations/pads/auto_pad/ceil_mode for `n` spatial dims of input `x` (N, C, *spatial).
absl::StatusOr<Window> ResolveWindow(OpContext& ctx, const Tensor& x, std::vector<int64_t> kernel) {
  const int64_t n = x.ndim() - 2;
  if (n < 1) return ctx.Error("input must have at least one spatial dim");
  if (static_cast<int64_t>(kernel.size()) != n) return ctx.Error("kernel_shape must have one value per spatial dim");
  Window w;
  w.kernel = kernel;
  w.strides = ctx.Ints("strides").value_or(std::vector<int64_t>(n, 1));
  w.dilations = ctx.Ints("dilations").value_or(std::vector<int64_t>(n, 1));
  if (static_cast<int64_t>(w.strides.size()) != n || static_cast<int64_t>(w.dilations.size()) != n) {
    return ctx.Error("strides and dilations must have one value per spatial dim");
  }
  for (int64_t i = 0; i < n; ++i) {
    if (w.strides[i] <= 0 || w.dilations[i] <= 0 || w.kernel[i] <= 0) {
      return ctx.Error("kernel, strides and dilations must be positive");
    }
  }
  std::vector<int64_t> pads = ctx.Ints("pads").value_or(std::vector<int64_t>(2 * n, 0));
  if (static_cast<int64_t>(pads.size()) != 2 * n) return ctx.Error("pads must have two values per spatial dim");
  const std::string auto_pad = ctx.String("auto_pad", "NOTSET");
  w.pad_begin.assign(pads.begin(), pads.begin() + n);
  w.pad_end.assign(pads.begin() + n, pads.end());
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t in = x.size(2 + i);
      const int64_t out = (in + w.strides[i] - 1) / w.strides[i];
      const int64_t total =
          std::max<int64_t>((out - 1) * w.strides[i] + (w.kernel[i] - 1) * w.dilations[i] + 1 - in, 0);
      const int64_t small = total / 2;
      w.pad_begin[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      w.pad_end[i] = total - w.pad_begin[i];
    }
  } else if (auto_pad == "VALID") {
    std::fill(w.pad_begin.begin(), w.pad_begin.end(), 0);
    std::fill(w.pad_end.begin(), w.pad_end.end(), 0);
  } else if (auto_pad != "NOTSET") {
    return ctx.Error("auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  }
  w.extra_end.assign(n, 0);
  if (ctx.Int("ceil_mode", 0) != 0) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t in = x.size(2 + i) + w.pad_begin[i] + w.pad_end[i];
      const int64_t span = (w.kernel[i] - 1) * w.dilations[i] + 1;
      if (in < span) continue;
      int64_t out = (in - span + w.strides[i] - 1) / w.strides[i] + 1;
      // the last window must start inside the input or the begin padding (PyTorch / onnx reference rule)
      if ((out - 1) * w.strides[i] >= x.size(2 + i) + w.pad_begin[i]) --out;
      w.extra_end[i] = std::max<int64_t>((out - 1) * w.strides[i] + span - in, 0);
    }
  }
  return w;
}

// Per-dim (before, after) pads over every dim of x (batch and channel untouched).
std::vector<std::pair<int64_t, int64_t>> FullPads(const Window& w, bool with_extra) {
  std::vector<std::pair<int64_t, int64_t>> p = {{0, 0}, {0, 0}};
  for (size_t i = 0; i < w.kernel.size(); ++i) {
    p.emplace_back(w.pad_begin[i], w.pad_end[i] + (with_extra ? w.extra_end[i] : 0));
  }
  return p;
}

PoolOptions PlainPool(const Window& w) {
  PoolOptions o;
  o.stride = w.strides;
  o.padding = {0};
  o.dilation = w.dilations;
  o.count_include_pad = true;
  return o;
}

absl::StatusOr<std::vector<Value>> Conv(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(w, 1);
  std::vector<int64_t> kernel = ctx.Ints("kernel_shape").value_or(std::vector<int64_t>{});
  if (kernel.empty()) kernel.assign(w.shape().begin() + 2, w.shape().end());
  KILN_ASSIGN_OR_RETURN(Window win, ResolveWindow(ctx, x, kernel));
  ConvOptions o;
  o.stride = win.strides;
  o.dilation = win.dilations;
  o.groups = ctx.Int("group", 1);
  o.padding.clear();
  for (size_t i = 0; i < kernel.size(); ++i) {
    o.padding.push_back(win.pad_begin[i]);
    o.padding.push_back(win.pad_end[i]);
  }
  std::optional<Tensor> bias = ctx.OptT(2);
  if (IsLowFloat(x.dtype())) {
    std::optional<Tensor> b32;
    if (bias) b32 = bias->Cast(dtypes::kFloat32);
    return One(x.Cast(dtypes::kFloat32).Conv2d(w.Cast(dtypes::kFloat32), b32, o).Cast(x.dtype()));
  }
  return One(x.Conv2d(w, bias, o));
}

// t with (s - 1) zeros inserted between consecutive elements of dim `dim` (length len -> (len - 1) * s + 1): a
// transposed convolution's input, and Col2Im's columns spread onto the image.
Tensor SpreadByStride(Tensor t, int64_t dim, int64_t s) {
  const int64_t len = t.size(dim);
  if (s == 1 || len == 0) return t;
  std::vector<int64_t> sh = Dims(t);
  sh.insert(sh.begin() + dim + 1, 1);
  t = t.Reshape(sh);
  std::vector<std::pair<int64_t, int64_t>> p(t.ndim(), {0, 0});
  p[dim + 1] = {0, s - 1};
  t = t.Pad(p);
  std::vector<int64_t> merged = Dims(t);
  merged[dim] = len * s;
  merged.erase(merged.begin() + dim + 1);
  t = t.Reshape(merged);
  std::vector<std::pair<int64_t, int64_t>> cut(t.ndim(), {0, 0});
  cut[dim] = {0, -(s - 1)};
  return t.Pad(cut);
}

// ConvTranspose as a convolution of the stride-dilated, padded input with the flipped, transposed weight.
absl::StatusOr<std::vector<Value>> ConvTranspose(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(w, 1);  // (Cin, Cout/group, *k)
  const int64_t n = x.ndim() - 2;
  if (n < 1 || w.ndim() != x.ndim()) return ctx.Error("input and weight ranks do not match");
  const int64_t group = ctx.Int("group", 1);
  std::vector<int64_t> kernel = ctx.Ints("kernel_shape").value_or(std::vector<int64_t>(w.shape().begin() + 2, w.shape().end()));
  std::vector<int64_t> strides = ctx.Ints("strides").value_or(std::vector<int64_t>(n, 1));
  std::vector<int64_t> dil = ctx.Ints("dilations").value_or(std::vector<int64_t>(n, 1));
  std::vector<int64_t> outpad = ctx.Ints("output_padding").value_or(std::vector<int64_t>(n, 0));
  std::vector<int64_t> pads = ctx.Ints("pads").value_or(std::vector<int64_t>(2 * n, 0));
  if (static_cast<int64_t>(kernel.size()) != n || static_cast<int64_t>(strides.size()) != n ||
      static_cast<int64_t>(dil.size()) != n || static_cast<int64_t>(outpad.size()) != n ||
      static_cast<int64_t>(pads.size()) != 2 * n) {
    return ctx.Error("kernel_shape/strides/dilations/output_padding/pads lengths do not match the spatial rank");
  }
  const std::string auto_pad = ctx.String("auto_pad", "NOTSET");
  if (ctx.HasAttr("output_shape") || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    std::vector<int64_t> out = ctx.Ints("output_shape").value_or(std::vector<int64_t>{});
    if (out.size() > static_cast<size_t>(n)) out.erase(out.begin(), out.end() - n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t o = out.empty() ? x.size(2 + i) * strides[i] : out[i];
      // Negative when output_shape asks for more than the natural size: a negative pad extends the output (the extra
      // rows get no contributions, only the bias), split with floor division as onnx's reference splits it (one
      // missing row goes to the end).
      const int64_t t = strides[i] * (x.size(2 + i) - 1) + outpad[i] + (kernel[i] - 1) * dil[i] + 1 - o;
      const int64_t half = t >= 0 ? t / 2 : -((-t + 1) / 2);  // floor(t / 2)
      if (auto_pad == "SAME_UPPER") {
        pads[i] = half;
        pads[i + n] = t - half;
      } else {
        pads[i] = t - half;
        pads[i + n] = half;
      }
    }
  } else if (auto_pad == "VALID") {
    std::fill(pads.begin(), pads.end(), 0);
  }
  const int64_t cin = w.size(0), cout_g = w.size(1);
  if (x.size(1) != cin || cin % group != 0) return ctx.Error("input channels do not match the weight");
  // dilate the input by the strides: insert (s - 1) zeros between elements
  Tensor xd = x;
  for (int64_t i = 0; i < n; ++i) xd = SpreadByStride(xd, 2 + i, strides[i]);
  // weight (Cin, Cout/g, *k) -> (Cout, Cin/g, *k), flipped
  std::vector<int64_t> wshape = {group, cin / group, cout_g};
  for (int64_t k : kernel) wshape.push_back(k);
  std::vector<int64_t> perm = {0, 2, 1};
  for (int64_t i = 0; i < n; ++i) perm.push_back(3 + i);
  std::vector<int64_t> flip;
  for (int64_t i = 0; i < n; ++i) flip.push_back(2 + i);
  std::vector<int64_t> final_w = {group * cout_g, cin / group};
  for (int64_t k : kernel) final_w.push_back(k);
  Tensor wt = w.Reshape(wshape).Permute(perm).Reshape(final_w).Flip(Axes(absl::Span<const int64_t>(flip)));
  ConvOptions o;
  o.stride = {1};
  o.dilation = dil;
  o.padding.clear();
  o.groups = group;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t full = (kernel[i] - 1) * dil[i];
    o.padding.push_back(full - pads[i]);
    o.padding.push_back(full - pads[i + n] + outpad[i]);
  }
  std::optional<Tensor> bias = ctx.OptT(2);
  if (IsLowFloat(x.dtype())) {
    std::optional<Tensor> b32;
    if (bias) b32 = bias->Cast(dtypes::kFloat32);
    return One(xd.Cast(dtypes::kFloat32).Conv2d(wt.Cast(dtypes::kFloat32), b32, o).Cast(x.dtype()));
  }
  return One(xd.Conv2d(wt, bias, o));
}


// Col2Im: the columns (N, C * prod(block), L) summed back onto the image (N, C, *image_shape), the inverse of the
// im2col a convolution reads. Per kernel offset k, its (N, C, *blocks) slice lands at l * stride + k * dilation of the
// padded image: spread by the strides (zeros between), shifted by the offset, added; the padding is cut at the end.
absl::StatusOr<std::vector<Value>> Col2Im(OpContext& ctx) {
  ONNX_INPUT(cols, 0);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> image, ctx.Ints(1));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> block, ctx.Ints(2));
  const int64_t nd = static_cast<int64_t>(image.size());
  if (nd < 1 || static_cast<int64_t>(block.size()) != nd) return ctx.Error("image_shape and block_shape must match");
  const std::vector<int64_t> strides = ctx.Ints("strides").value_or(std::vector<int64_t>(nd, 1));
  const std::vector<int64_t> dil = ctx.Ints("dilations").value_or(std::vector<int64_t>(nd, 1));
  const std::vector<int64_t> pads = ctx.Ints("pads").value_or(std::vector<int64_t>(2 * nd, 0));
  if (static_cast<int64_t>(strides.size()) != nd || static_cast<int64_t>(dil.size()) != nd ||
      static_cast<int64_t>(pads.size()) != 2 * nd)
    return ctx.Error("strides/dilations/pads lengths do not match image_shape");
  int64_t kprod = 1, lprod = 1;
  std::vector<int64_t> blocks(nd), padded(nd);
  for (int64_t d = 0; d < nd; ++d) {
    if (image[d] < 1 || block[d] < 1 || strides[d] < 1 || dil[d] < 1 || pads[d] < 0 || pads[d + nd] < 0)
      return ctx.Error("image_shape, block_shape, strides and dilations must be positive, pads non-negative");
    padded[d] = image[d] + pads[d] + pads[d + nd];
    blocks[d] = (padded[d] - dil[d] * (block[d] - 1) - 1) / strides[d] + 1;
    if (blocks[d] < 1) return ctx.Error("the block does not fit the padded image");
    kprod *= block[d];
    lprod *= blocks[d];
  }
  if (cols.ndim() != 3 || cols.size(1) % kprod != 0 || cols.size(2) != lprod)
    return ctx.Error(absl::StrCat("input must be (N, C * ", kprod, ", ", lprod, ")"));
  if (kprod > 4096) return ctx.Error(absl::StrCat("block of ", kprod, " elements exceeds 4096 (one sum per offset)"));
  const int64_t n = cols.size(0), c = cols.size(1) / kprod;
  std::vector<int64_t> shape = {n, c, kprod};
  shape.insert(shape.end(), blocks.begin(), blocks.end());
  const Tensor x = cols.Reshape(shape);
  std::optional<Tensor> acc;
  for (int64_t k = 0; k < kprod; ++k) {
    std::vector<std::pair<int64_t, int64_t>> pick = {{0, n}, {0, c}, {k, k + 1}};
    for (int64_t d = 0; d < nd; ++d) pick.emplace_back(0, blocks[d]);
    std::vector<int64_t> part = {n, c};
    part.insert(part.end(), blocks.begin(), blocks.end());
    Tensor t = x.Shrink(pick).Reshape(part);
    int64_t rem = k;
    std::vector<int64_t> off(nd);
    for (int64_t d = nd - 1; d >= 0; --d) off[d] = rem % block[d], rem /= block[d];
    for (int64_t d = 0; d < nd; ++d) t = SpreadByStride(t, 2 + d, strides[d]);
    std::vector<std::pair<int64_t, int64_t>> place(2 + nd, {0, 0});
    for (int64_t d = 0; d < nd; ++d) {
      const int64_t start = off[d] * dil[d], extent = (blocks[d] - 1) * strides[d] + 1;
      place[2 + d] = {start, padded[d] - start - extent};
    }
    t = t.Pad(place);
    acc = acc ? acc->Add(t) : t;
  }
  std::vector<std::pair<int64_t, int64_t>> crop = {{0, n}, {0, c}};
  for (int64_t d = 0; d < nd; ++d) crop.emplace_back(pads[d], pads[d] + image[d]);
  return One(acc->Shrink(crop));
}

absl::StatusOr<std::vector<Value>> MaxPool(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(Window w, ResolveWindow(ctx, x, ctx.Ints("kernel_shape").value_or(std::vector<int64_t>{})));
  const DType dt = x.dtype();
  const Scalar lowest = dt.IsFloat() ? Scalar(-std::numeric_limits<double>::infinity()) : Scalar(DTypeMin(dt));
  Tensor padded = x.Pad(FullPads(w, true), lowest);
  if (!ctx.WantsOutput(1)) return One(padded.MaxPool2d(w.kernel, PlainPool(w)));
  // Indices: the flat (N, C, *spatial) position of each window's first maximum, by a running max over the k
  // window offsets (each a strided slice of the padded input and of a padded index tensor).
  Tensor y = padded.MaxPool2d(w.kernel, PlainPool(w));
  const int64_t nsp = x.ndim() - 2;
  std::vector<int64_t> flat_shape = Dims(x);
  Tensor index = Tensor::Arange(0, x.numel(), 1, dtypes::kInt64, ctx.device()).Reshape(flat_shape);
  if (ctx.Int("storage_order", 0) != 0) {  // column-major spatial dims
    if (nsp != 2) return ctx.Error("storage_order=1 needs 2 spatial dims");
    const int64_t hh = x.size(2), ww = x.size(3);
    Tensor hw = Tensor::Arange(0, hh, 1, dtypes::kInt64, ctx.device()).Reshape({hh, 1})
                    .Add(Tensor::Arange(0, ww, 1, dtypes::kInt64, ctx.device()).Reshape({1, ww}).Mul(hh));
    Tensor nc = Tensor::Arange(0, x.size(0) * x.size(1), 1, dtypes::kInt64, ctx.device())
                    .Reshape({x.size(0), x.size(1), 1, 1}).Mul(hh * ww);
    index = nc.Add(hw);
  }
  Tensor index_p = index.Pad(FullPads(w, true), -1);
  std::vector<int64_t> out(y.shape().begin(), y.shape().end());
  std::optional<Tensor> best, best_idx;
  std::vector<int64_t> off(nsp, 0);
  while (true) {
    std::vector<SliceArg> args = {SliceArg::All(), SliceArg::All()};
    for (int64_t i = 0; i < nsp; ++i) {
      const int64_t start = off[i] * w.dilations[i];
      args.push_back(SliceArg::Range(start, start + w.strides[i] * (out[2 + i] - 1) + 1, w.strides[i]));
    }
    Tensor v = padded.Slice(args), id = index_p.Slice(args);
    if (!best) {
      best = v;
      best_idx = id;
    } else {
      Tensor better = v.Gt(*best);
      best_idx = better.Where(id, *best_idx);
      best = better.Where(v, *best);
    }
    int64_t i = nsp - 1;
    while (i >= 0 && ++off[i] == w.kernel[i]) off[i--] = 0;
    if (i < 0) break;
  }
  return std::vector<Value>{Value::Of(y), Value::Of(*best_idx)};
}

// Window sums of x (zero padded) and the count of the elements each window averages over.
absl::StatusOr<std::pair<Tensor, Tensor>> WindowSums(OpContext& ctx, const Tensor& x, const Window& w,
                                                     bool count_pad) {
  int64_t k = 1;
  for (int64_t v : w.kernel) k *= v;
  Tensor sums = x.Pad(FullPads(w, true)).AvgPool2d(w.kernel, PlainPool(w)).Mul(static_cast<double>(k));
  std::vector<int64_t> ones_shape = {1, 1};
  for (int64_t i = 2; i < x.ndim(); ++i) ones_shape.push_back(x.size(i));
  Tensor mask = Tensor::Ones(ones_shape, x.dtype(), ctx.device());
  if (count_pad) {
    mask = mask.Pad(FullPads(w, false), 1.0);
    std::vector<std::pair<int64_t, int64_t>> extra = {{0, 0}, {0, 0}};
    for (int64_t e : w.extra_end) extra.emplace_back(0, e);
    mask = mask.Pad(extra, 0.0);
  } else {
    mask = mask.Pad(FullPads(w, true), 0.0);
  }
  // The mask stays a broadcast constant: its counts fuse into the sums' kernel (codegen resets their accumulator
  // per output, engine/codegen/reduce.cc EnclosingRanges).
  Tensor counts = mask.AvgPool2d(w.kernel, PlainPool(w)).Mul(static_cast<double>(k));
  return std::make_pair(sums, counts);
}

absl::StatusOr<std::vector<Value>> AveragePool(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(Window w, ResolveWindow(ctx, x, ctx.Ints("kernel_shape").value_or(std::vector<int64_t>{})));
  const bool count_pad = ctx.Int("count_include_pad", 0) != 0;
  Tensor xf = IsLowFloat(x.dtype()) ? x.Cast(dtypes::kFloat32) : x;
  KILN_ASSIGN_OR_RETURN(auto sc, WindowSums(ctx, xf, w, count_pad));
  return One(sc.first.Div(sc.second).Cast(x.dtype()));
}

absl::StatusOr<std::vector<Value>> LpPool(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(Window w, ResolveWindow(ctx, x, ctx.Ints("kernel_shape").value_or(std::vector<int64_t>{})));
  const double p = static_cast<double>(ctx.Int("p", 2));
  KILN_ASSIGN_OR_RETURN(auto sc, WindowSums(ctx, x.Abs().Pow(p), w, true));
  return One(sc.first.Pow(1.0 / p));
}

absl::StatusOr<std::vector<Value>> GlobalPool(OpContext& ctx, int kind) {
  ONNX_INPUT(x, 0);
  std::vector<int64_t> axes;
  for (int64_t i = 2; i < x.ndim(); ++i) axes.push_back(i);
  if (axes.empty()) return One(x);
  Axes ax{absl::Span<const int64_t>(axes)};
  if (kind == 0) return One(InF32(x, [&](const Tensor& t) { return t.Mean(ax, true); }));
  if (kind == 1) return One(x.Max(ax, true));
  const double p = static_cast<double>(ctx.Int("p", 2));
  return One(InF32(x, [&](const Tensor& t) { return t.Abs().Pow(p).Sum(ax, true).Pow(1.0 / p); }));
}

// Shape (1, C, 1, ...) for per-channel parameters.
Tensor PerChannel(const Tensor& p, int64_t rank) {
  std::vector<int64_t> s(rank, 1);
  s[1] = p.numel();
  return p.Reshape(s);
}

absl::StatusOr<std::vector<Value>> BatchNormalization(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(scale, 1);
  ONNX_INPUT(b, 2);
  ONNX_INPUT(mean, 3);
  ONNX_INPUT(var, 4);
  const double eps = ctx.Float("epsilon", 1e-5);
  const double momentum = ctx.Float("momentum", 0.9);
  const bool training = ctx.opset() >= 14 ? ctx.Int("training_mode", 0) != 0 : false;
  if (ctx.opset() < 9 && ctx.Int("spatial", 1) == 0) return ctx.Error("spatial=0 is not supported");
  const int64_t r = x.ndim();
  const DType f = IsLowFloat(x.dtype()) ? dtypes::kFloat32 : x.dtype();
  Tensor xf = x.Cast(f);
  if (!training) {
    if (ctx.opset() < 14 && ctx.opset() >= 7 && (ctx.WantsOutput(1) || ctx.WantsOutput(2))) {
      return ctx.Error("training outputs (mean, var) need training_mode");
    }
    Tensor y = xf.Sub(PerChannel(mean.Cast(f), r))
                   .Mul(PerChannel(var.Cast(f).Add(eps).Rsqrt(), r))
                   .Mul(PerChannel(scale.Cast(f), r))
                   .Add(PerChannel(b.Cast(f), r));
    return One(y.Cast(x.dtype()));
  }
  std::vector<int64_t> axes = {0};
  for (int64_t i = 2; i < r; ++i) axes.push_back(i);
  Axes ax{absl::Span<const int64_t>(axes)};
  Tensor m = xf.Mean(ax);
  Tensor v = xf.Sub(PerChannel(m, r)).Square().Mean(ax);
  Tensor y = xf.Sub(PerChannel(m, r))
                 .Mul(PerChannel(v.Add(eps).Rsqrt(), r))
                 .Mul(PerChannel(scale.Cast(f), r))
                 .Add(PerChannel(b.Cast(f), r));
  Tensor rm = mean.Cast(f).Mul(momentum).Add(m.Mul(1.0 - momentum));
  Tensor rv = var.Cast(f).Mul(momentum).Add(v.Mul(1.0 - momentum));
  return std::vector<Value>{Value::Of(y.Cast(x.dtype())), Value::Of(rm.Cast(mean.dtype())),
                            Value::Of(rv.Cast(var.dtype()))};
}

absl::StatusOr<std::vector<Value>> InstanceNormalization(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(scale, 1);
  ONNX_INPUT(b, 2);
  const double eps = ctx.Float("epsilon", 1e-5);
  std::vector<int64_t> axes;
  for (int64_t i = 2; i < x.ndim(); ++i) axes.push_back(i);
  Axes ax{absl::Span<const int64_t>(axes)};
  return One(InF32(x, [&](const Tensor& t) {
    Tensor c = t.Sub(t.Mean(ax, true));
    return c.Mul(c.Square().Mean(ax, true).Add(eps).Rsqrt())
        .Mul(PerChannel(scale.Cast(t.dtype()), t.ndim()))
        .Add(PerChannel(b.Cast(t.dtype()), t.ndim()));
  }));
}

absl::StatusOr<std::vector<Value>> LayerNormalization(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(scale, 1);
  std::optional<Tensor> bias = ctx.OptT(2);
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", -1), x.ndim()));
  const double eps = ctx.Float("epsilon", 1e-5);
  std::vector<int64_t> axes;
  for (int64_t i = axis; i < x.ndim(); ++i) axes.push_back(i);
  Axes ax{absl::Span<const int64_t>(axes)};
  const DType f = x.dtype() == dtypes::kFloat64 ? dtypes::kFloat64 : dtypes::kFloat32;
  // The input and the output are stored (a no-op where they are stored anyway). Fused, a transformer's LayerNorm
  // was recomputed by every kernel that reads it: its input (the residual sum) by the mean, the variance, the
  // normalization and the next residual; its output by each column tile of the matmuls after it (MiniLM's FFN up
  // projection reread 384 normalized values per output tile: 1.1-1.4 ms per layer; 0.42 ms with it
  // stored).
  Tensor xf = x.Cast(f).Contiguous();
  Tensor mean = xf.Mean(ax, true);
  Tensor c = xf.Sub(mean);
  Tensor inv = c.Square().Mean(ax, true).Add(eps).Rsqrt();
  Tensor y = c.Mul(inv).Mul(scale.Cast(f));
  if (bias) y = y.Add(bias->Cast(f));
  y = y.Contiguous();
  return std::vector<Value>{Value::Of(y.Cast(x.dtype())), Value::Of(mean), Value::Of(inv)};
}

absl::StatusOr<std::vector<Value>> GroupNormalization(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(scale, 1);
  ONNX_INPUT(b, 2);
  const int64_t groups = ctx.Int("num_groups", 0);
  const double eps = ctx.Float("epsilon", 1e-5);
  if (x.ndim() < 2 || groups <= 0 || x.size(1) % groups != 0) return ctx.Error("num_groups must divide the channels");
  const int64_t n = x.size(0), c = x.size(1);
  return One(InF32(x, [&](const Tensor& t) {
    Tensor g = t.Reshape({n, groups, -1});
    Tensor centered = g.Sub(g.Mean(2, true));
    Tensor normed = centered.Mul(centered.Square().Mean(2, true).Add(eps).Rsqrt()).Reshape(Dims(t));
    Tensor s = scale.Cast(t.dtype()), bb = b.Cast(t.dtype());
    if (s.numel() == groups && groups != c) {  // opset 18: one scale per group
      s = s.Reshape({groups, 1}).Expand({groups, c / groups}).Reshape({c});
      bb = bb.Reshape({groups, 1}).Expand({groups, c / groups}).Reshape({c});
    }
    return normed.Mul(PerChannel(s, t.ndim())).Add(PerChannel(bb, t.ndim()));
  }));
}

absl::StatusOr<std::vector<Value>> RMSNormalization(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(scale, 1);
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", -1), x.ndim()));
  const double eps = ctx.Float("epsilon", 1e-5);
  std::vector<int64_t> axes;
  for (int64_t i = axis; i < x.ndim(); ++i) axes.push_back(i);
  Axes ax{absl::Span<const int64_t>(axes)};
  const DType f = x.dtype() == dtypes::kFloat64 ? dtypes::kFloat64 : dtypes::kFloat32;
  Tensor xf = x.Cast(f);
  Tensor y = xf.Mul(xf.Square().Mean(ax, true).Add(eps).Rsqrt()).Mul(scale.Cast(f));
  return One(y.Cast(x.dtype()));
}

absl::StatusOr<std::vector<Value>> LRN(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  const int64_t size = ctx.Int("size", 0);
  if (size <= 0) return ctx.Error("size must be positive");
  const double alpha = ctx.Float("alpha", 1e-4), beta = ctx.Float("beta", 0.75), bias = ctx.Float("bias", 1.0);
  const int64_t c = x.size(1);
  return One(InF32(x, [&](const Tensor& t) {
    // sum of squares over the channel window [c - floor((size-1)/2), c + ceil((size-1)/2)]
    std::vector<std::pair<int64_t, int64_t>> pad(t.ndim(), {0, 0});
    pad[1] = {(size - 1) / 2, size / 2};
    Tensor sq = t.Square().Pad(pad);
    Tensor sum = t.ZerosLike();
    for (int64_t i = 0; i < size; ++i) {
      std::vector<std::pair<int64_t, int64_t>> b;
      for (int64_t d = 0; d < t.ndim(); ++d) b.emplace_back(0, t.size(d));
      b[1] = {i, i + c};
      sum = sum.Add(sq.Shrink(b));
    }
    return t.Div(sum.Mul(alpha / static_cast<double>(size)).Add(bias).Pow(beta));
  }));
}

absl::StatusOr<std::vector<Value>> Dropout(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  double ratio = ctx.Float("ratio", 0.5);
  bool training = false;
  if (ctx.opset() >= 12) {
    if (ctx.Has(1)) {
      KILN_ASSIGN_OR_RETURN(std::vector<double> r, ctx.Doubles(1));
      if (!r.empty()) ratio = r[0];
    }
    if (ctx.Has(2)) {
      KILN_ASSIGN_OR_RETURN(std::vector<int64_t> t, ctx.Ints(2));
      training = !t.empty() && t[0] != 0;
    }
  }
  if (training && ratio != 0.0) {
    if (ratio < 0.0 || ratio >= 1.0) return ctx.Error("ratio must be in [0, 1)");
    Tensor keep;
    if (ctx.HasAttr("seed")) {
      // The reference's stream: numpy RandomState(seed).uniform(0, 1) (MT19937, 53-bit doubles from two draws).
      std::mt19937 gen(static_cast<uint32_t>(ctx.Int("seed", 0)));
      HostArray m = HostArray::Zeros(dtypes::kBool, x.shape());
      for (int64_t i = 0; i < m.numel(); ++i) {
        const double a = static_cast<double>(gen() >> 5), b = static_cast<double>(gen() >> 6);
        m.SetInt(i, (a * 67108864.0 + b) / 9007199254740992.0 >= ratio);
      }
      keep = Tensor::FromHost(m.bytes.data(), dtypes::kBool, m.shape, ctx.device());
    } else {
      keep = Tensor::Rand(Dims(x), dtypes::kFloat32, ctx.device()).Ge(ratio);
    }
    Tensor y = InF32(x, [&](const Tensor& t) { return keep.Where(t.Mul(1.0 / (1.0 - ratio)), t.ZerosLike()); });
    std::vector<Value> outs = {Value::Of(y)};
    if (ctx.num_outputs() > 1) outs.push_back(Value::Of(keep));
    return outs;
  }
  std::vector<Value> outs = {Value::Of(x)};
  if (ctx.num_outputs() > 1) outs.push_back(Value::Of(x.FullLike(true, dtypes::kBool)));
  return outs;
}

absl::StatusOr<std::vector<Value>> LpNormalization(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", -1), x.ndim()));
  const int64_t p = ctx.Int("p", 2);
  if (p != 1 && p != 2) return ctx.Error("p must be 1 or 2");
  return One(InF32(x, [&](const Tensor& t) {
    Tensor norm = p == 1 ? t.Abs().Sum(axis, true) : t.Square().Sum(axis, true).Sqrt();
    return t.Div(norm.Eq(0).Where(norm.OnesLike(), norm));  // a zero norm leaves zeros (the reference's rule)
  }));
}

absl::StatusOr<std::vector<Value>> MeanVarianceNormalization(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  std::vector<int64_t> axes = ctx.Ints("axes").value_or(std::vector<int64_t>{0, 2, 3});
  Axes ax{absl::Span<const int64_t>(axes)};
  return One(InF32(x, [&](const Tensor& t) {
    Tensor c = t.Sub(t.Mean(ax, true));
    return c.Div(c.Square().Mean(ax, true).Sqrt().Add(1e-9));
  }));
}

// NLL over (N, C, d...) log-probabilities with integer targets (N, d...).
absl::StatusOr<Tensor> Nll(OpContext& ctx, const Tensor& input, const Tensor& target, std::optional<Tensor> weight) {
  const std::string reduction = ctx.String("reduction", "mean");
  const int64_t c = input.size(1);
  std::vector<int64_t> cshape(input.ndim(), 1);
  cshape[1] = c;
  Tensor classes = Tensor::Arange(0, c, 1, dtypes::kInt64, ctx.device()).Reshape(cshape);
  Tensor t = target.Cast(dtypes::kInt64).Unsqueeze(1);
  Tensor onehot = classes.Eq(t);  // (N, C, d...)
  Tensor mask = target.FullLike(true, dtypes::kBool);
  if (ctx.HasAttr("ignore_index")) mask = target.Cast(dtypes::kInt64).Ne(ctx.Int("ignore_index", -100));
  Tensor zero = input.ZerosLike();
  Tensor picked = onehot.Where(input, zero).Sum(1);  // (N, d...)
  Tensor w = mask.Cast(input.dtype());
  if (weight) {
    Tensor wb = weight->Cast(input.dtype()).Reshape(cshape);
    w = onehot.Where(wb.Expand(Dims(input)), zero).Sum(1).Mul(w);
  }
  Tensor loss = picked.Neg().Mul(w);
  if (reduction == "none") return loss;
  if (reduction == "sum") return loss.Sum();
  if (reduction == "mean") return loss.Sum().Div(w.Sum());
  return ctx.Error("reduction must be none, sum or mean");
}

absl::StatusOr<std::vector<Value>> NegativeLogLikelihoodLoss(OpContext& ctx) {
  ONNX_INPUT(input, 0);
  ONNX_INPUT(target, 1);
  const Tensor in32 = input.Cast(IsLowFloat(input.dtype()) ? dtypes::kFloat32 : input.dtype());
  KILN_ASSIGN_OR_RETURN(Tensor loss, Nll(ctx, in32, target, ctx.OptT(2)));
  return One(loss.Cast(input.dtype()));
}

absl::StatusOr<std::vector<Value>> SoftmaxCrossEntropyLoss(OpContext& ctx) {
  ONNX_INPUT(scores, 0);
  ONNX_INPUT(labels, 1);
  const DType f = IsLowFloat(scores.dtype()) ? dtypes::kFloat32 : scores.dtype();
  Tensor logp = scores.Cast(f).LogSoftmax(1);
  KILN_ASSIGN_OR_RETURN(Tensor loss, Nll(ctx, logp, labels, ctx.OptT(2)));
  return std::vector<Value>{Value::Of(loss.Cast(scores.dtype())), Value::Of(logp.Cast(scores.dtype()))};
}

}  // namespace

void RegisterNnOps(OpTable* t) {
  const std::vector<std::string> window = {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides"};
  Reg(t, "Conv", 1, kMaxOnnxOpset, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"},
                Conv);
  Reg(t, "ConvTranspose", 1, kMaxOnnxOpset,
                {"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads",
                 "strides"},
                ConvTranspose);
  std::vector<std::string> maxpool = window;
  maxpool.push_back("storage_order");
  Reg(t, "MaxPool", 1, kMaxOnnxOpset, maxpool, MaxPool);
  std::vector<std::string> avgpool = window;
  avgpool.push_back("count_include_pad");
  Reg(t, "AveragePool", 1, kMaxOnnxOpset, avgpool, AveragePool);
  std::vector<std::string> lppool = window;
  lppool.push_back("p");
  Reg(t, "LpPool", 2, kMaxOnnxOpset, lppool, LpPool);
  Reg(t, "GlobalAveragePool", 1, kMaxOnnxOpset, {}, [](OpContext& c) { return GlobalPool(c, 0); });
  Reg(t, "GlobalMaxPool", 1, kMaxOnnxOpset, {}, [](OpContext& c) { return GlobalPool(c, 1); });
  Reg(t, "GlobalLpPool", 2, kMaxOnnxOpset, {"p"}, [](OpContext& c) { return GlobalPool(c, 2); });
  Reg(t, "BatchNormalization", 1, kMaxOnnxOpset,
                {"epsilon", "momentum", "training_mode", "spatial", "is_test", "consumed_inputs"}, BatchNormalization);
  Reg(t, "InstanceNormalization", 1, kMaxOnnxOpset, {"epsilon", "consumed_inputs"}, InstanceNormalization);
  Reg(t, "LayerNormalization", 17, kMaxOnnxOpset, {"axis", "epsilon", "stash_type"}, LayerNormalization);
  Reg(t, "Col2Im", 18, kMaxOnnxOpset, {"dilations", "pads", "strides"}, Col2Im);
  Reg(t, "GroupNormalization", 18, kMaxOnnxOpset, {"epsilon", "num_groups", "stash_type"},
                GroupNormalization);
  Reg(t, "RMSNormalization", 23, kMaxOnnxOpset, {"axis", "epsilon", "stash_type"}, RMSNormalization);
  Reg(t, "LRN", 1, kMaxOnnxOpset, {"alpha", "beta", "bias", "size"}, LRN);
  Reg(t, "Dropout", 1, kMaxOnnxOpset, {"ratio", "seed", "is_test", "consumed_inputs"}, Dropout);
  Reg(t, "LpNormalization", 1, kMaxOnnxOpset, {"axis", "p"}, LpNormalization);
  Reg(t, "MeanVarianceNormalization", 9, kMaxOnnxOpset, {"axes"}, MeanVarianceNormalization);
  Reg(t, "NegativeLogLikelihoodLoss", 12, kMaxOnnxOpset, {"ignore_index", "reduction"},
                NegativeLogLikelihoodLoss);
  Reg(t, "SoftmaxCrossEntropyLoss", 12, kMaxOnnxOpset, {"ignore_index", "reduction"},
                SoftmaxCrossEntropyLoss);
}

}  // namespace kiln::onnx
