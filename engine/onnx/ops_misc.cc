// Control flow (If, Loop, Scan), sequences, optionals, and Resize/Upsample.
#include <algorithm>
#include <cmath>

#include "engine/onnx/ops_util.h"

namespace kiln::onnx {
namespace {

Value BoolScalar(bool b) { return Value::Constant(HostArray::FromInts(dtypes::kBool, {}, {b ? 1 : 0})); }
Value IntScalar(int64_t v) { return Value::Constant(HostArray::FromInts(dtypes::kInt64, {}, {v})); }

absl::StatusOr<int64_t> ScalarInt(OpContext& ctx, size_t i) {
  KILN_ASSIGN_OR_RETURN(HostArrayPtr h, ctx.Host(i));
  if (h->numel() != 1) return ctx.Error(absl::StrCat("input ", i, " must hold one value"));
  return h->GetInt(0);
}

// ** control flow **

absl::StatusOr<std::vector<Value>> If(OpContext& ctx) {
  std::shared_ptr<const Graph> then_g = ctx.GraphAttr("then_branch"), else_g = ctx.GraphAttr("else_branch");
  if (!then_g || !else_g) return ctx.Error("then_branch and else_branch are required");
  absl::StatusOr<HostArrayPtr> cond = ctx.Host(0);
  if (cond.ok()) {
    if ((*cond)->numel() != 1) return ctx.Error("cond must hold one value");
    return ctx.RunSubgraph((*cond)->GetDouble(0) != 0.0 ? *then_g : *else_g, {});
  }
  // A condition computed from the inputs (under a JIT): both branches, selected elementwise when shapes agree.
  KILN_ASSIGN_OR_RETURN(std::vector<Value> t, ctx.RunSubgraph(*then_g, {}));
  KILN_ASSIGN_OR_RETURN(std::vector<Value> e, ctx.RunSubgraph(*else_g, {}));
  if (t.size() != e.size()) return ctx.Error("branches produce different numbers of outputs");
  ONNX_INPUT(c, 0);
  std::vector<Value> outs;
  for (size_t i = 0; i < t.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(Tensor a, ctx.ToTensor(t[i]));
    KILN_ASSIGN_OR_RETURN(Tensor b, ctx.ToTensor(e[i]));
    if (a.shape() != b.shape()) return cond.status();
    outs.push_back(Value::Of(c.Reshape({}).Where(a, b)));
  }
  return outs;
}

// Stacks per-iteration values along a new axis 0 (scan outputs).
absl::StatusOr<Value> StackValues(OpContext& ctx, const std::vector<Value>& items) {
  std::vector<Tensor> ts;
  for (const Value& v : items) {
    KILN_ASSIGN_OR_RETURN(Tensor t, ctx.ToTensor(v));
    ts.push_back(t.Unsqueeze(0));
  }
  if (ts.empty()) return ctx.Error("a scan output has no iterations");
  return Value::Of(ts.size() == 1 ? ts[0] : Tensor::Cat(ts, 0));
}

absl::StatusOr<std::vector<Value>> Loop(OpContext& ctx) {
  std::shared_ptr<const Graph> body = ctx.GraphAttr("body");
  if (!body) return ctx.Error("body is required");
  int64_t max_trips = std::numeric_limits<int64_t>::max();
  if (ctx.Has(0)) { KILN_ASSIGN_OR_RETURN(max_trips, ScalarInt(ctx, 0)); }
  bool cond = true;
  if (ctx.Has(1)) {
    KILN_ASSIGN_OR_RETURN(int64_t c, ScalarInt(ctx, 1));
    cond = c != 0;
  }
  std::vector<Value> state;
  for (size_t i = 2; i < ctx.num_inputs(); ++i) state.push_back(ctx.Has(i) ? ctx.In(i) : Value::None());
  const size_t n_state = state.size();
  const size_t n_scan = body->outputs.size() >= 1 + n_state ? body->outputs.size() - 1 - n_state : 0;
  std::vector<std::vector<Value>> scans(n_scan);
  // Each iteration reads the condition on the host: a bound on that cost (about 0.3 s of a release build for a
  // trivial body at the limit); the run's node budget (kMaxNodeRuns) bounds larger and nested bodies.
  constexpr int64_t kMaxTrips = 1 << 14;
  int64_t i = 0;
  for (; i < max_trips && cond; ++i) {
    if (i >= kMaxTrips) return ctx.Error(absl::StrCat("more than ", kMaxTrips, " iterations"));
    std::vector<Value> in = {IntScalar(i), BoolScalar(cond)};
    in.insert(in.end(), state.begin(), state.end());
    KILN_ASSIGN_OR_RETURN(std::vector<Value> out, ctx.RunSubgraph(*body, in));
    if (out.size() != 1 + n_state + n_scan) return ctx.Error("body outputs do not match the loop");
    KILN_ASSIGN_OR_RETURN(HostArrayPtr c, ctx.ToHost(out[0]));
    cond = c->numel() == 1 && c->GetDouble(0) != 0.0;
    for (size_t s = 0; s < n_state; ++s) state[s] = out[1 + s];
    for (size_t s = 0; s < n_scan; ++s) scans[s].push_back(out[1 + n_state + s]);
  }
  std::vector<Value> outs = state;
  for (size_t s = 0; s < n_scan; ++s) {
    if (scans[s].empty()) {
      // zero iterations: an empty scan output (shape unknown beyond the first dim)
      outs.push_back(Value::Of(Tensor::Zeros({0}, dtypes::kFloat32, ctx.device())));
      continue;
    }
    KILN_ASSIGN_OR_RETURN(Value v, StackValues(ctx, scans[s]));
    outs.push_back(std::move(v));
  }
  return outs;
}

absl::StatusOr<std::vector<Value>> Scan(OpContext& ctx) {
  std::shared_ptr<const Graph> body = ctx.GraphAttr("body");
  if (!body) return ctx.Error("body is required");
  const int64_t m = ctx.Int("num_scan_inputs", 0);
  const int64_t total = static_cast<int64_t>(ctx.num_inputs());
  const int64_t n_state = total - m;
  if (m <= 0 || n_state < 0) return ctx.Error("num_scan_inputs does not match the inputs");
  const int64_t n_scan_out = static_cast<int64_t>(body->outputs.size()) - n_state;
  std::vector<int64_t> in_axes = ctx.Ints("scan_input_axes").value_or(std::vector<int64_t>(m, 0));
  std::vector<int64_t> in_dirs = ctx.Ints("scan_input_directions").value_or(std::vector<int64_t>(m, 0));
  std::vector<int64_t> out_axes = ctx.Ints("scan_output_axes").value_or(std::vector<int64_t>(n_scan_out, 0));
  std::vector<int64_t> out_dirs = ctx.Ints("scan_output_directions").value_or(std::vector<int64_t>(n_scan_out, 0));
  std::vector<Value> state;
  for (int64_t i = 0; i < n_state; ++i) state.push_back(ctx.In(i));
  std::vector<Tensor> xs;
  int64_t len = -1;
  for (int64_t j = 0; j < m; ++j) {
    ONNX_INPUT(x, n_state + j);
    KILN_ASSIGN_OR_RETURN(int64_t ax, Axis(ctx, in_axes[j], x.ndim()));
    Tensor moved = x;
    if (ax != 0) {
      std::vector<int64_t> perm = {ax};
      for (int64_t d = 0; d < x.ndim(); ++d) {
        if (d != ax) perm.push_back(d);
      }
      moved = x.Permute(perm);
    }
    if (in_dirs[j]) moved = moved.Flip(0);
    if (len >= 0 && moved.size(0) != len) return ctx.Error("scan inputs differ in length");
    len = moved.size(0);
    xs.push_back(moved);
  }
  std::vector<std::vector<Value>> scans(n_scan_out);
  for (int64_t t = 0; t < len; ++t) {
    std::vector<Value> in = state;
    for (const Tensor& x : xs) {
      std::vector<std::pair<int64_t, int64_t>> b;
      for (int64_t d = 0; d < x.ndim(); ++d) b.emplace_back(0, x.size(d));
      b[0] = {t, t + 1};
      std::vector<int64_t> s(x.shape().begin() + 1, x.shape().end());
      in.push_back(Value::Of(x.Shrink(b).Reshape(s)));
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Value> out, ctx.RunSubgraph(*body, in));
    for (int64_t s = 0; s < n_state; ++s) state[s] = out[s];
    for (int64_t s = 0; s < n_scan_out; ++s) scans[s].push_back(out[n_state + s]);
  }
  std::vector<Value> outs = state;
  for (int64_t s = 0; s < n_scan_out; ++s) {
    KILN_ASSIGN_OR_RETURN(Value v, StackValues(ctx, scans[s]));
    Tensor r = v.tensor;
    if (out_dirs[s]) r = r.Flip(0);
    KILN_ASSIGN_OR_RETURN(int64_t ax, Axis(ctx, out_axes[s], r.ndim()));
    if (ax != 0) {
      std::vector<int64_t> perm;
      for (int64_t d = 1; d <= ax; ++d) perm.push_back(d);
      perm.push_back(0);
      for (int64_t d = ax + 1; d < r.ndim(); ++d) perm.push_back(d);
      r = r.Permute(perm);
    }
    outs.push_back(Value::Of(r));
  }
  return outs;
}

// ** sequences **

absl::StatusOr<const Value*> SeqIn(OpContext& ctx, size_t i) {
  if (!ctx.Has(i) || !ctx.In(i).is_sequence()) return ctx.Error(absl::StrCat("input ", i, " must be a sequence"));
  return &ctx.In(i);
}

absl::StatusOr<int64_t> SeqPos(OpContext& ctx, size_t i, int64_t size, int64_t def, bool insert) {
  if (!ctx.Has(i)) return def;
  KILN_ASSIGN_OR_RETURN(int64_t p, ScalarInt(ctx, i));
  const int64_t q = p < 0 ? p + size : p;
  if (q < 0 || q > size - (insert ? 0 : 1)) return ctx.Error(absl::StrCat("position ", p, " is out of range"));
  return q;
}

absl::StatusOr<std::vector<Value>> SequenceEmpty(OpContext& ctx) {
  DType dt = dtypes::kFloat32;
  if (ctx.HasAttr("dtype")) { KILN_ASSIGN_OR_RETURN(dt, OnnxToDType(static_cast<int32_t>(ctx.Int("dtype", 1)))); }
  return std::vector<Value>{Value::Sequence({}, dt)};
}

absl::StatusOr<std::vector<Value>> SequenceConstruct(OpContext& ctx) {
  std::vector<Value> items;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.Has(i)) return ctx.Error("inputs must be present");
    items.push_back(ctx.In(i));
  }
  const DType dt = items.empty() ? dtypes::kFloat32 : items[0].dtype();
  return std::vector<Value>{Value::Sequence(std::move(items), dt)};
}

absl::StatusOr<std::vector<Value>> SequenceAt(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Value* s, SeqIn(ctx, 0));
  KILN_ASSIGN_OR_RETURN(int64_t p, SeqPos(ctx, 1, static_cast<int64_t>(s->seq.size()), -1, false));
  return std::vector<Value>{s->seq[p]};
}

absl::StatusOr<std::vector<Value>> SequenceInsert(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Value* s, SeqIn(ctx, 0));
  if (!ctx.Has(1)) return ctx.Error("tensor is required");
  const int64_t n = static_cast<int64_t>(s->seq.size());
  KILN_ASSIGN_OR_RETURN(int64_t p, SeqPos(ctx, 2, n, n, true));
  std::vector<Value> items = s->seq;
  items.insert(items.begin() + p, ctx.In(1));
  return std::vector<Value>{Value::Sequence(std::move(items), s->seq_dtype)};
}

absl::StatusOr<std::vector<Value>> SequenceErase(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Value* s, SeqIn(ctx, 0));
  const int64_t n = static_cast<int64_t>(s->seq.size());
  KILN_ASSIGN_OR_RETURN(int64_t p, SeqPos(ctx, 1, n, n - 1, false));
  if (n == 0) return ctx.Error("cannot erase from an empty sequence");
  std::vector<Value> items = s->seq;
  items.erase(items.begin() + p);
  return std::vector<Value>{Value::Sequence(std::move(items), s->seq_dtype)};
}

absl::StatusOr<std::vector<Value>> SequenceLength(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Value* s, SeqIn(ctx, 0));
  return std::vector<Value>{IntScalar(static_cast<int64_t>(s->seq.size()))};
}

absl::StatusOr<std::vector<Value>> SplitToSequence(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", 0), x.ndim()));
  const int64_t n = x.size(axis);
  std::vector<int64_t> sizes;
  bool squeeze = false;
  if (ctx.Has(1)) {
    KILN_ASSIGN_OR_RETURN(HostArrayPtr sp, ctx.Host(1));
    if (sp->shape.empty()) {
      const int64_t c = sp->GetInt(0);
      if (c <= 0) return ctx.Error("split must be positive");
      for (int64_t left = n; left > 0; left -= c) sizes.push_back(std::min(c, left));
    } else {
      sizes = sp->Ints();
    }
  } else {
    sizes.assign(n, 1);
    squeeze = ctx.Int("keepdims", 1) == 0;
  }
  std::vector<Value> items;
  int64_t at = 0;
  for (int64_t s : sizes) {
    std::vector<std::pair<int64_t, int64_t>> b;
    for (int64_t d = 0; d < x.ndim(); ++d) b.emplace_back(0, x.size(d));
    b[axis] = {at, at + s};
    Tensor part = x.Shrink(b);
    if (squeeze) part = part.Squeeze(axis);
    items.push_back(Value::Of(part));
    at += s;
  }
  if (at != n) return ctx.Error("split sizes do not add up to the axis length");
  return std::vector<Value>{Value::Sequence(std::move(items), x.dtype())};
}

absl::StatusOr<std::vector<Value>> ConcatFromSequence(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Value* s, SeqIn(ctx, 0));
  if (s->seq.empty()) return ctx.Error("the sequence is empty");
  const bool new_axis = ctx.Int("new_axis", 0) != 0;
  std::vector<Tensor> ts;
  for (const Value& v : s->seq) {
    KILN_ASSIGN_OR_RETURN(Tensor t, ctx.ToTensor(v));
    ts.push_back(t);
  }
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", 0), ts[0].ndim() + (new_axis ? 1 : 0)));
  if (new_axis) {
    for (Tensor& t : ts) t = t.Unsqueeze(axis);
  }
  return One(ts.size() == 1 ? ts[0] : Tensor::Cat(ts, axis));
}

// ** optionals **

absl::StatusOr<std::vector<Value>> OptionalOp(OpContext& ctx) {
  if (!ctx.Has(0)) return std::vector<Value>{Value::None()};
  return std::vector<Value>{ctx.In(0)};
}
absl::StatusOr<std::vector<Value>> OptionalHasElement(OpContext& ctx) {
  return std::vector<Value>{BoolScalar(ctx.Has(0))};
}
absl::StatusOr<std::vector<Value>> OptionalGetElement(OpContext& ctx) {
  if (!ctx.Has(0)) return ctx.Error("the optional is empty");
  return std::vector<Value>{ctx.In(0)};
}

// ** Resize **
//
// Every resized axis is a dense (out x in) interpolation matrix computed on the host from the shapes and scales
// (nearest: one 1 per row; linear: two taps; cubic: four; with antialias, downsampling, the kernel stretched by
// 1 / scale over more taps), applied as a matmul along the axis; values outside the
// input (tf_crop_and_resize) take extrapolation_value through a per-row bias.

struct AxisPlan {
  std::vector<double> weights;  // out x in
  std::vector<double> outside;  // per output: 1 when it extrapolates
};

absl::StatusOr<AxisPlan> PlanAxis(OpContext& ctx, int64_t in, int64_t out, double scale, double roi_start,
                                  double roi_end) {
  const std::string mode = ctx.String("mode", "nearest");
  const std::string ctm = ctx.String("coordinate_transformation_mode", "half_pixel");
  const std::string nearest = ctx.String("nearest_mode", "round_prefer_floor");
  const double a = ctx.Float("cubic_coeff_a", -0.75);
  const bool exclude = ctx.Int("exclude_outside", 0) != 0;
  const bool antialias = ctx.Int("antialias", 0) != 0;
  AxisPlan p;
  p.weights.assign(static_cast<size_t>(out * in), 0.0);
  p.outside.assign(static_cast<size_t>(out), 0.0);
  for (int64_t j = 0; j < out; ++j) {
    const double xr = static_cast<double>(j);
    double x;
    if (ctm == "half_pixel") {
      x = (xr + 0.5) / scale - 0.5;
    } else if (ctm == "half_pixel_symmetric") {
      const double adj = static_cast<double>(out) / (scale * static_cast<double>(in));
      const double center = static_cast<double>(in) / 2.0;
      x = center * (1 - adj) + (xr + 0.5) / scale - 0.5;
    } else if (ctm == "pytorch_half_pixel") {
      x = out > 1 ? (xr + 0.5) / scale - 0.5 : 0.0;
    } else if (ctm == "align_corners") {
      // the reference divides by the unrounded output length (scale * in)
      const double out_f = scale * static_cast<double>(in);
      x = out == 1 ? 0.0 : xr * static_cast<double>(in - 1) / (out_f - 1);
    } else if (ctm == "asymmetric") {
      x = xr / scale;
    } else if (ctm == "tf_crop_and_resize") {
      x = out > 1 ? roi_start * (in - 1) + xr * (roi_end - roi_start) * (in - 1) / static_cast<double>(out - 1)
                  : 0.5 * (roi_start + roi_end) * (in - 1);
      if (x < 0 || x > in - 1) {
        p.outside[j] = 1.0;
        continue;
      }
    } else {
      return ctx.Error("unsupported coordinate_transformation_mode");
    }
    auto clampi = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
    double* row = &p.weights[static_cast<size_t>(j * in)];
    if (mode == "nearest") {
      int64_t i;
      if (nearest == "round_prefer_floor") i = static_cast<int64_t>(std::ceil(x - 0.5));
      else if (nearest == "round_prefer_ceil") i = static_cast<int64_t>(std::floor(x + 0.5));
      else if (nearest == "floor") i = static_cast<int64_t>(std::floor(x));
      else if (nearest == "ceil") i = static_cast<int64_t>(std::ceil(x));
      else return ctx.Error("unsupported nearest_mode");
      row[clampi(i)] += 1.0;
      continue;
    }
    const double fl = std::floor(x);
    const double r = x - fl;
    const int64_t base = static_cast<int64_t>(fl);
    std::vector<std::pair<int64_t, double>> taps;
    auto cubic = [&](double t) {  // Keys' kernel with coefficient a
      t = std::abs(t);
      if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
      if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
      return 0.0;
    };
    if (antialias && scale < 1 && (mode == "linear" || mode == "cubic")) {
      // Downsampling with antialias: the kernel is stretched by 1 / scale (a tent of radius 1 / scale, or the cubic
      // over 2 / scale) and sampled at the n input pixels nearest x, left ones first on a tie (x an integer counts
      // as the right end of the interval below it), then normalized to sum 1.
      const double radius = mode == "linear" ? 1.0 : 2.0;
      const int64_t start = static_cast<int64_t>(std::floor(-radius / scale)) + 1;
      const int64_t count = 2 - 2 * start;
      const int64_t b = r == 0 ? base - 1 : base;
      const double rr = r == 0 ? 1.0 : r;
      double sum = 0;
      for (int64_t k = start; k < start + count; ++k) {
        const double t = (static_cast<double>(k) - rr) * scale;
        const double w = mode == "linear" ? std::max(0.0, 1 - std::abs(t)) : cubic(t);
        taps.emplace_back(b + k, w);
        sum += w;
      }
      for (auto& [i, w] : taps) w /= sum;
    } else if (mode == "linear") {
      taps = {{base, 1 - r}, {base + 1, r}};
    } else if (mode == "cubic") {
      auto w01 = [&](double t) { return ((a + 2) * t - (a + 3)) * t * t + 1; };
      auto w12 = [&](double t) { return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a; };
      taps = {{base - 1, w12(r + 1)}, {base, w01(r)}, {base + 1, w01(1 - r)}, {base + 2, w12(2 - r)}};
    } else {
      return ctx.Error("mode must be nearest, linear or cubic");
    }
    if (exclude) {
      double sum = 0;
      for (auto& [i, w] : taps) {
        if (i < 0 || i >= in) w = 0;
        sum += w;
      }
      for (auto& [i, w] : taps) w = sum != 0 ? w / sum : 0;
    }
    for (const auto& [i, w] : taps) {
      if (w != 0) row[clampi(i)] += w;
    }
  }
  return p;
}

absl::StatusOr<std::vector<Value>> ResizeImpl(OpContext& ctx, const Tensor& x, std::vector<double> scales,
                                              std::vector<int64_t> sizes, std::vector<double> roi) {
  const int64_t r = x.ndim();
  std::vector<int64_t> axes = ctx.Ints("axes").value_or(std::vector<int64_t>{});
  if (axes.empty()) {
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  for (int64_t& ax : axes) { KILN_ASSIGN_OR_RETURN(ax, Axis(ctx, ax, r)); }
  const size_t na = axes.size();
  if (!scales.empty() && scales.size() != na) return ctx.Error("scales must have one value per axis");
  if (!sizes.empty() && sizes.size() != na) return ctx.Error("sizes must have one value per axis");
  if (scales.empty() && sizes.empty()) return ctx.Error("one of scales and sizes is required");
  std::vector<int64_t> out(na);
  std::vector<double> sc(na);
  if (!sizes.empty()) {
    const std::string policy = ctx.String("keep_aspect_ratio_policy", "stretch");
    if (policy == "stretch") {
      for (size_t i = 0; i < na; ++i) {
        out[i] = sizes[i];
        sc[i] = static_cast<double>(sizes[i]) / static_cast<double>(x.size(axes[i]));
      }
    } else {
      double s = policy == "not_larger" ? 1e300 : 0;
      for (size_t i = 0; i < na; ++i) {
        const double v = static_cast<double>(sizes[i]) / static_cast<double>(x.size(axes[i]));
        s = policy == "not_larger" ? std::min(s, v) : std::max(s, v);
      }
      for (size_t i = 0; i < na; ++i) {
        sc[i] = s;
        out[i] = static_cast<int64_t>(std::round(s * static_cast<double>(x.size(axes[i]))));
      }
    }
  } else {
    for (size_t i = 0; i < na; ++i) {
      if (!(scales[i] > 0)) return ctx.Error("scales must be positive");
      sc[i] = scales[i];
      out[i] = static_cast<int64_t>(std::floor(static_cast<double>(x.size(axes[i])) * scales[i]));
    }
  }
  const double extrapolation = ctx.Float("extrapolation_value", 0.0);
  const DType f = x.dtype().IsFloat() ? (IsLowFloat(x.dtype()) ? dtypes::kFloat32 : x.dtype()) : dtypes::kFloat32;
  Tensor y = x.Cast(f);
  for (size_t i = 0; i < na; ++i) {
    const int64_t ax = axes[i], in = x.size(ax);
    if (out[i] == in && sc[i] == 1.0 && ctx.String("coordinate_transformation_mode", "") != "tf_crop_and_resize") {
      continue;
    }
    if (in == 0) return ctx.Error("cannot resize an empty axis");
    const double rs = roi.size() == 2 * na ? roi[i] : 0.0, re = roi.size() == 2 * na ? roi[i + na] : 1.0;
    KILN_ASSIGN_OR_RETURN(AxisPlan plan, PlanAxis(ctx, in, out[i], sc[i], rs, re));
    Tensor w = Tensor::FromHost(HostArray::FromDoubles(f, {out[i], in}, plan.weights).bytes.data(), f,
                                {out[i], in}, ctx.device());
    std::vector<int64_t> perm;
    for (int64_t d = 0; d < r; ++d) {
      if (d != ax) perm.push_back(d);
    }
    perm.push_back(ax);
    std::vector<int64_t> inv(r);
    for (int64_t d = 0; d < r; ++d) inv[perm[d]] = d;
    Tensor moved = y.Permute(perm).Matmul(w.Transpose(0, 1));
    if (std::any_of(plan.outside.begin(), plan.outside.end(), [](double v) { return v != 0; })) {
      Tensor o = Tensor::FromHost(HostArray::FromDoubles(dtypes::kBool, {out[i]}, plan.outside).bytes.data(),
                                  dtypes::kBool, {out[i]}, ctx.device());
      moved = o.Where(moved.FullLike(extrapolation), moved);
    }
    y = moved.Permute(inv);
  }
  if (!x.dtype().IsFloat()) y = y.Round();
  return One(y.Cast(x.dtype()));
}

absl::StatusOr<std::vector<Value>> Resize(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  std::vector<double> roi, scales;
  std::vector<int64_t> sizes;
  if (ctx.opset() < 11) {
    KILN_ASSIGN_OR_RETURN(scales, ctx.Doubles(1));
  } else {
    if (ctx.Has(1)) { KILN_ASSIGN_OR_RETURN(roi, ctx.Doubles(1)); }
    if (ctx.Has(2)) { KILN_ASSIGN_OR_RETURN(scales, ctx.Doubles(2)); }
    if (ctx.Has(3)) { KILN_ASSIGN_OR_RETURN(sizes, ctx.Ints(3)); }
  }
  if (!sizes.empty()) scales.clear();
  std::vector<int64_t> axes = ctx.Ints("axes").value_or(std::vector<int64_t>{});
  if (!axes.empty() && roi.size() == 2 * static_cast<size_t>(x.ndim())) {
    std::vector<double> sel;
    for (int64_t a : axes) sel.push_back(roi[a < 0 ? a + x.ndim() : a]);
    for (int64_t a : axes) sel.push_back(roi[(a < 0 ? a + x.ndim() : a) + x.ndim()]);
    roi = sel;
  }
  return ResizeImpl(ctx, x, scales, sizes, roi);
}

absl::StatusOr<std::vector<Value>> Upsample(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  std::vector<double> scales;
  if (ctx.opset() >= 9) {
    KILN_ASSIGN_OR_RETURN(scales, ctx.Doubles(1));
  } else {
    scales = ctx.Floats("scales").value_or(std::vector<double>{});
  }
  if (ctx.String("mode", "nearest") != "nearest") return ctx.Error("only mode=nearest is supported");
  std::vector<int64_t> reps;
  for (double s : scales) {
    if (s != std::floor(s) || s < 1) return ctx.Error("nearest Upsample needs integer scales");
    reps.push_back(static_cast<int64_t>(s));
  }
  if (static_cast<int64_t>(reps.size()) != x.ndim()) return ctx.Error("scales must have one value per dim");
  // np.repeat along every dim: (d) -> (d, r) -> (d * r)
  std::vector<int64_t> unsq, expd, fin;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    unsq.push_back(x.size(d));
    unsq.push_back(1);
    expd.push_back(x.size(d));
    expd.push_back(reps[d]);
    fin.push_back(x.size(d) * reps[d]);
  }
  return One(x.Reshape(unsq).Expand(expd).Reshape(fin));
}




// ** GridSample **
//
// X (N, C, *D) sampled at the grid's points (N, *O, S): each point holds S coordinates in [-1, 1], x first (the last
// spatial dim). Every tap of the interpolation (nearest 1, linear 2^S, cubic 4^S) gathers the flattened spatial data
// at a computed index, weighted. onnx's (PyTorch's) padding rules: a coordinate outside [lo, hi] ([0, d-1] with
// align_corners, else [-0.5, d-0.5]) is clamped to [0, d-1] (border) or reflected at lo and hi (reflection), except in
// cubic mode; then each tap outside the data reads 0 (zeros), the nearest edge (border) or its reflection.

// x reflected at lo and hi until it lies between them (x outside [lo, hi] only; hi > lo).
Tensor Reflect(const Tensor& x, double lo, double hi) {
  const double span = hi - lo;
  auto fold = [&](const Tensor& dx, bool below) {
    const Tensor n = dx.Div(span).Floor();
    const Tensor r = dx.Sub(n.Mul(span));
    const Tensor even = n.Sub(n.Mul(0.5).Floor().Mul(2)).Eq(0);
    return below ? even.Where(r.Add(lo), r.RSub(hi)) : even.Where(r.RSub(hi), r.Add(lo));
  };
  return x.Lt(lo).Where(fold(x.RSub(lo), true), x.Gt(hi).Where(fold(x.Sub(hi), false), x));
}

absl::StatusOr<std::vector<Value>> GridSample(OpContext& ctx) {
  ONNX_INPUT(x_in, 0);
  ONNX_INPUT(grid_in, 1);
  std::string mode = ctx.String("mode", ctx.opset() >= 20 ? "linear" : "bilinear");
  if (mode == "bilinear") mode = "linear";
  if (mode == "bicubic") mode = "cubic";
  const std::string pad = ctx.String("padding_mode", "zeros");
  const bool align = ctx.Int("align_corners", 0) != 0;
  const int64_t sd = x_in.ndim() - 2;
  if (sd < 1 || grid_in.ndim() != x_in.ndim() || grid_in.size(0) != x_in.size(0) || grid_in.size(-1) != sd)
    return ctx.Error("grid must be (N, *output spatial, spatial rank of X) for X (N, C, *spatial)");
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return ctx.Error(absl::StrCat("mode '", mode, "' must be nearest, linear or cubic"));
  if (mode == "cubic" && sd != 2) return ctx.Error("cubic mode samples 2-D data only");
  if (pad != "zeros" && pad != "border" && pad != "reflection")
    return ctx.Error(absl::StrCat("padding_mode '", pad, "' must be zeros, border or reflection"));
  if (!x_in.dtype().IsFloat() || !grid_in.dtype().IsFloat()) return ctx.Error("X and grid must be float tensors");
  const DType f = x_in.dtype() == dtypes::kFloat64 ? dtypes::kFloat64 : dtypes::kFloat32;
  const int64_t n = x_in.size(0), c = x_in.size(1);
  std::vector<int64_t> dims, out_dims;
  int64_t data_len = 1, points = 1;
  for (int64_t i = 0; i < sd; ++i) dims.push_back(x_in.size(2 + i)), data_len *= dims.back();
  for (int64_t i = 0; i < sd; ++i) out_dims.push_back(grid_in.size(1 + i)), points *= out_dims.back();
  if (data_len == 0) return ctx.Error("X has an empty spatial dim");
  const Tensor g = grid_in.Cast(f).Reshape({n, points, sd});

  // Per spatial dim: the taps (index as a float holding an integer, weight), each [N, P].
  std::vector<std::vector<std::pair<Tensor, Tensor>>> taps(sd);
  for (int64_t i = 0; i < sd; ++i) {
    const double d = static_cast<double>(dims[i]);
    const Tensor gi = g.Shrink({{0, n}, {0, points}, {sd - 1 - i, sd - i}}).Reshape({n, points});
    Tensor co = align ? gi.Add(1.0).Mul(0.5 * (d - 1)) : gi.Add(1.0).Mul(d).Sub(1.0).Mul(0.5);
    if (mode == "nearest") co = co.Round();  // half to even, as PyTorch
    const double lo = align ? 0.0 : -0.5, hi = align ? d - 1 : d - 0.5;
    // Cubic pads its taps only, as PyTorch and onnxruntime do (onnx's reference clamps the coordinate first under
    // border, which moves the 4-tap stencil; the two agree under reflection, an isometry of the integer taps).
    if (mode != "cubic") {
      const Tensor out = co.Lt(lo).LogicalOr(co.Gt(hi));
      if (pad == "border") co = out.Where(co.Clip(0.0, d - 1), co);
      if (pad == "reflection") co = hi > lo ? Reflect(co, lo, hi) : co.ZerosLike();
    }
    const Tensor one = co.OnesLike();
    if (mode == "nearest") {
      taps[i] = {{co, one}};
    } else {
      const Tensor fl = co.Floor();
      const Tensor t = co.Sub(fl);
      if (mode == "linear") {
        taps[i] = {{fl, t.RSub(1.0)}, {fl.Add(1.0), t}};
      } else {  // Keys' cubic, a = -0.75
        const double a = -0.75;
        auto near = [&](const Tensor& u) { return u.Mul(a + 2).Sub(a + 3).Mul(u).Mul(u).Add(1.0); };
        auto far = [&](const Tensor& u) { return u.Mul(a).Sub(5 * a).Mul(u).Add(8 * a).Mul(u).Sub(4 * a); };
        taps[i] = {{fl.Sub(1.0), far(t.Add(1.0))}, {fl, near(t)}, {fl.Add(1.0), near(t.RSub(1.0))},
                   {fl.Add(2.0), far(t.RSub(2.0))}};
      }
    }
    for (auto& [idx, w] : taps[i]) {  // the tap's own padding
      if (pad == "zeros") {
        w = idx.Ge(0.0).LogicalAnd(idx.Lt(d)).Where(w, w.ZerosLike());
      } else if (pad == "reflection" && hi > lo) {
        idx = Reflect(idx, lo, hi).Trunc();
      }
      idx = idx.Clip(0.0, d - 1);
    }
  }
  const Tensor data = x_in.Cast(f).Reshape({n, c, data_len});
  std::optional<Tensor> acc;
  std::vector<size_t> pick(sd, 0);
  while (true) {  // every combination of one tap per dim
    Tensor lin = taps[0][pick[0]].first.ZerosLike();
    Tensor w = taps[0][pick[0]].second.OnesLike();
    int64_t stride = 1;
    for (int64_t i = sd - 1; i >= 0; --i) {
      lin = lin.Add(taps[i][pick[i]].first.Mul(static_cast<double>(stride)));
      w = w.Mul(taps[i][pick[i]].second);
      stride *= dims[i];
    }
    const Tensor index = lin.Cast(dtypes::kInt32).Reshape({n, 1, points}).Expand({n, c, points});
    const Tensor v = data.Gather(2, index).Mul(w.Reshape({n, 1, points}));
    acc = acc ? acc->Add(v) : v;
    int64_t k = sd - 1;
    while (k >= 0 && ++pick[k] == taps[k].size()) pick[k--] = 0;
    if (k < 0) break;
  }
  std::vector<int64_t> shape = {n, c};
  shape.insert(shape.end(), out_dims.begin(), out_dims.end());
  return One(acc->Reshape(shape).Cast(x_in.dtype()));
}
}  // namespace

void RegisterMiscOps(OpTable* t) {
  Reg(t, "If", 1, kMaxOnnxOpset, {"then_branch", "else_branch"}, If);
  Reg(t, "Loop", 1, kMaxOnnxOpset, {"body"}, Loop);
  Reg(t, "Scan", 9, kMaxOnnxOpset,
                {"body", "num_scan_inputs", "scan_input_axes", "scan_input_directions", "scan_output_axes",
                 "scan_output_directions"},
                Scan);
  Reg(t, "SequenceEmpty", 11, kMaxOnnxOpset, {"dtype"}, SequenceEmpty);
  Reg(t, "SequenceConstruct", 11, kMaxOnnxOpset, {}, SequenceConstruct);
  Reg(t, "SequenceAt", 11, kMaxOnnxOpset, {}, SequenceAt);
  Reg(t, "SequenceInsert", 11, kMaxOnnxOpset, {}, SequenceInsert);
  Reg(t, "SequenceErase", 11, kMaxOnnxOpset, {}, SequenceErase);
  Reg(t, "SequenceLength", 11, kMaxOnnxOpset, {}, SequenceLength);
  Reg(t, "SplitToSequence", 11, kMaxOnnxOpset, {"axis", "keepdims"}, SplitToSequence);
  Reg(t, "ConcatFromSequence", 11, kMaxOnnxOpset, {"axis", "new_axis"}, ConcatFromSequence);
  Reg(t, "Optional", 15, kMaxOnnxOpset, {"type"}, OptionalOp);
  Reg(t, "OptionalHasElement", 15, kMaxOnnxOpset, {}, OptionalHasElement);
  Reg(t, "OptionalGetElement", 15, kMaxOnnxOpset, {}, OptionalGetElement);
  Reg(t, "Resize", 10, kMaxOnnxOpset,
                {"antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                 "extrapolation_value", "keep_aspect_ratio_policy", "mode", "nearest_mode"},
                Resize);
  Reg(t, "Upsample", 7, 9, {"mode", "scales"}, Upsample);
  Reg(t, "GridSample", 16, kMaxOnnxOpset, {"align_corners", "mode", "padding_mode"}, GridSample);
}

}  // namespace kiln::onnx
