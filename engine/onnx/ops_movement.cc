// Movement and shape ONNX ops: Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Concat, Split, Slice, Expand, Tile,
// Pad, DepthToSpace, SpaceToDepth, CenterCropPad, Identity, and the shape/constant producers (Shape, Size, Constant,
// ConstantOfShape, Range, EyeLike).
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "engine/onnx/host_array.h"
#include "engine/onnx/model.h"
#include "engine/onnx/ops_util.h"

namespace kiln::onnx {

absl::StatusOr<std::vector<int64_t>> BroadcastShape(const OpContext& ctx, const std::vector<int64_t>& a,
                                                    const std::vector<int64_t>& b) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) {
      return ctx.Error(absl::StrCat("shapes cannot broadcast (dim ", i, ": ", x, " vs ", y, ")"));
    }
    out[i] = x == 1 ? y : x;
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> PadPairs(const std::vector<int64_t>& pads) {
  const size_t n = pads.size() / 2;
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t i = 0; i < n; ++i) out.emplace_back(pads[i], pads[i + n]);
  return out;
}

namespace {

absl::StatusOr<std::vector<Value>> Identity(OpContext& ctx) {
  if (!ctx.Has(0)) return std::vector<Value>{Value::None()};
  return std::vector<Value>{ctx.In(0)};
}

absl::StatusOr<std::vector<Value>> Reshape(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  std::vector<int64_t> shape;
  if (ctx.opset() < 5) {
    shape = ctx.Ints("shape").value_or(std::vector<int64_t>{});
  } else {
    KILN_ASSIGN_OR_RETURN(shape, ctx.Ints(1));
  }
  const bool allowzero = ctx.Int("allowzero", 0) != 0;
  int64_t infer = -1;
  Shape given;  // the dims other than the -1
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowzero) {
      if (static_cast<int64_t>(i) >= x.ndim()) return ctx.Error("shape copies a dim the input does not have");
      shape[i] = x.size(static_cast<int64_t>(i));
    }
    if (shape[i] == -1) {
      if (infer >= 0) return ctx.Error("shape has more than one -1");
      infer = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      return ctx.Error(absl::StrCat("shape has a negative dim ", shape[i]));
    } else {
      given.push_back(shape[i]);
    }
  }
  absl::StatusOr<int64_t> known = CheckedNumel(given, kMaxElements);  // no signed overflow
  if (!known.ok()) return ctx.Error(absl::StrCat("shape has more than ", kMaxElements, " elements"));
  if (infer >= 0) {
    if (*known == 0 || x.numel() % *known != 0) return ctx.Error("cannot infer the -1 dim");
    shape[infer] = x.numel() / *known;
  }
  return One(x.Reshape(shape));
}

absl::StatusOr<std::vector<Value>> Flatten(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(int64_t axis, SplitAxis(ctx, ctx.Int("axis", 1), x.ndim()));
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < x.ndim(); ++i) (i < axis ? outer : inner) *= x.size(i);
  return One(x.Reshape({outer, inner}));
}

namespace {

// Whether `t` is computed through a reduce (a matmul, a norm's mean) that is not stored yet, rather than read from
// stored values through elementwise and movement ops only. Looks at up to 512 nodes.
bool ComputedByAReduce(const Tensor& t) {
  std::vector<const UOp*> stack{t.uop().get()};
  absl::flat_hash_set<const UOp*> seen;
  while (!stack.empty() && seen.size() < 512) {
    const UOp* u = stack.back();
    stack.pop_back();
    if (!seen.insert(u).second || u->op() == Op::BUFFER || u->op() == Op::CONTIGUOUS) continue;
    if (u->op() == Op::REDUCE_AXIS) return true;
    for (const UOpPtr& s : u->src()) stack.push_back(s.get());
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<Value>> Transpose(OpContext& ctx) {
  ONNX_INPUT(x_in, 0);
  std::vector<int64_t> perm = ctx.Ints("perm").value_or(std::vector<int64_t>{});
  if (perm.empty()) {
    for (int64_t i = x_in.ndim() - 1; i >= 0; --i) perm.push_back(i);
  }
  // A reduce's result that the transpose gives a new innermost axis is stored first, in its own layout, and the
  // transpose is a copy: fused, the reduce kernel (attention's key projection, stored as K^T) vectorized along its
  // contiguous stores instead of its weights' rows, with gathered inputs and spilled accumulators (MiniLM: 310-390 us
  // per layer against 110 for the query projection of the same size; the copy takes 17-40 us).
  const bool moves_inner = !perm.empty() && perm.back() != x_in.ndim() - 1;
  const Tensor x = moves_inner && !x_in.IsRealized() && ComputedByAReduce(x_in) ? x_in.Contiguous() : x_in;
  return One(x.Permute(perm));
}

absl::StatusOr<std::vector<int64_t>> AxesArg(OpContext& ctx, size_t input) {
  if (ctx.opset() < 13) return ctx.Ints("axes").value_or(std::vector<int64_t>{});
  if (!ctx.Has(input)) return std::vector<int64_t>{};
  return ctx.Ints(input);
}

absl::StatusOr<std::vector<Value>> Squeeze(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesArg(ctx, 1));
  std::vector<bool> drop(x.ndim(), false);
  if (axes.empty()) {
    for (int64_t i = 0; i < x.ndim(); ++i) drop[i] = x.size(i) == 1;
  }
  for (int64_t a : axes) {
    KILN_ASSIGN_OR_RETURN(int64_t ax, Axis(ctx, a, x.ndim()));
    if (x.size(ax) != 1) return ctx.Error(absl::StrCat("cannot squeeze axis ", a, " of size ", x.size(ax)));
    drop[ax] = true;
  }
  std::vector<int64_t> shape;
  for (int64_t i = 0; i < x.ndim(); ++i) {
    if (!drop[i]) shape.push_back(x.size(i));
  }
  return One(x.Reshape(shape));
}

absl::StatusOr<std::vector<Value>> Unsqueeze(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesArg(ctx, 1));
  const int64_t rank = x.ndim() + static_cast<int64_t>(axes.size());
  std::vector<bool> is_new(rank, false);
  for (int64_t a : axes) {
    KILN_ASSIGN_OR_RETURN(int64_t ax, Axis(ctx, a, rank));
    if (is_new[ax]) return ctx.Error("axes has a repeated value");
    is_new[ax] = true;
  }
  std::vector<int64_t> shape;
  int64_t next = 0;
  for (int64_t i = 0; i < rank; ++i) shape.push_back(is_new[i] ? 1 : x.size(next++));
  return One(x.Reshape(shape));
}

absl::StatusOr<std::vector<Value>> Concat(OpContext& ctx) {
  std::vector<Tensor> xs;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.Has(i)) continue;
    ONNX_INPUT(t, i);
    xs.push_back(t);
  }
  if (xs.empty()) return ctx.Error("needs at least one input");
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", 1), xs[0].ndim()));
  std::vector<Tensor> nonempty;
  for (const Tensor& t : xs) {
    if (t.numel() > 0 || t.ndim() != xs[0].ndim()) nonempty.push_back(t);
  }
  if (nonempty.empty()) {
    std::vector<int64_t> shape = Dims(xs[0]);
    shape[axis] = 0;
    for (const Tensor& t : xs) shape[axis] += t.size(axis);
    return One(Tensor::Zeros(shape, xs[0].dtype(), ctx.device()));
  }
  if (nonempty.size() == 1) return One(nonempty[0]);
  return One(Tensor::Cat(nonempty, axis));
}

absl::StatusOr<std::vector<Value>> Split(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", 0), x.ndim()));
  const int64_t n = x.size(axis);
  std::vector<int64_t> sizes;
  if (ctx.opset() >= 13 && ctx.Has(1)) {
    KILN_ASSIGN_OR_RETURN(sizes, ctx.Ints(1));
  } else if (ctx.opset() < 13 && ctx.HasAttr("split")) {
    sizes = *ctx.Ints("split");
  } else if (ctx.opset() < 2 && ctx.Has(1)) {
    KILN_ASSIGN_OR_RETURN(sizes, ctx.Ints(1));
  }
  if (sizes.empty()) {
    const int64_t parts = ctx.HasAttr("num_outputs") ? ctx.Int("num_outputs", 1) : static_cast<int64_t>(ctx.num_outputs());
    if (parts <= 0) return ctx.Error("num_outputs must be positive");
    if (ctx.HasAttr("num_outputs")) {
      const int64_t chunk = (n + parts - 1) / parts;
      for (int64_t left = n; left > 0; left -= chunk) sizes.push_back(std::min(chunk, left));
      while (static_cast<int64_t>(sizes.size()) < parts) sizes.push_back(0);
    } else {
      if (n % parts != 0) return ctx.Error("the axis does not split evenly");
      sizes.assign(parts, n / parts);
    }
  }
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (total != n) return ctx.Error("split sizes do not add up to the axis length");
  std::vector<Value> outs;
  int64_t at = 0;
  for (int64_t s : sizes) {
    std::vector<std::pair<int64_t, int64_t>> b;
    for (int64_t i = 0; i < x.ndim(); ++i) b.emplace_back(0, x.size(i));
    b[axis] = {at, at + s};
    outs.push_back(Value::Of(x.Shrink(b)));
    at += s;
  }
  return outs;
}

absl::StatusOr<std::vector<Value>> Slice(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.opset() < 10) {
    starts = ctx.Ints("starts").value_or(std::vector<int64_t>{});
    ends = ctx.Ints("ends").value_or(std::vector<int64_t>{});
    axes = ctx.Ints("axes").value_or(std::vector<int64_t>{});
  } else {
    KILN_ASSIGN_OR_RETURN(starts, ctx.Ints(1));
    KILN_ASSIGN_OR_RETURN(ends, ctx.Ints(2));
    if (ctx.Has(3)) { KILN_ASSIGN_OR_RETURN(axes, ctx.Ints(3)); }
    if (ctx.Has(4)) { KILN_ASSIGN_OR_RETURN(steps, ctx.Ints(4)); }
  }
  if (starts.size() != ends.size()) return ctx.Error("starts and ends differ in length");
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size()) return ctx.Error("axes/steps length mismatch");
  std::vector<SliceArg> args(x.ndim(), SliceArg::All());
  for (size_t i = 0; i < axes.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(int64_t a, Axis(ctx, axes[i], x.ndim()));
    if (steps[i] == 0) return ctx.Error("steps must not be 0");
    args[a] = SliceArg::Range(starts[i], ends[i], steps[i]);
  }
  return One(x.Slice(args));
}

absl::StatusOr<std::vector<Value>> Expand(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ctx.Ints(1));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShape(ctx, Dims(x), shape));
  return One(x.BroadcastTo(out));
}

absl::StatusOr<std::vector<Value>> Tile(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> reps, ctx.Ints(1));
  if (static_cast<int64_t>(reps.size()) != x.ndim()) return ctx.Error("repeats must have one value per dim");
  for (int64_t r : reps) {
    if (r < 0) return ctx.Error("repeats must be non-negative");
  }
  return One(x.Repeat(reps));
}

// Pads one axis by edge replication, wrapping or reflection. Each padded axis is a window of a
// periodic sequence over x (period n when wrapping, 2(n-1) when reflecting), so it is cut from the
// period repeated: a few nodes whatever the pad (one slice per padded element made a 10^12 pad,
// found by fuzz_onnx, run for minutes). `before` and `after` are >= 0; reflect needs n >= 2.
Tensor PadAxis(const Tensor& x, int64_t axis, int64_t before, int64_t after, const std::string& mode) {
  if (before == 0 && after == 0) return x;
  const int64_t n = x.size(axis);
  auto slice = [&](const Tensor& t, int64_t lo, int64_t hi) {
    std::vector<std::pair<int64_t, int64_t>> b;
    for (int64_t i = 0; i < t.ndim(); ++i) b.emplace_back(0, t.size(i));
    b[axis] = {lo, hi};
    return t.Shrink(b);
  };
  auto repeat = [&](const Tensor& t, int64_t times) {
    std::vector<int64_t> reps(t.ndim(), 1);
    reps[axis] = times;
    return t.Repeat(reps);
  };
  if (mode == "edge") {
    std::vector<Tensor> parts;
    if (before > 0) parts.push_back(repeat(slice(x, 0, 1), before));
    parts.push_back(x);
    if (after > 0) parts.push_back(repeat(slice(x, n - 1, n), after));
    return Tensor::Cat(parts, axis);
  }
  Tensor period = x;  // wrap: position p holds x[p mod n]
  int64_t p = n;
  if (mode == "reflect") {  // position p holds x[q] or x[2(n-1) - q], q = p mod 2(n-1)
    p = 2 * (n - 1);
    if (n > 2) period = Tensor::Cat({x, slice(x, 1, n - 1).Flip(Axes(axis))}, axis);
  }
  const int64_t total = before + n + after;
  const int64_t start = ((-before) % p + p) % p;  // the period index of output position 0
  return slice(repeat(period, (start + total + p - 1) / p), start, start + total);
}

absl::StatusOr<std::vector<Value>> Pad(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  std::vector<int64_t> pads, axes;
  Scalar value = 0;
  const std::string mode = ctx.String("mode", "constant");
  if (ctx.opset() < 11) {
    pads = ctx.Ints(ctx.opset() < 2 ? "paddings" : "pads").value_or(std::vector<int64_t>{});
    value = Scalar(ctx.Float("value", 0.0));
  } else {
    KILN_ASSIGN_OR_RETURN(pads, ctx.Ints(1));
    if (ctx.Has(2)) {
      KILN_ASSIGN_OR_RETURN(HostArrayPtr v, ctx.Host(2));
      if (v->numel() >= 1) {
        value = v->dtype.IsFloat() ? Scalar(v->GetDouble(0)) : v->dtype.IsBool() ? Scalar(v->GetInt(0) != 0)
                                                                               : Scalar(v->GetInt(0));
      }
    }
    if (ctx.Has(3)) { KILN_ASSIGN_OR_RETURN(axes, ctx.Ints(3)); }
  }
  if (axes.empty()) {
    for (int64_t i = 0; i < x.ndim(); ++i) axes.push_back(i);
  }
  if (pads.size() != 2 * axes.size()) return ctx.Error("pads must hold two values per padded axis");
  std::vector<std::pair<int64_t, int64_t>> full(x.ndim(), {0, 0});
  for (size_t i = 0; i < axes.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(int64_t a, Axis(ctx, axes[i], x.ndim()));
    full[a] = {pads[i], pads[i + axes.size()]};
  }
  auto far = [](int64_t v) { return v < -kMaxElements || v > kMaxElements; };
  for (int64_t a = 0; a < x.ndim(); ++a) {  // bounded first, so that the sums below cannot overflow
    const auto [b, e] = full[a];
    const int64_t size = x.size(a);
    if (far(b) || far(e) || size + b + e < 0 || size + b + e > kMaxElements) {
      return ctx.Error(absl::StrCat("pads ", b, " and ", e, " give axis ", a, " of size ", size,
                                    " a size outside [0, ", kMaxElements, "]"));
    }
  }
  if (mode == "constant") return One(x.Pad(full, value));
  if (mode != "reflect" && mode != "edge" && mode != "wrap") return ctx.Error("mode must be constant/reflect/edge/wrap");
  Tensor r = x;
  for (int64_t a = 0; a < x.ndim(); ++a) {
    auto [b, e] = full[a];
    if (b < 0 || e < 0) {  // negative pads crop first
      std::vector<std::pair<int64_t, int64_t>> crop(x.ndim(), {0, 0});
      crop[a] = {std::min<int64_t>(b, 0), std::min<int64_t>(e, 0)};
      r = r.Pad(crop);
    }
    if (r.size(a) == 0 && (b > 0 || e > 0)) return ctx.Error("cannot pad an empty axis in this mode");
    if (mode == "reflect" && r.size(a) == 1 && (b > 0 || e > 0)) r = PadAxis(r, a, b, e, "edge");
    else r = PadAxis(r, a, std::max<int64_t>(b, 0), std::max<int64_t>(e, 0), mode);
  }
  return One(r);
}

absl::StatusOr<std::vector<Value>> DepthToSpace(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  if (x.ndim() != 4) return ctx.Error("input must be 4-D");
  const int64_t b = ctx.Int("blocksize", 0);
  if (b <= 0) return ctx.Error("blocksize must be positive");
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  if (c % (b * b) != 0) return ctx.Error("channels must divide by blocksize^2");
  if (ctx.String("mode", "DCR") == "CRD") {
    return One(x.Reshape({n, c / (b * b), b, b, h, w}).Permute({0, 1, 4, 2, 5, 3}).Reshape({n, c / (b * b), h * b, w * b}));
  }
  return One(x.Reshape({n, b, b, c / (b * b), h, w}).Permute({0, 3, 4, 1, 5, 2}).Reshape({n, c / (b * b), h * b, w * b}));
}

absl::StatusOr<std::vector<Value>> SpaceToDepth(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  if (x.ndim() != 4) return ctx.Error("input must be 4-D");
  const int64_t b = ctx.Int("blocksize", 0);
  if (b <= 0) return ctx.Error("blocksize must be positive");
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  if (h % b != 0 || w % b != 0) return ctx.Error("spatial dims must divide by blocksize");
  return One(x.Reshape({n, c, h / b, b, w / b, b}).Permute({0, 3, 5, 1, 2, 4}).Reshape({n, c * b * b, h / b, w / b}));
}

absl::StatusOr<std::vector<Value>> CenterCropPad(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ctx.Ints(1));
  std::vector<int64_t> axes = ctx.Ints("axes").value_or(std::vector<int64_t>{});
  if (axes.empty()) {
    for (int64_t i = 0; i < x.ndim(); ++i) axes.push_back(i);
  }
  if (shape.size() != axes.size()) return ctx.Error("shape must have one value per axis");
  std::vector<std::pair<int64_t, int64_t>> pad(x.ndim(), {0, 0});
  for (size_t i = 0; i < axes.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(int64_t a, Axis(ctx, axes[i], x.ndim()));
    const int64_t have = x.size(a), want = shape[i];
    if (want < have) {
      const int64_t lo = (have - want) / 2;
      pad[a] = {-lo, -(have - want - lo)};
    } else {
      const int64_t lo = (want - have) / 2;
      pad[a] = {lo, want - have - lo};
    }
  }
  return One(x.Pad(pad));
}

// ** shape and constant producers (host values) **

absl::StatusOr<std::vector<Value>> ShapeOp(OpContext& ctx) {
  if (!ctx.Has(0)) return ctx.Error("input 0 is required");
  const Shape s = ctx.In(0).shape();
  const int64_t r = static_cast<int64_t>(s.size());
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  const int64_t start = clamp(ctx.Int("start", 0));
  const int64_t end = ctx.HasAttr("end") ? clamp(ctx.Int("end", r)) : r;
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(s[i]);
  return std::vector<Value>{Value::Constant(HostArray::FromInts(dtypes::kInt64, {static_cast<int64_t>(dims.size())}, dims))};
}

absl::StatusOr<std::vector<Value>> Size(OpContext& ctx) {
  if (!ctx.Has(0)) return ctx.Error("input 0 is required");
  int64_t n = 1;
  for (int64_t d : ctx.In(0).shape()) n *= d;
  return std::vector<Value>{Value::Constant(HostArray::FromInts(dtypes::kInt64, {}, {n}))};
}

absl::StatusOr<std::vector<Value>> Constant(OpContext& ctx) {
  auto ints_value = [&](const std::vector<int64_t>& v, bool scalar) {
    return HostArray::FromInts(dtypes::kInt64, scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())}, v);
  };
  Value v;
  if (HostArrayPtr t = ctx.TensorAttr("value")) {
    v = Value::Constant(t);
    v.persistent = true;
  } else if (ctx.HasAttr("value_float")) {
    v = Value::Constant(HostArray::FromDoubles(dtypes::kFloat32, {}, {ctx.Float("value_float", 0)}));
  } else if (ctx.HasAttr("value_floats")) {
    const std::vector<double> f = *ctx.Floats("value_floats");
    v = Value::Constant(HostArray::FromDoubles(dtypes::kFloat32, {static_cast<int64_t>(f.size())}, f));
  } else if (ctx.HasAttr("value_int")) {
    v = Value::Constant(ints_value({ctx.Int("value_int", 0)}, true));
  } else if (ctx.HasAttr("value_ints")) {
    v = Value::Constant(ints_value(*ctx.Ints("value_ints"), false));
  } else {
    return ctx.Error("needs value, value_float(s) or value_int(s) (strings and sparse values are not supported)");
  }
  return std::vector<Value>{v};
}

absl::StatusOr<std::vector<Value>> ConstantOfShape(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ctx.Ints(0));
  for (int64_t d : shape) {
    if (d < 0) return ctx.Error("shape has a negative dim");
  }
  HostArrayPtr value = ctx.TensorAttr("value");
  DType dt = value ? value->dtype : dtypes::kFloat32;
  Scalar s = 0.0;
  if (value && value->numel() >= 1) {
    s = dt.IsFloat() ? Scalar(value->GetDouble(0)) : dt.IsBool() ? Scalar(value->GetInt(0) != 0) : Scalar(value->GetInt(0));
  }
  return One(Tensor::Full(shape, s, dt, ctx.device()));
}

absl::StatusOr<std::vector<Value>> Range(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(HostArrayPtr start, ctx.Host(0));
  KILN_ASSIGN_OR_RETURN(HostArrayPtr limit, ctx.Host(1));
  KILN_ASSIGN_OR_RETURN(HostArrayPtr delta, ctx.Host(2));
  const DType dt = start->dtype;
  if (start->numel() != 1 || limit->numel() != 1 || delta->numel() != 1) return ctx.Error("inputs must be scalars");
  if (dt.IsFloat()) {
    const double s = start->GetDouble(0), l = limit->GetDouble(0), d = delta->GetDouble(0);
    if (d == 0) return ctx.Error("delta must not be 0");
    const int64_t n = std::max<int64_t>(static_cast<int64_t>(std::ceil((l - s) / d)), 0);
    std::vector<double> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = s + static_cast<double>(i) * d;
    return std::vector<Value>{Value::Constant(HostArray::FromDoubles(dt, {n}, v))};
  }
  const int64_t s = start->GetInt(0), l = limit->GetInt(0), d = delta->GetInt(0);
  if (d == 0) return ctx.Error("delta must not be 0");
  const int64_t n = std::max<int64_t>(d > 0 ? (l - s + d - 1) / d : (s - l - d - 1) / (-d), 0);
  if (n > (int64_t{1} << 24)) return One(Tensor::Arange(s, s + n * d, d, dt, ctx.device()));
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = s + i * d;
  return std::vector<Value>{Value::Constant(HostArray::FromInts(dt, {n}, v))};
}

absl::StatusOr<std::vector<Value>> EyeLike(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  if (x.ndim() != 2) return ctx.Error("input must be 2-D");
  DType dt = x.dtype();
  if (ctx.HasAttr("dtype")) { KILN_ASSIGN_OR_RETURN(dt, OnnxToDType(static_cast<int32_t>(ctx.Int("dtype", 1)))); }
  const int64_t k = ctx.Int("k", 0), r = x.size(0), c = x.size(1);
  Tensor row = Tensor::Arange(0, r, 1, dtypes::kInt64, ctx.device()).Reshape({r, 1});
  Tensor col = Tensor::Arange(0, c, 1, dtypes::kInt64, ctx.device()).Reshape({1, c});
  return One(col.Sub(row).Eq(k).Cast(dt));
}

}  // namespace

void RegisterMovementOps(OpTable* t) {
  Reg(t, "Identity", 1, kMaxOnnxOpset, {}, Identity);
  Reg(t, "Reshape", 1, kMaxOnnxOpset, {"shape", "allowzero", "consumed_inputs"}, Reshape);
  Reg(t, "Flatten", 1, kMaxOnnxOpset, {"axis"}, Flatten);
  Reg(t, "Transpose", 1, kMaxOnnxOpset, {"perm"}, Transpose);
  Reg(t, "Squeeze", 1, kMaxOnnxOpset, {"axes"}, Squeeze);
  Reg(t, "Unsqueeze", 1, kMaxOnnxOpset, {"axes"}, Unsqueeze);
  Reg(t, "Concat", 1, kMaxOnnxOpset, {"axis"}, Concat);
  Reg(t, "Split", 1, kMaxOnnxOpset, {"axis", "split", "num_outputs"}, Split);
  Reg(t, "Slice", 1, kMaxOnnxOpset, {"starts", "ends", "axes"}, Slice);
  Reg(t, "Expand", 8, kMaxOnnxOpset, {}, Expand);
  Reg(t, "Tile", 6, kMaxOnnxOpset, {}, Tile);
  Reg(t, "Pad", 1, kMaxOnnxOpset, {"mode", "pads", "paddings", "value"}, Pad);
  Reg(t, "DepthToSpace", 1, kMaxOnnxOpset, {"blocksize", "mode"}, DepthToSpace);
  Reg(t, "SpaceToDepth", 1, kMaxOnnxOpset, {"blocksize"}, SpaceToDepth);
  Reg(t, "CenterCropPad", 18, kMaxOnnxOpset, {"axes"}, CenterCropPad);
  Reg(t, "Shape", 1, kMaxOnnxOpset, {"start", "end"}, ShapeOp);
  Reg(t, "Size", 1, kMaxOnnxOpset, {}, Size);
  Reg(t, "Constant", 1, kMaxOnnxOpset,
                {"value", "value_float", "value_floats", "value_int", "value_ints"},
                Constant);
  Reg(t, "ConstantOfShape", 9, kMaxOnnxOpset, {"value"}, ConstantOfShape);
  Reg(t, "Range", 11, kMaxOnnxOpset, {}, Range);
  Reg(t, "EyeLike", 9, kMaxOnnxOpset, {"dtype", "k"}, EyeLike);
}

}  // namespace kiln::onnx
