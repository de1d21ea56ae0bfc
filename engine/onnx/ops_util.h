// Helpers shared by the ops_*.cc files (internal to engine/onnx).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/onnx/op_registry.h"
#include "engine/onnx/runner.h"
#include "engine/tensor/tensor.h"

namespace kiln::onnx {

// `Tensor var = input i` or return the error.
#define ONNX_INPUT(var, i) KILN_ASSIGN_OR_RETURN(Tensor var, ctx.T(i))

inline std::vector<Value> One(Tensor t) { return {Value::Of(std::move(t))}; }

// Resolves a possibly negative axis against `rank`.
inline absl::StatusOr<int64_t> Axis(const OpContext& ctx, int64_t axis, int64_t rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) return ctx.Error(absl::StrCat("axis ", axis, " is out of range for rank ", rank));
  return a;
}

// An axis in [-rank, rank] (Flatten, the opset < 13 softmax family): negative values count from `rank`.
inline absl::StatusOr<int64_t> SplitAxis(const OpContext& ctx, int64_t axis, int64_t rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a > rank) return ctx.Error(absl::StrCat("axis ", axis, " is out of range for rank ", rank));
  return a;
}

inline bool IsLowFloat(DType d) { return d == dtypes::kFloat16 || d == dtypes::kBFloat16; }

// Runs `f` in float32 for float16/bfloat16 inputs (as the reference does) and casts back.
template <typename F>
Tensor InF32(const Tensor& x, F f) {
  if (IsLowFloat(x.dtype())) return f(x.Cast(dtypes::kFloat32)).Cast(x.dtype());
  return f(x);
}

// log(1 + e^x) = max(x, 0) + log(1 + e^-|x|): e^x overflowed to inf above x = 88.7 (Softplus(100) was inf, not 100).
// The Softplus op, Mish, and the recurrent ops' Softplus activation.
inline Tensor Softplus(const Tensor& t) { return t.Maximum(0.0).Add(t.Abs().Neg().Exp().Add(1.0).Log()); }

// Shape as a vector.
inline std::vector<int64_t> Dims(const Tensor& t) { return std::vector<int64_t>(t.shape().begin(), t.shape().end()); }

// numpy broadcast of two shapes (error when incompatible).
absl::StatusOr<std::vector<int64_t>> BroadcastShape(const OpContext& ctx, const std::vector<int64_t>& a,
                                                    const std::vector<int64_t>& b);

// ONNX pads [x1_begin, x2_begin, ..., x1_end, x2_end, ...] -> per-dim (before, after) pairs.
std::vector<std::pair<int64_t, int64_t>> PadPairs(const std::vector<int64_t>& pads);
// sum_k (a - za)(b - zb) over 8-bit a and b in int32 (MatMulInteger; QLinearMatMul's accumulator), computed as the
// plain product of a and b minus zero-point terms (ops_math.cc). za: scalar or per row of a, zb: scalar or per column
// of b; absent means 0.
Tensor IntegerMatmul(Tensor a, const Tensor& b, const std::optional<Tensor>& za, const std::optional<Tensor>& zb);

}  // namespace kiln::onnx
