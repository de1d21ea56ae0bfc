// Tensor core: state, node building, promotion and broadcasting, casts and graph markers.
#include "engine/tensor/tensor.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/tensor/tensor_internal.h"

namespace kiln {

using tensor_internal::DeviceNode;
using tensor_internal::Invalid;
using tensor_internal::Str;
using tensor_internal::ToVec;

namespace {
const Shape& EmptyShape() {
  static const Shape* s = new Shape();
  return *s;
}
const std::string& EmptyString() {
  static const std::string* s = new std::string();
  return *s;
}
}  // namespace

DType Scalar::DefaultDType() const {
  switch (kind) {
    case Kind::kBool: return dtypes::kBool;
    case Kind::kInt: return dtypes::kDefaultInt;
    case Kind::kFloat: return dtypes::kDefaultFloat;
  }
  return dtypes::kDefaultInt;
}

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

Tensor::Tensor() : status_(absl::FailedPreconditionError("uninitialized Tensor")) {}

Tensor::Tensor(UOpPtr uop, const std::string& device) {
  if (!uop) {
    status_ = absl::InvalidArgumentError("Tensor: null UOp");
  } else if (!uop->has_shape()) {
    status_ = absl::InvalidArgumentError(absl::StrCat("Tensor: a ", std::string(OpName(uop->op())), " node has no shape"));
  } else if (uop->dtype().scalar == ScalarType::kVoid || uop->dtype().is_ptr) {
    status_ = absl::InvalidArgumentError(absl::StrCat("Tensor: dtype ", uop->dtype().Name(), " is not a value dtype"));
  } else {
    uop_ = std::move(uop);
    device_ = DeviceNode(device);
  }
}

Tensor Tensor::FromStatus(absl::Status status) {
  Tensor t;
  t.status_ = status.ok() ? absl::InternalError("Tensor::FromStatus called with OK") : std::move(status);
  return t;
}

Tensor Tensor::Wrap(UOpPtr uop, UOpPtr device) {
  Tensor t;
  t.status_ = absl::OkStatus();
  t.uop_ = std::move(uop);
  t.device_ = std::move(device);
  return t;
}

const Shape& Tensor::shape() const { return uop_ ? uop_->shape() : EmptyShape(); }
DType Tensor::dtype() const { return uop_ ? uop_->dtype() : dtypes::kVoid; }
const std::string& Tensor::device() const { return device_ ? device_->ArgStr() : EmptyString(); }
int64_t Tensor::numel() const { return uop_ ? uop_->Numel() : 0; }

int64_t Tensor::size(int64_t d) const {
  int64_t n = ndim();
  if (d < 0) d += n;
  return d < 0 || d >= n ? 0 : shape()[d];
}

bool Tensor::IsRealized() const {
  if (!uop_) return false;
  const UOp* u = uop_.get();
  while (IsMovement(u->op())) u = u->src(0).get();
  return u->op() == Op::BUFFER;
}

std::string Tensor::ToString() const {
  if (!ok()) return absl::StrCat("Tensor(error: ", status_.ToString(), ")");
  return absl::StrCat("Tensor(shape=", ShapeToString(shape()), ", dtype=", dtype().Name(), ", device=", device(), ")");
}

// ---------------------------------------------------------------------------------------------
// Node building
// ---------------------------------------------------------------------------------------------

Tensor Tensor::Node(Op op, DType dtype, absl::Span<const UOpPtr> src, Arg arg) const {
  absl::StatusOr<UOpPtr> u = UOp::Create(op, dtype, src, std::move(arg));
  if (!u.ok()) return FromStatus(u.status());
  return Wrap(*std::move(u), device_);
}

Tensor Tensor::Node1(Op op, DType dtype, Arg arg) const {
  if (!ok()) return *this;
  return Node(op, dtype, {uop_}, std::move(arg));
}

Tensor Tensor::ConstOf(Scalar value, DType dtype) const {
  Arg arg;
  if (value.IsFloat()) {
    arg = UOp::ConstArg(dtype, value.f);
  } else {
    int64_t v = value.i;
    int bits = dtype.ItemSize() * 8;
    if (dtype.IsInt() && dtype.scalar != ScalarType::kIndex && bits < 64) {
      // wrap to the dtype's width (as a C cast would)
      uint64_t mask = (uint64_t{1} << bits) - 1;
      uint64_t u = static_cast<uint64_t>(v) & mask;
      if (!dtype.IsUnsigned() && (u >> (bits - 1)) != 0) u |= ~mask;
      v = static_cast<int64_t>(u);
    }
    arg = UOp::ConstArg(dtype, v);
  }
  return Wrap(UOp::Make(Op::CONST, dtype, {}, std::move(arg)), device_);
}

Tensor Tensor::WeakScalar(const Scalar& s) const {
  DType xd = dtype();
  DType yd = (xd.IsFloat() || (xd.IsInt() && !s.IsFloat())) ? xd : s.DefaultDType();
  return ConstOf(s, yd);
}

absl::StatusOr<std::pair<Tensor, Tensor>> Tensor::Broadcasted(const Tensor& x, const Operand& y, bool reverse,
                                                              bool match_dtype) {
  if (!x.ok()) return x.status();
  Tensor a = x;
  Tensor b;
  if (y.is_tensor()) {
    b = y.tensor();
    if (!b.ok()) return b.status();
    if (b.device_ != a.device_)
      return absl::InvalidArgumentError(
          absl::StrCat("tensors on different devices: ", a.device(), " and ", b.device()));
  } else {
    b = a.WeakScalar(y.scalar());
  }
  if (match_dtype && a.dtype() != b.dtype()) {
    DType pair[2] = {a.dtype(), b.dtype()};
    std::optional<DType> lub = LeastUpperDType(pair);
    if (!lub) return absl::InvalidArgumentError(absl::StrCat("no common dtype for ", a.dtype().Name(), " and ", b.dtype().Name()));
    a = a.Cast(*lub);
    b = b.Cast(*lub);
  }
  if (reverse) std::swap(a, b);
  KILN_ASSIGN_OR_RETURN(Shape out, BroadcastShapes(a.shape(), b.shape()));
  a = a.BroadcastTo(out);
  b = b.BroadcastTo(out);
  KILN_RETURN_IF_ERROR(tensor_internal::FirstError({&a, &b}));
  return std::make_pair(std::move(a), std::move(b));
}

Tensor Tensor::BroadcastTo(absl::Span<const int64_t> shape) const {
  if (!ok()) return *this;
  const Shape& in = this->shape();
  if (absl::Span<const int64_t>(in) == shape) return *this;
  if (shape.size() < in.size())
    return FromStatus(Invalid("BroadcastTo", "cannot broadcast ", Str(in), " to the lower rank ", Str(shape)));
  size_t lead = shape.size() - in.size();
  IntVec padded(lead, 1);
  padded.insert(padded.end(), in.begin(), in.end());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0 || (padded[i] != shape[i] && padded[i] != 1))
      return FromStatus(Invalid("BroadcastTo", "cannot broadcast ", Str(in), " to ", Str(shape)));
  }
  Tensor r = lead > 0 ? Reshape(padded) : *this;
  if (absl::Span<const int64_t>(r.shape()) == shape) return r;
  return r.Node1(Op::EXPAND, dtype(), ToVec(shape));
}

// ---------------------------------------------------------------------------------------------
// dtype and graph markers
// ---------------------------------------------------------------------------------------------

Tensor Tensor::Cast(DType dtype) const {
  if (!ok() || dtype == this->dtype()) return *this;
  if (dtype.scalar == ScalarType::kVoid || dtype.is_ptr || dtype.count != 1)
    return FromStatus(Invalid("Cast", "cannot cast to ", dtype.Name()));
  return Node1(Op::CAST, dtype);
}

Tensor Tensor::Bitcast(DType dtype) const {
  if (!ok() || dtype == this->dtype()) return *this;
  if (dtype.scalar == ScalarType::kVoid || dtype.scalar == ScalarType::kIndex || dtype.is_ptr || dtype.count != 1)
    return FromStatus(Invalid("Bitcast", "cannot bitcast to ", dtype.Name()));
  if (ndim() == 0 && dtype.ItemSize() != this->dtype().ItemSize())
    return FromStatus(Invalid("Bitcast", "a 0-d tensor cannot change item size (", this->dtype().Name(), " to ",
                              dtype.Name(), ")"));
  int64_t ns = dtype.ItemSize(), os = this->dtype().ItemSize();
  if (ns == os) return Node1(Op::BITCAST, dtype);
  if ((size(-1) * os) % ns != 0)
    return FromStatus(Invalid("Bitcast", "last dim ", size(-1), " of ", this->dtype().Name(), " does not fill whole ",
                              dtype.Name(), " elements"));
  // tinygrad: a BITCAST keeps the item size; other sizes go through unsigned ints of each width, combined (shift +
  // or, little-endian) or split (shift + truncate) along the last dim.
  auto uint_of = [](int64_t bytes) {
    return bytes == 1 ? dtypes::kUInt8 : bytes == 2 ? dtypes::kUInt16 : bytes == 4 ? dtypes::kUInt32 : dtypes::kUInt64;
  };
  Tensor x = Bitcast(uint_of(os));
  IntVec lead(shape().begin(), shape().end() - 1);
  if (ns > os) {
    int64_t r = ns / os;
    IntVec grouped = lead;
    grouped.push_back(size(-1) / r);
    grouped.push_back(r);
    x = x.Reshape(grouped);
    std::vector<std::pair<int64_t, int64_t>> bounds;
    for (int64_t d : grouped) bounds.emplace_back(0, d);
    Tensor acc;
    for (int64_t i = 0; i < r; ++i) {
      bounds.back() = {i, i + 1};
      Tensor part = x.Shrink(bounds).Reshape(IntVec(grouped.begin(), grouped.end() - 1)).Cast(uint_of(ns));
      if (i > 0) part = part.Lshift(8 * os * i);
      acc = i == 0 ? part : acc.BitwiseOr(part);
    }
    return acc.Bitcast(dtype);
  }
  std::vector<Tensor> parts;
  for (int64_t i = 0; i < os / ns; ++i) parts.push_back((i == 0 ? x : x.Rshift(8 * ns * i)).Cast(uint_of(ns)));
  IntVec flat = lead;
  flat.push_back(size(-1) * (os / ns));
  return Stack(parts, -1).Reshape(flat).Bitcast(dtype);
}

Tensor Tensor::Contiguous() const { return Node1(Op::CONTIGUOUS, dtype()); }
Tensor Tensor::Detach() const { return Node1(Op::DETACH, dtype()); }
Tensor Tensor::Rows(const UOpPtr& bound) const {
  if (!ok()) return *this;
  if (bound == nullptr) return FromStatus(absl::InvalidArgumentError("ROWS: no bound Variable"));
  return Node(Op::ROWS, dtype(), {uop_, bound});
}

Tensor Tensor::To(const std::string& device) const {
  if (!ok() || device == this->device()) return *this;
  absl::StatusOr<UOpPtr> u = UOp::Create(Op::COPY, dtype(), {uop_, DeviceNode(device)});
  if (!u.ok()) return FromStatus(u.status());
  return Wrap(*std::move(u), DeviceNode(device));
}

Tensor Tensor::Assign(const Operand& value) {
  if (!ok()) return *this;
  Tensor v;
  if (value.is_tensor()) {
    v = value.tensor();
    if (!v.ok()) {
      *this = v;
      return *this;
    }
    if (v.device_ != device_) {
      *this = FromStatus(Invalid("Assign", "value is on ", v.device(), ", target on ", device()));
      return *this;
    }
    if (v.dtype() != dtype()) {
      *this = FromStatus(Invalid("Assign", "value dtype ", v.dtype().Name(), " differs from target dtype ",
                                 dtype().Name()));
      return *this;
    }
  } else {
    v = ConstOf(value.scalar(), dtype());
  }
  v = v.BroadcastTo(shape());
  if (!v.ok()) {
    *this = v;
    return *this;
  }
  *this = Node(Op::ASSIGN, dtype(), {uop_, v.uop_});
  return *this;
}

namespace tensor_internal {

bool Reaches(const Tensor& t, absl::FunctionRef<bool(const UOp*)> through, absl::FunctionRef<bool(const UOp*)> hit) {
  std::vector<const UOp*> stack = {t.uop().get()};
  absl::flat_hash_set<const UOp*> seen;
  while (!stack.empty()) {
    const UOp* u = stack.back();
    stack.pop_back();
    if (!seen.insert(u).second) continue;
    if (hit(u)) return true;
    if (!through(u)) continue;
    for (const UOpPtr& s : u->src()) stack.push_back(s.get());
  }
  return false;
}

}  // namespace tensor_internal
}  // namespace kiln
