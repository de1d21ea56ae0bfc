// Reductions: REDUCE_AXIS (ADD, MUL, MAX) with keepdim handling, and the ops built on them (tinygrad).
#include <algorithm>
#include <limits>

#include "engine/base/status.h"
#include "engine/tensor/tensor.h"
#include "engine/tensor/tensor_internal.h"

namespace kiln {

using tensor_internal::Invalid;
using tensor_internal::NormAxis;
using tensor_internal::ToVec;

namespace {

// Sorted, unique, non-negative axes; all axes for Axes::All().
absl::StatusOr<IntVec> ResolveAxes(const char* op, const Axes& axes, int64_t ndim) {
  IntVec out;
  if (axes.all()) {
    for (int64_t i = 0; i < ndim; ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : axes.list()) {
    KILN_ASSIGN_OR_RETURN(int64_t n, NormAxis(op, a, ndim));
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) return Invalid(op, "duplicate dim in the reduction axes");
  return out;
}

}  // namespace

Tensor Tensor::ReduceOp(Op op, const Axes& axes, bool keepdim) const {
  if (!ok()) return *this;
  auto ax = ResolveAxes("reduce", axes, ndim());
  if (!ax.ok()) return FromStatus(ax.status());
  IntVec out, kept = ToVec(shape());
  for (int64_t i = 0; i < ndim(); ++i) {
    if (!std::binary_search(ax->begin(), ax->end(), i)) out.push_back(shape()[i]);
    else kept[i] = 1;
  }
  if (numel() == 0 && !ax->empty()) {
    // Nothing to reduce (tinygrad): the result is the op's identity; no kernel reads the empty input.
    Scalar identity = op == Op::ADD   ? Scalar(0)
                      : op == Op::MUL ? Scalar(1)
                      : dtype().IsFloat() ? Scalar(-std::numeric_limits<double>::infinity())
                      : dtype().IsBool()  ? Scalar(false)
                                          : Scalar(DTypeMin(dtype()));
    return Full(keepdim ? kept : out, identity, dtype(), device());
  }
  Tensor r = ax->empty() ? *this : Node1(Op::REDUCE_AXIS, dtype(), ReduceArg{op, *ax});
  if (keepdim || ax->empty()) return r;
  return r.Reshape(out);
}

absl::StatusOr<int64_t> Tensor::ReducedCount(const Axes& axes) const {
  KILN_ASSIGN_OR_RETURN(IntVec ax, ResolveAxes("reduce", axes, ndim()));
  int64_t n = 1;
  for (int64_t a : ax) n *= shape()[a];
  return n;
}

Tensor Tensor::Sum(const Axes& axes, bool keepdim, std::optional<DType> dtype) const {
  if (!ok()) return *this;
  Tensor r = Cast(dtype ? *dtype : SumAccDType(this->dtype())).ReduceOp(Op::ADD, axes, keepdim);
  bool low_float = this->dtype() == dtypes::kFloat16 || this->dtype() == dtypes::kBFloat16;
  return !dtype && low_float ? r.Cast(this->dtype()) : r;  // half sums accumulate in float32
}

Tensor Tensor::Prod(const Axes& axes, bool keepdim, std::optional<DType> dtype) const {
  return Cast(dtype ? *dtype : this->dtype()).ReduceOp(Op::MUL, axes, keepdim);
}

Tensor Tensor::Max(const Axes& axes, bool keepdim) const { return ReduceOp(Op::MAX, axes, keepdim); }

Tensor Tensor::Min(const Axes& axes, bool keepdim) const {
  return Inverse().Max(axes, keepdim).Inverse();  // min(x) = -max(-x) (~max(~x) for ints)
}

Tensor Tensor::Mean(const Axes& axes, bool keepdim) const {
  if (!ok()) return *this;
  auto n = ReducedCount(axes);
  if (!n.ok()) return FromStatus(n.status());
  DType out = dtype().IsFloat() ? dtype() : dtypes::kDefaultFloat;
  return Cast(SumAccDType(dtype())).Sum(axes, keepdim).Div(*n).Cast(out);
}

Tensor Tensor::Var(const Axes& axes, bool keepdim, double correction) const {
  if (!ok()) return *this;
  auto n = ReducedCount(axes);
  if (!n.ok()) return FromStatus(n.status());
  Tensor sq = Sub(Mean(axes, true)).Square();
  return sq.Sum(axes, keepdim).Div(std::max(0.0, static_cast<double>(*n) - correction));
}

Tensor Tensor::Std(const Axes& axes, bool keepdim, double correction) const {
  return Var(axes, keepdim, correction).Sqrt();
}

Tensor Tensor::Any(const Axes& axes, bool keepdim) const { return Cast(dtypes::kBool).Max(axes, keepdim); }
Tensor Tensor::All(const Axes& axes, bool keepdim) const { return LogicalNot().Any(axes, keepdim).LogicalNot(); }

Tensor Tensor::Argmax(std::optional<int64_t> axis, bool keepdim) const {
  if (!ok()) return *this;
  if (!axis) return Flatten().Argmax(0, false);
  auto ax = NormAxis("Argmax", *axis, ndim());
  if (!ax.ok()) return FromStatus(ax.status());
  // tinygrad: (x == max) * [n, n-1, ..., 1] along the axis; n - max of that is the first argmax
  int64_t n = shape()[*ax];
  IntVec rshape(ndim() - *ax, 1);
  rshape[0] = n;
  Tensor rev = Arange(n, 0, -1, dtypes::kInt32, device()).Reshape(rshape);
  // A NaN counts as the maximum, as in numpy and PyTorch: with the max NaN, x == max held nowhere and the index came
  // out as n, one past the axis (a gather by it read out of bounds).
  Tensor hit = Eq(Max(*ax, true));
  if (dtype().IsFloat()) hit = hit.LogicalOr(Ne(*this));
  Tensor idx = hit.Mul(rev);
  return idx.Max(*ax, keepdim).RSub(n).Cast(dtypes::kInt32);
}

Tensor Tensor::Argmin(std::optional<int64_t> axis, bool keepdim) const { return Inverse().Argmax(axis, keepdim); }

}  // namespace kiln
