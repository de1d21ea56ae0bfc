// Helpers shared by the engine/tensor source files. Not part of the public API.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "engine/tensor/tensor.h"

namespace kiln::tensor_internal {

// "(2, 3)" for any int span.
inline std::string Str(absl::Span<const int64_t> v) { return absl::StrCat("(", absl::StrJoin(v, ", "), ")"); }

inline IntVec ToVec(absl::Span<const int64_t> v) { return IntVec(v.begin(), v.end()); }

inline int64_t ShapeProd(absl::Span<const int64_t> v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

// InvalidArgument "<op>: <parts...>".
template <typename... Parts>
absl::Status Invalid(const char* op, const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", parts...));
}

// Resolves a possibly negative dim against `ndim` (dims 0..ndim-1).
inline absl::StatusOr<int64_t> NormAxis(const char* op, int64_t axis, int64_t ndim) {
  int64_t a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim)
    return Invalid(op, "dim ", axis, " out of range for a tensor of rank ", ndim);
  return a;
}

// The status of the first error tensor among `ts` (OK if none).
inline absl::Status FirstError(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t != nullptr && !t->ok()) return t->status();
  }
  return absl::OkStatus();
}

// The interned DEVICE node for a device name.
inline UOpPtr DeviceNode(const std::string& name) {
  return UOp::Make(Op::DEVICE, dtypes::kVoid, {}, std::string(name));
}

// Whether `d` can be a tensor element dtype (scalar, not void/index/pointer).
inline bool IsValueDType(DType d) {
  return d.count == 1 && !d.is_ptr && d.scalar != ScalarType::kVoid && d.scalar != ScalarType::kIndex;
}

// InvalidArgument unless every dim is >= 0.
inline absl::Status CheckShape(const char* op, absl::Span<const int64_t> shape) {
  for (int64_t d : shape) {
    if (d < 0) return Invalid(op, "negative dim in shape ", Str(shape));
  }
  return absl::OkStatus();
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether `hit` accepts some node of `t`'s graph reached from t's own node through nodes that `through` accepts (each
// node tested by `hit` first; a node neither accepts ends its path).
bool Reaches(const Tensor& t, absl::FunctionRef<bool(const UOp*)> through, absl::FunctionRef<bool(const UOp*)> hit);

// The Winograd form of a stride-1, undilated, ungrouped 2-D float32 conv of x [B, Ci, H, W] with w [Co, Ci, r, r]
// (r = 3 or 5; `pads` per dim of x), without bias: [B, Co, OH, OW] (a view of a channels-last buffer), or nullopt
// where it would not pay (few channels or little work) or WINO=0 (winograd.cc).
std::optional<Tensor> WinogradConv2d(const Tensor& x, const Tensor& w,
                                     const std::vector<std::pair<int64_t, int64_t>>& pads,
                                     std::optional<DType> acc_dtype);

}  // namespace kiln::tensor_internal
