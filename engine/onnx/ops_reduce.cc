// Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin.
#include <limits>

#include "engine/onnx/ops_util.h"

namespace kiln::onnx {
namespace {

enum class Kind { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

// The axes of a reduce node: an input from opset 13 (ReduceSum) or 18 (the others), an attribute before.
absl::StatusOr<std::optional<std::vector<int64_t>>> ReduceAxes(OpContext& ctx, int64_t input_from) {
  std::vector<int64_t> axes;
  if (ctx.opset() >= input_from) {
    if (ctx.Has(1)) { KILN_ASSIGN_OR_RETURN(axes, ctx.Ints(1)); }
  } else {
    axes = ctx.Ints("axes").value_or(std::vector<int64_t>{});
  }
  if (axes.empty()) {
    if (ctx.Int("noop_with_empty_axes", 0) != 0) return std::optional<std::vector<int64_t>>();
    return std::optional<std::vector<int64_t>>(std::vector<int64_t>{});  // all axes
  }
  return std::optional<std::vector<int64_t>>(axes);
}

Tensor ReduceWith(const Tensor& x, Kind kind, const Axes& ax, bool keep) {
  switch (kind) {
    case Kind::kSum: return x.Sum(ax, keep).Cast(x.dtype());
    case Kind::kMean:
      return x.dtype().IsFloat() ? x.Mean(ax, keep) : x.Mean(ax, keep).Trunc().Cast(x.dtype());
    case Kind::kMax: return x.Max(ax, keep);
    case Kind::kMin: return x.Min(ax, keep);
    case Kind::kProd: return x.Prod(ax, keep).Cast(x.dtype());
    case Kind::kL1: return x.Abs().Sum(ax, keep).Cast(x.dtype());
    case Kind::kL2: {
      const DType f = x.dtype().IsFloat() ? x.dtype() : dtypes::kFloat32;
      return x.Cast(f).Square().Sum(ax, keep).Sqrt().Cast(x.dtype());
    }
    case Kind::kLogSum: return x.Sum(ax, keep).Log();
    case Kind::kLogSumExp: {
      // max-shifted for stability; an all -inf (or empty) slice gives -inf
      Tensor m = x.Max(ax, true);
      Tensor safe = m.IsInf().Where(m.ZerosLike(), m);
      Tensor r = x.Sub(safe).Exp().Sum(ax, true).Log().Add(safe);
      if (!keep) {
        std::vector<int64_t> shape;
        const Shape& full = x.shape();
        std::vector<bool> reduced(full.size(), ax.all());
        for (int64_t a : ax.list()) reduced[a < 0 ? a + x.ndim() : a] = true;
        for (size_t i = 0; i < full.size(); ++i) {
          if (!reduced[i]) shape.push_back(full[i]);
        }
        r = r.Reshape(shape);
      }
      return r;
    }
    case Kind::kSumSquare: return x.Square().Sum(ax, keep).Cast(x.dtype());
  }
  return x;
}

OpImpl Reduce(Kind kind, int64_t input_from) {
  return [kind, input_from](OpContext& ctx) -> absl::StatusOr<std::vector<Value>> {
    ONNX_INPUT(x, 0);
    KILN_ASSIGN_OR_RETURN(auto axes, ReduceAxes(ctx, input_from));
    const bool keep = ctx.Int("keepdims", 1) != 0;
    if (!axes) {  // noop_with_empty_axes: the elementwise part only
      if (kind == Kind::kL1) return One(x.Abs());
      if (kind == Kind::kL2) return One(x.Abs());
      if (kind == Kind::kSumSquare) return One(x.Square());
      if (kind == Kind::kLogSum) return One(InF32(x, [](const Tensor& t) { return t.Log(); }));
      if (kind == Kind::kLogSumExp) return One(x);
      return One(x);
    }
    std::vector<int64_t> list;
    for (int64_t a : *axes) {
      KILN_ASSIGN_OR_RETURN(int64_t n, Axis(ctx, a, x.ndim()));
      if (std::find(list.begin(), list.end(), n) == list.end()) list.push_back(n);
    }
    if (x.ndim() == 0) return One(ReduceWith(x.Reshape({1}), kind, Axes(0), false).Reshape({}));
    Axes ax = list.empty() ? Axes::All() : Axes(absl::Span<const int64_t>(list));
    return One(InF32(x, [&](const Tensor& t) { return ReduceWith(t, kind, ax, keep); }));
  };
}

OpImpl ArgReduce(bool is_max) {
  return [is_max](OpContext& ctx) -> absl::StatusOr<std::vector<Value>> {
    ONNX_INPUT(x, 0);
    KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", 0), x.ndim()));
    const bool keep = ctx.Int("keepdims", 1) != 0;
    const bool last = ctx.Int("select_last_index", 0) != 0;
    auto arg = [&](const Tensor& t) { return is_max ? t.Argmax(axis, keep) : t.Argmin(axis, keep); };
    if (!last) return One(arg(x).Cast(dtypes::kInt64));
    const int64_t n = x.size(axis);
    return One(arg(x.Flip(axis)).Cast(dtypes::kInt64).RSub(n - 1));
  };
}

}  // namespace

void RegisterReduceOps(OpTable* t) {
  const std::vector<std::string> attrs = {"axes", "keepdims", "noop_with_empty_axes"};
  Reg(t, "ReduceSum", 1, kMaxOnnxOpset, attrs, Reduce(Kind::kSum, 13));
  Reg(t, "ReduceMean", 1, kMaxOnnxOpset, attrs, Reduce(Kind::kMean, 18));
  Reg(t, "ReduceMax", 1, kMaxOnnxOpset, attrs, Reduce(Kind::kMax, 18));
  Reg(t, "ReduceMin", 1, kMaxOnnxOpset, attrs, Reduce(Kind::kMin, 18));
  Reg(t, "ReduceProd", 1, kMaxOnnxOpset, attrs, Reduce(Kind::kProd, 18));
  Reg(t, "ReduceL1", 1, kMaxOnnxOpset, attrs, Reduce(Kind::kL1, 18));
  Reg(t, "ReduceL2", 1, kMaxOnnxOpset, attrs, Reduce(Kind::kL2, 18));
  Reg(t, "ReduceLogSum", 1, kMaxOnnxOpset, attrs, Reduce(Kind::kLogSum, 18));
  Reg(t, "ReduceLogSumExp", 1, kMaxOnnxOpset, attrs, Reduce(Kind::kLogSumExp, 18));
  Reg(t, "ReduceSumSquare", 1, kMaxOnnxOpset, attrs, Reduce(Kind::kSumSquare, 18));
  const std::vector<std::string> arg_attrs = {"axis", "keepdims", "select_last_index"};
  Reg(t, "ArgMax", 1, kMaxOnnxOpset, arg_attrs, ArgReduce(true));
  Reg(t, "ArgMin", 1, kMaxOnnxOpset, arg_attrs, ArgReduce(false));
}

}  // namespace kiln::onnx
