// Tensor creation: Empty (a fresh BUFFER), constants (CONST reshaped/expanded), Arange and Eye built
// from constants with PAD/EXPAND/SHRINK only (no reduction, no host data).
#include <atomic>
#include <cmath>

#include "engine/tensor/tensor.h"
#include "engine/tensor/tensor_internal.h"

namespace kiln {

using tensor_internal::CheckShape;
using tensor_internal::DeviceNode;
using tensor_internal::Invalid;
using tensor_internal::IsValueDType;
using tensor_internal::ShapeProd;

namespace {
// UNIQUE ids of buffers created by Tensor::Empty. They start at 2^62 so that they never collide with
// the ids engine/realize gives the buffers it creates.
std::atomic<int64_t> g_next_unique{int64_t{1} << 62};
}  // namespace

Tensor Tensor::Empty(absl::Span<const int64_t> shape, DType dtype, const std::string& device) {
  if (absl::Status st = CheckShape("Empty", shape); !st.ok()) return FromStatus(st);
  if (!IsValueDType(dtype)) return FromStatus(Invalid("Empty", "invalid dtype ", dtype.Name()));
  UOpPtr uniq = UOp::Make(Op::UNIQUE, dtypes::kVoid, {}, g_next_unique.fetch_add(1));
  UOpPtr dev = DeviceNode(device);
  absl::StatusOr<UOpPtr> buf = UOp::Create(Op::BUFFER, dtype, {uniq, dev}, ShapeProd(shape));
  if (!buf.ok()) return FromStatus(buf.status());
  return Wrap(*std::move(buf), dev).Reshape(shape);
}

Tensor Tensor::Full(absl::Span<const int64_t> shape, Scalar value, std::optional<DType> dtype,
                    const std::string& device) {
  if (absl::Status st = CheckShape("Full", shape); !st.ok()) return FromStatus(st);
  DType dt = dtype.value_or(value.DefaultDType());
  if (!IsValueDType(dt)) return FromStatus(Invalid("Full", "invalid dtype ", dt.Name()));
  return Wrap(nullptr, DeviceNode(device)).ConstOf(value, dt).BroadcastTo(shape);
}

Tensor Tensor::Zeros(absl::Span<const int64_t> shape, DType dtype, const std::string& device) {
  return Full(shape, 0, dtype, device);
}

Tensor Tensor::Ones(absl::Span<const int64_t> shape, DType dtype, const std::string& device) {
  return Full(shape, 1, dtype, device);
}

Tensor Tensor::FullLike(Scalar value, std::optional<DType> dtype) const {
  if (!ok()) return *this;
  return Full(shape(), value, dtype.value_or(this->dtype()), device());
}
Tensor Tensor::ZerosLike(std::optional<DType> dtype) const { return FullLike(0, dtype); }
Tensor Tensor::OnesLike(std::optional<DType> dtype) const { return FullLike(1, dtype); }

Tensor Tensor::Arange(Scalar stop) { return Arange(0, stop, 1); }

Tensor Tensor::Arange(Scalar start, Scalar stop, Scalar step, std::optional<DType> dtype, const std::string& device) {
  bool any_float = start.IsFloat() || stop.IsFloat() || step.IsFloat();
  DType dt = dtype.value_or(any_float ? dtypes::kDefaultFloat : dtypes::kDefaultInt);
  if (!IsValueDType(dt)) return FromStatus(Invalid("Arange", "invalid dtype ", dt.Name()));
  if (step.AsDouble() == 0) return FromStatus(Invalid("Arange", "step cannot be 0"));
  int64_t n = 0;
  if (!any_float) {
    int64_t a = start.i, b = stop.i, s = step.i;
    if (s > 0 && b > a) n = (b - a + s - 1) / s;
    if (s < 0 && a > b) n = (a - b - s - 1) / -s;
  } else {
    double len = std::ceil((stop.AsDouble() - start.AsDouble()) / step.AsDouble());
    if (!std::isfinite(len) || len > 9.0e15) return FromStatus(Invalid("Arange", "invalid length"));
    n = len > 0 ? static_cast<int64_t>(len) : 0;
  }
  if (n == 0) return Full({0}, 0, dt, device);
  // index i as a sum of bit planes: i = sum_j bit_j * 2^(k-1-j) over a (2, 2, ..., 2) view, each
  // plane a padded constant [0, 2^(k-1-j)] expanded along the other dims; then flatten and cut to n.
  DType idt = n <= (int64_t{1} << 31) ? dtypes::kInt32 : dtypes::kInt64;
  int k = 0;
  while ((int64_t{1} << k) < n) ++k;
  Tensor idx = Full({1}, 0, idt, device);
  if (k > 0) {
    IntVec full(k, 2);
    std::optional<Tensor> acc;
    for (int j = 0; j < k; ++j) {
      IntVec pshape(k, 1);
      pshape[j] = 2;
      Tensor plane = Full({1}, int64_t{1} << (k - 1 - j), idt, device).Pad({{1, 0}}).Reshape(pshape).Expand(full);
      acc = acc ? acc->Add(plane) : plane;
    }
    idx = acc->Reshape({int64_t{1} << k}).Shrink({{0, n}});
  }
  Tensor v = idx.Cast(dt.IsFloat() ? dt : (dt.IsInt() ? dt : idt));
  if (step.AsDouble() != 1) v = v.Mul(step);
  if (start.AsDouble() != 0) v = v.Add(start);
  return v.Cast(dt);
}

Tensor Tensor::Eye(int64_t n, std::optional<int64_t> m, DType dtype, const std::string& device) {
  int64_t cols = m.value_or(n);
  if (n < 0 || cols < 0) return FromStatus(Invalid("Eye", "negative size (", n, ", ", cols, ")"));
  if (n == 0 || cols == 0) return Zeros({n, cols}, dtype, device);
  // tinygrad: ones (n, 1) padded to (n, n+1), flattened and cut to n*n: the ones land on the diagonal; then
  // columns are padded or cut to m (cutting the flat (n, m+1) layout to n*m is wrong when n > m)
  Tensor sq = Ones({n, 1}, dtype, device).Pad({{0, 0}, {0, n}}).Flatten().Shrink({{0, n * n}}).Reshape({n, n});
  return cols >= n ? sq.Pad({{0, 0}, {0, cols - n}}) : sq.Shrink({{0, n}, {0, cols}});
}

}  // namespace kiln
