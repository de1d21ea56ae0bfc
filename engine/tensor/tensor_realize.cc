// Realization and host data for Tensor: the only part of engine/tensor that calls engine/realize
// (built as kiln_tensor_realize, so kiln_tensor links without it).
#include "engine/base/status.h"
#include "engine/realize/realize.h"
#include "engine/tensor/tensor.h"
#include "engine/tensor/tensor_internal.h"

namespace kiln {

using tensor_internal::CheckShape;
using tensor_internal::Invalid;
using tensor_internal::IsValueDType;

namespace {
// A BUFFER, or a RESHAPE of one, holding exactly the tensor's elements in row-major order.
bool IsPlainBuffer(const UOpPtr& u) {
  const UOp* b = u->op() == Op::RESHAPE ? u->src(0).get() : u.get();
  return b->op() == Op::BUFFER && b->Numel() == u->Numel();
}
}  // namespace

Tensor Tensor::FromHost(const void* data, DType dtype, absl::Span<const int64_t> shape, const std::string& device) {
  return FromHostBytes(data, std::nullopt, dtype, shape, device);
}

Tensor Tensor::FromHostPrefix(const void* data, size_t nbytes, DType dtype, absl::Span<const int64_t> shape,
                              const std::string& device) {
  return FromHostBytes(data, nbytes, dtype, shape, device);
}

Tensor Tensor::FromHostBytes(const void* data, std::optional<size_t> nbytes, DType dtype,
                             absl::Span<const int64_t> shape, const std::string& device) {
  if (absl::Status st = CheckShape("FromHost", shape); !st.ok()) return FromStatus(st);
  if (!IsValueDType(dtype)) return FromStatus(Invalid("FromHost", "invalid dtype ", dtype.Name()));
  absl::StatusOr<UOpPtr> u = ::kiln::FromHost(data, dtype, Shape(shape.begin(), shape.end()), device, nbytes);
  if (!u.ok()) return FromStatus(u.status());
  return Tensor(*std::move(u), device);
}

absl::Status Tensor::Realize() {
  if (!ok()) return status_;
  KILN_ASSIGN_OR_RETURN(std::vector<UOpPtr> out, ::kiln::Realize(absl::Span<const UOpPtr>(&uop_, 1)));
  if (out.size() != 1 || !out[0]) return absl::InternalError("Realize: realize returned no value");
  uop_ = std::move(out[0]);
  return absl::OkStatus();
}

absl::Status Tensor::Realize(absl::Span<Tensor* const> tensors) {
  std::vector<UOpPtr> roots;
  for (Tensor* t : tensors) {
    if (!t->ok()) return t->status();
    roots.push_back(t->uop_);
  }
  KILN_ASSIGN_OR_RETURN(std::vector<UOpPtr> out, ::kiln::Realize(roots));
  if (out.size() != roots.size()) return absl::InternalError("Realize: wrong number of realized values");
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i]->uop_ = std::move(out[i]);
  return absl::OkStatus();
}

absl::Status Tensor::CopyToHost(void* dst, size_t nbytes) const { return CopyOut(dst, nbytes, /*prefix=*/false); }

absl::Status Tensor::CopyPrefixToHost(void* dst, size_t nbytes) const { return CopyOut(dst, nbytes, /*prefix=*/true); }

absl::Status Tensor::CopyOut(void* dst, size_t nbytes, bool prefix) const {
  if (!ok()) return status_;
  Tensor t = *this;
  KILN_RETURN_IF_ERROR(t.Realize());
  if (!IsPlainBuffer(t.uop_)) {  // a realized view that is not row-major: copy it out first
    t = t.Contiguous();
    KILN_RETURN_IF_ERROR(t.Realize());
  }
  return ::kiln::ToHost(t.uop_, dst, nbytes, prefix);
}

absl::Status Tensor::ReadInto(void* dst, size_t nbytes, DType want) const {
  if (!ok()) return status_;
  if (dtype() != want)
    return Invalid("ToVector", "the tensor's dtype is ", dtype().Name(), ", not ", want.Name(), " (Cast first)");
  return CopyToHost(dst, nbytes);
}

}  // namespace kiln
