// Movement ops: reshape, permute, expand, pad, shrink, flip, and what is built from them (slicing,
// squeeze, flatten, cat, stack, repeat, gather). No-op movements build no node.
#include <algorithm>
#include <cmath>
#include <optional>

#include "engine/base/status.h"
#include "engine/tensor/tensor.h"
#include "engine/tensor/tensor_internal.h"

namespace kiln {

using tensor_internal::CeilDiv;
using tensor_internal::FirstError;
using tensor_internal::Invalid;
using tensor_internal::NormAxis;
using tensor_internal::ShapeProd;
using tensor_internal::Str;
using tensor_internal::ToVec;

Tensor Tensor::Reshape(absl::Span<const int64_t> shape) const {
  if (!ok()) return *this;
  IntVec out = ToVec(shape);
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) return FromStatus(Invalid("Reshape", "only one dim can be -1 in ", Str(shape)));
      infer = static_cast<int64_t>(i);
    } else if (out[i] < 0) {
      return FromStatus(Invalid("Reshape", "negative dim in ", Str(shape)));
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0)
      return FromStatus(Invalid("Reshape", "cannot reshape ", Str(this->shape()), " to ", Str(shape)));
    out[infer] = numel() / known;
  }
  if (ShapeProd(out) != numel())
    return FromStatus(Invalid("Reshape", "cannot reshape ", Str(this->shape()), " (", numel(), " elements) to ",
                              Str(out), " (", ShapeProd(out), " elements)"));
  if (absl::Span<const int64_t>(out) == absl::Span<const int64_t>(this->shape())) return *this;
  return Node1(Op::RESHAPE, dtype(), std::move(out));
}

Tensor Tensor::Permute(absl::Span<const int64_t> order) const {
  if (!ok()) return *this;
  if (static_cast<int64_t>(order.size()) != ndim())
    return FromStatus(Invalid("Permute", "order ", Str(order), " does not have rank ", ndim()));
  IntVec p;
  std::vector<bool> seen(ndim(), false);
  bool identity = true;
  for (int64_t o : order) {
    auto a = NormAxis("Permute", o, ndim());
    if (!a.ok()) return FromStatus(a.status());
    if (seen[*a]) return FromStatus(Invalid("Permute", "repeated dim in ", Str(order)));
    seen[*a] = true;
    identity = identity && *a == static_cast<int64_t>(p.size());
    p.push_back(*a);
  }
  if (identity) return *this;
  return Node1(Op::PERMUTE, dtype(), std::move(p));
}

Tensor Tensor::Transpose(int64_t dim0, int64_t dim1) const {
  if (!ok()) return *this;
  auto a = NormAxis("Transpose", dim0, ndim());
  auto b = NormAxis("Transpose", dim1, ndim());
  if (!a.ok()) return FromStatus(a.status());
  if (!b.ok()) return FromStatus(b.status());
  IntVec order;
  for (int64_t i = 0; i < ndim(); ++i) order.push_back(i);
  std::swap(order[*a], order[*b]);
  return Permute(order);
}

Tensor Tensor::Expand(absl::Span<const int64_t> shape) const {
  if (!ok()) return *this;
  if (static_cast<int64_t>(shape.size()) < ndim())
    return FromStatus(Invalid("Expand", "cannot expand ", Str(this->shape()), " to the lower rank ", Str(shape)));
  size_t lead = shape.size() - ndim();
  IntVec out = ToVec(shape);
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (i < lead) return FromStatus(Invalid("Expand", "-1 is not allowed for a new leading dim in ", Str(shape)));
      out[i] = this->shape()[i - lead];
    }
  }
  Tensor r = BroadcastTo(out);
  if (!r.ok()) return FromStatus(Invalid("Expand", "cannot expand ", Str(this->shape()), " to ", Str(shape)));
  return r;
}

Tensor Tensor::Pad(absl::Span<const std::pair<int64_t, int64_t>> padding, Scalar value) const {
  if (!ok()) return *this;
  if (static_cast<int64_t>(padding.size()) != ndim())
    return FromStatus(Invalid("Pad", "need one (before, after) pair per dim (", ndim(), "), got ", padding.size()));
  // negative padding shrinks first
  std::vector<std::pair<int64_t, int64_t>> bounds;
  IntVec flat;
  bool any_neg = false, any_pad = false;
  for (int64_t i = 0; i < ndim(); ++i) {
    auto [b, a] = padding[i];
    int64_t n = shape()[i];
    int64_t lo = b < 0 ? -b : 0, hi = a < 0 ? n + a : n;
    if (lo > hi) return FromStatus(Invalid("Pad", "negative padding removes more than dim ", i, " of size ", n));
    any_neg = any_neg || b < 0 || a < 0;
    bounds.emplace_back(lo, hi);
    flat.push_back(std::max<int64_t>(b, 0));
    flat.push_back(std::max<int64_t>(a, 0));
    any_pad = any_pad || b > 0 || a > 0;
  }
  Tensor x = any_neg ? Shrink(bounds) : *this;
  if (!any_pad) return x;
  Tensor padded = x.Node1(Op::PAD, dtype(), flat);
  if (!value.IsFloat() ? value.i == 0 : (value.f == 0.0 && !std::signbit(value.f))) return padded;
  // padded elements are 0; select `value` there with a padded all-true mask
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (size_t i = 0; i < flat.size(); i += 2) pairs.emplace_back(flat[i], flat[i + 1]);
  return x.FullLike(true, dtypes::kBool).Pad(pairs).Where(padded, value);
}

Tensor Tensor::Shrink(absl::Span<const std::pair<int64_t, int64_t>> bounds) const {
  if (!ok()) return *this;
  if (static_cast<int64_t>(bounds.size()) != ndim())
    return FromStatus(Invalid("Shrink", "need one (start, end) pair per dim (", ndim(), "), got ", bounds.size()));
  IntVec flat;
  bool full = true;
  for (int64_t i = 0; i < ndim(); ++i) {
    auto [s, e] = bounds[i];
    if (s < 0 || e < s || e > shape()[i])
      return FromStatus(Invalid("Shrink", "range [", s, ", ", e, ") out of bounds for dim ", i, " of size ", shape()[i]));
    full = full && s == 0 && e == shape()[i];
    flat.push_back(s);
    flat.push_back(e);
  }
  if (full) return *this;
  return Node1(Op::SHRINK, dtype(), std::move(flat));
}

Tensor Tensor::Flip(const Axes& axes) const {
  if (!ok()) return *this;
  IntVec flags(ndim(), 0);
  IntVec list;
  if (axes.all()) {
    for (int64_t i = 0; i < ndim(); ++i) list.push_back(i);
  } else {
    list = axes.list();
  }
  bool any = false;
  for (int64_t a : list) {
    auto n = NormAxis("Flip", a, ndim());
    if (!n.ok()) return FromStatus(n.status());
    if (flags[*n]) return FromStatus(Invalid("Flip", "repeated dim ", a));
    flags[*n] = 1;
    any = true;
  }
  if (!any) return *this;
  return Node1(Op::FLIP, dtype(), std::move(flags));
}

Tensor Tensor::Slice(absl::Span<const SliceArg> args) const {
  if (!ok()) return *this;
  int64_t consumed = 0;
  for (const SliceArg& a : args) consumed += a.kind != SliceArg::Kind::kNewAxis;
  if (consumed > ndim())
    return FromStatus(Invalid("Slice", "too many indices (", consumed, ") for a tensor of rank ", ndim()));
  std::vector<std::pair<int64_t, int64_t>> bounds;
  IntVec flip, stride(ndim(), 1), final_shape;
  for (int64_t d = 0; d < ndim(); ++d) bounds.emplace_back(0, shape()[d]);
  int64_t d = 0;
  auto clamp = [](int64_t v, int64_t lo, int64_t hi) { return std::min(std::max(v, lo), hi); };
  std::vector<int64_t> out_dims;  // input dim index for kept dims, -1 for new axes
  for (const SliceArg& a : args) {
    if (a.kind == SliceArg::Kind::kNewAxis) {
      out_dims.push_back(-1);
      continue;
    }
    int64_t n = shape()[d];
    if (a.kind == SliceArg::Kind::kIndex) {
      int64_t i = a.index < 0 ? a.index + n : a.index;
      if (i < 0 || i >= n)
        return FromStatus(Invalid("Slice", "index ", a.index, " out of range for dim ", d, " of size ", n));
      bounds[d] = {i, i + 1};
    } else {
      if (a.step == 0) return FromStatus(Invalid("Slice", "step cannot be 0"));
      if (a.step > 0) {
        auto norm = [&](int64_t v) { return v < 0 ? std::max<int64_t>(v + n, 0) : std::min(v, n); };
        int64_t lo = a.start ? norm(*a.start) : 0, hi = a.stop ? norm(*a.stop) : n;
        bounds[d] = {lo, std::max(lo, hi)};
        stride[d] = a.step;
      } else {
        auto norm = [&](int64_t v) { return clamp(v < 0 ? v + n : v, -1, n - 1); };
        int64_t s = a.start ? norm(*a.start) : n - 1, e = a.stop ? norm(*a.stop) : -1;
        bounds[d] = s <= e ? std::make_pair<int64_t, int64_t>(0, 0) : std::make_pair(e + 1, s + 1);
        if (s > e) flip.push_back(d);
        stride[d] = -a.step;
      }
      out_dims.push_back(d);
    }
    ++d;
  }
  for (; d < ndim(); ++d) out_dims.push_back(d);
  Tensor x = Shrink(bounds).Flip(Axes(absl::Span<const int64_t>(flip)));
  // strides: pad each strided dim to a multiple of its step, split it as (len, step), keep step 0
  bool strided = std::any_of(stride.begin(), stride.end(), [](int64_t s) { return s > 1; });
  if (strided && x.ok()) {
    std::vector<std::pair<int64_t, int64_t>> pads, keep;
    IntVec split, merged;
    for (int64_t i = 0; i < ndim(); ++i) {
      int64_t len = x.shape()[i], s = stride[i];
      if (s == 1) {
        pads.emplace_back(0, 0);
        split.push_back(len);
        keep.emplace_back(0, len);
        merged.push_back(len);
        continue;
      }
      int64_t o = CeilDiv(len, s);
      pads.emplace_back(0, o * s - len);
      split.push_back(o);
      split.push_back(s);
      keep.emplace_back(0, o);
      keep.emplace_back(0, 1);
      merged.push_back(o);
    }
    x = x.Pad(pads).Reshape(split).Shrink(keep).Reshape(merged);
  }
  if (!x.ok()) return x;
  for (int64_t od : out_dims) final_shape.push_back(od < 0 ? 1 : x.shape()[od]);
  return x.Reshape(final_shape);
}

Tensor Tensor::Squeeze(std::optional<int64_t> dim) const {
  if (!ok()) return *this;
  IntVec out;
  if (!dim) {
    for (int64_t s : shape())
      if (s != 1) out.push_back(s);
    return Reshape(out);
  }
  if (ndim() == 0 && (*dim == 0 || *dim == -1)) return *this;
  auto a = NormAxis("Squeeze", *dim, ndim());
  if (!a.ok()) return FromStatus(a.status());
  if (shape()[*a] != 1) return *this;
  out = ToVec(shape());
  out.erase(out.begin() + *a);
  return Reshape(out);
}

Tensor Tensor::Unsqueeze(int64_t dim) const {
  if (!ok()) return *this;
  auto a = NormAxis("Unsqueeze", dim, ndim() + 1);
  if (!a.ok()) return FromStatus(a.status());
  IntVec out = ToVec(shape());
  out.insert(out.begin() + *a, 1);
  return Reshape(out);
}

Tensor Tensor::Flatten(int64_t start_dim, int64_t end_dim) const {
  if (!ok()) return *this;
  if (ndim() == 0) return Reshape({1});
  auto s = NormAxis("Flatten", start_dim, ndim());
  auto e = NormAxis("Flatten", end_dim, ndim());
  if (!s.ok()) return FromStatus(s.status());
  if (!e.ok()) return FromStatus(e.status());
  if (*e < *s) return FromStatus(Invalid("Flatten", "end dim ", end_dim, " is before start dim ", start_dim));
  IntVec out(shape().begin(), shape().begin() + *s);
  out.push_back(ShapeProd(absl::Span<const int64_t>(shape()).subspan(*s, *e - *s + 1)));
  out.insert(out.end(), shape().begin() + *e + 1, shape().end());
  return Reshape(out);
}

Tensor Tensor::Cat(absl::Span<const Tensor> tensors, int64_t dim) {
  if (tensors.empty()) return FromStatus(Invalid("Cat", "no tensors"));
  std::vector<DType> dts;
  for (const Tensor& t : tensors) {
    if (!t.ok()) return t;
    dts.push_back(t.dtype());
  }
  const Tensor& first = tensors[0];
  if (first.ndim() == 0) return FromStatus(Invalid("Cat", "zero-dimensional tensors cannot be concatenated"));
  auto ax = NormAxis("Cat", dim, first.ndim());
  if (!ax.ok()) return FromStatus(ax.status());
  std::optional<DType> dt = LeastUpperDType(dts);
  if (!dt) return FromStatus(Invalid("Cat", "no common dtype"));
  int64_t total = 0;
  for (const Tensor& t : tensors) {
    if (t.device_ != first.device_) return FromStatus(Invalid("Cat", "tensors on different devices"));
    bool same = t.ndim() == first.ndim();
    for (int64_t i = 0; same && i < t.ndim(); ++i) same = i == *ax || t.shape()[i] == first.shape()[i];
    if (!same)
      return FromStatus(Invalid("Cat", "shapes ", Str(first.shape()), " and ", Str(t.shape()),
                                " differ outside dim ", *ax));
    total += t.shape()[*ax];
  }
  if (tensors.size() == 1) return first.Cast(*dt);
  std::optional<Tensor> acc;
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    std::vector<std::pair<int64_t, int64_t>> pads(t.ndim(), {0, 0});
    pads[*ax] = {offset, total - offset - t.shape()[*ax]};
    offset += t.shape()[*ax];
    Tensor p = t.Cast(*dt).Pad(pads);
    acc = !acc ? p : (*dt == dtypes::kBool ? acc->BitwiseOr(p) : acc->Add(p));
  }
  return *acc;
}

Tensor Tensor::Stack(absl::Span<const Tensor> tensors, int64_t dim) {
  if (tensors.empty()) return FromStatus(Invalid("Stack", "no tensors"));
  for (const Tensor& t : tensors) {
    if (!t.ok()) return t;
    if (t.shape() != tensors[0].shape())
      return FromStatus(Invalid("Stack", "shapes ", Str(tensors[0].shape()), " and ", Str(t.shape()), " differ"));
  }
  auto ax = NormAxis("Stack", dim, tensors[0].ndim() + 1);
  if (!ax.ok()) return FromStatus(ax.status());
  std::vector<Tensor> us;
  for (const Tensor& t : tensors) us.push_back(t.Unsqueeze(*ax));
  return Cat(us, *ax);
}

Tensor Tensor::Repeat(absl::Span<const int64_t> repeats) const {
  if (!ok()) return *this;
  if (static_cast<int64_t>(repeats.size()) < ndim())
    return FromStatus(Invalid("Repeat", "need at least ", ndim(), " repeats, got ", repeats.size()));
  IntVec base(repeats.size() - ndim(), 1);
  base.insert(base.end(), shape().begin(), shape().end());
  IntVec unsq, expd, fin;
  for (size_t i = 0; i < repeats.size(); ++i) {
    int64_t r = repeats[i], s = base[i];
    if (r < 0) return FromStatus(Invalid("Repeat", "negative repeat ", r));
    if (r != 1) {
      unsq.push_back(1);
      expd.push_back(r);
    }
    unsq.push_back(s);
    expd.push_back(s);
    fin.push_back(r * s);
  }
  return Reshape(unsq).Expand(expd).Reshape(fin);
}

Tensor Tensor::OneHot(int64_t num_classes) const {
  if (!ok()) return *this;
  if (num_classes < 0) return FromStatus(Invalid("OneHot", "negative number of classes ", num_classes));
  return Unsqueeze(-1).Eq(Arange(0, num_classes, 1, dtypes::kInt32, device()));
}

Tensor Tensor::Gather(int64_t dim, const Tensor& index) const {
  if (absl::Status st = FirstError({this, &index}); !st.ok()) return FromStatus(st);
  if (!index.dtype().IsInt()) return FromStatus(Invalid("Gather", "index must be an integer tensor, got ", index.dtype().Name()));
  if (index.ndim() != ndim())
    return FromStatus(Invalid("Gather", "index rank ", index.ndim(), " differs from the input rank ", ndim()));
  auto ax = NormAxis("Gather", dim, ndim());
  if (!ax.ok()) return FromStatus(ax.status());
  std::vector<std::pair<int64_t, int64_t>> bounds;
  for (int64_t d = 0; d < ndim(); ++d) {
    if (d != *ax && index.shape()[d] > shape()[d])
      return FromStatus(Invalid("Gather", "index shape ", Str(index.shape()), " exceeds input shape ", Str(shape()),
                                " in dim ", d));
    bounds.emplace_back(0, d == *ax ? shape()[d] : index.shape()[d]);
  }
  // tinygrad: one-hot of the index along a new last dim selects from the input moved there
  Tensor x = Shrink(bounds).Unsqueeze(-1).Transpose(-1, *ax);
  return index.OneHot(shape()[*ax]).Where(x, 0).Sum(-1, false, dtype());
}

}  // namespace kiln
