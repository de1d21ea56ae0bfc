// Indexing ONNX ops: Gather, GatherElements, GatherND, ScatterElements/Scatter, ScatterND, OneHot, NonZero, Compress,
// TopK, ReverseSequence. Data-dependent indices select through one-hot masks (tinygrad's approach), so every op stays
// a composition of elementwise ops and reductions; constant indices become shrinks.
#include <algorithm>
#include <limits>

#include "engine/onnx/ops_util.h"

namespace kiln::onnx {
namespace {

int64_t Prod(const Shape& s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= s[i];
  return n;
}

// Indices normalized to [0, n) (negative counts from the end), as int64.
Tensor NormIndex(const Tensor& idx, int64_t n) {
  Tensor i = idx.Cast(dtypes::kInt64);
  return i.Lt(0).Where(i.Add(n), i);
}

// The lowest value of a dtype (identity of max).
Scalar Lowest(DType dt) {
  if (dt.IsFloat()) return Scalar(-std::numeric_limits<double>::infinity());
  if (dt.IsBool()) return Scalar(false);
  return Scalar(DTypeMin(dt));
}
Scalar Highest(DType dt) {
  if (dt.IsFloat()) return Scalar(std::numeric_limits<double>::infinity());
  if (dt.IsBool()) return Scalar(true);
  return Scalar(DTypeMax(dt));
}

// Rows of `data` (P, n, Q) picked by flat indices (K,): (P, K, Q).
Tensor SelectRows(const Tensor& data, const Tensor& flat_idx) {
  const int64_t n = data.size(1), k = flat_idx.size(0);
  const DType dt = data.dtype();
  Tensor d = dt.IsBool() ? data.Cast(dtypes::kUInt8) : data;
  Tensor onehot = flat_idx.Reshape({1, k, 1, 1}).Eq(Tensor::Arange(0, n, 1, dtypes::kInt64, data.device()).Reshape({1, 1, n, 1}));
  Tensor picked = onehot.Where(d.Unsqueeze(1), d.ZerosLike().Unsqueeze(1)).Sum(2, false, d.dtype()).Cast(d.dtype());
  return dt.IsBool() ? picked.Cast(dtypes::kBool) : picked;
}

absl::StatusOr<std::vector<Value>> Gather(OpContext& ctx) {
  ONNX_INPUT(data, 0);
  if (!ctx.Has(1)) return ctx.Error("indices are required");
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", 0), data.ndim()));
  const Shape ds = data.shape();
  const int64_t n = ds[axis];
  const Shape is = ctx.In(1).shape();
  std::vector<int64_t> out(ds.begin(), ds.begin() + axis);
  out.insert(out.end(), is.begin(), is.end());
  out.insert(out.end(), ds.begin() + axis + 1, ds.end());
  const int64_t k = Prod(is, 0, is.size());
  // constant indices: shrinks (no one-hot)
  if (ctx.In(1).host && ctx.In(1).host_constant && k <= 64) {
    std::vector<int64_t> idx = ctx.In(1).host->Ints();
    std::vector<Tensor> parts;
    for (int64_t i : idx) {
      if (i < -n || i >= n) return ctx.Error(absl::StrCat("index ", i, " is out of range for axis size ", n));
      const int64_t j = i < 0 ? i + n : i;
      std::vector<std::pair<int64_t, int64_t>> b;
      for (size_t d = 0; d < ds.size(); ++d) b.emplace_back(0, ds[d]);
      b[axis] = {j, j + 1};
      parts.push_back(data.Shrink(b));
    }
    if (parts.empty()) return One(Tensor::Zeros(out, data.dtype(), ctx.device()));
    Tensor r = parts.size() == 1 ? parts[0] : Tensor::Cat(parts, axis);
    return One(r.Reshape(out));
  }
  ONNX_INPUT(indices, 1);
  const int64_t p = Prod(ds, 0, axis), q = Prod(ds, axis + 1, ds.size());
  Tensor flat = NormIndex(indices, n).Reshape({k});
  return One(SelectRows(data.Reshape({p, n, q}), flat).Reshape(out));
}

absl::StatusOr<std::vector<Value>> GatherElements(OpContext& ctx) {
  ONNX_INPUT(data, 0);
  ONNX_INPUT(indices, 1);
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", 0), data.ndim()));
  Tensor idx = NormIndex(indices, data.size(axis));
  if (data.dtype().IsBool()) return One(data.Cast(dtypes::kUInt8).Gather(axis, idx).Cast(dtypes::kBool));
  return One(data.Gather(axis, idx));
}

absl::StatusOr<std::vector<Value>> GatherND(OpContext& ctx) {
  ONNX_INPUT(data, 0);
  ONNX_INPUT(indices, 1);
  const int64_t b = ctx.Int("batch_dims", 0);
  const Shape ds = data.shape(), is = indices.shape();
  if (is.empty()) return ctx.Error("indices must have rank >= 1");
  const int64_t m = is.back();
  if (b < 0 || b + m > static_cast<int64_t>(ds.size()) || b >= static_cast<int64_t>(is.size())) {
    return ctx.Error("batch_dims and the index depth do not fit the data rank");
  }
  const int64_t bsz = Prod(ds, 0, b), nrows = Prod(ds, b, b + m), rest = Prod(ds, b + m, ds.size());
  const int64_t k = Prod(is, b, is.size() - 1);
  // linear row index inside each batch: sum_j idx_j * stride_j
  Tensor idx = indices.Cast(dtypes::kInt64).Reshape({bsz, k, m});
  Tensor lin = Tensor::Zeros({bsz, k}, dtypes::kInt64, ctx.device());
  int64_t stride = 1;
  for (int64_t j = m - 1; j >= 0; --j) {
    std::vector<std::pair<int64_t, int64_t>> sel = {{0, bsz}, {0, k}, {j, j + 1}};
    Tensor ij = NormIndex(idx.Shrink(sel).Reshape({bsz, k}), ds[b + j]);
    lin = lin.Add(ij.Mul(stride));
    stride *= ds[b + j];
  }
  // per batch: (bsz, nrows, rest) rows picked by (bsz, k)
  Tensor d = data.Reshape({bsz, nrows, rest});
  const DType dt = d.dtype();
  Tensor dd = dt.IsBool() ? d.Cast(dtypes::kUInt8) : d;
  Tensor onehot = lin.Reshape({bsz, k, 1, 1}).Eq(Tensor::Arange(0, nrows, 1, dtypes::kInt64, ctx.device()).Reshape({1, 1, nrows, 1}));
  Tensor picked = onehot.Where(dd.Unsqueeze(1), dd.ZerosLike().Unsqueeze(1)).Sum(2, false, dd.dtype()).Cast(dd.dtype());
  if (dt.IsBool()) picked = picked.Cast(dtypes::kBool);
  std::vector<int64_t> out(is.begin(), is.end() - 1);
  out.insert(out.end(), ds.begin() + b + m, ds.end());
  return One(picked.Reshape(out));
}

// Combines `data` with the updates selected by `hit` (R, K, N) masks: out (R, N).
Tensor ScatterCombine(const Tensor& data, const Tensor& upd, const Tensor& mask, const std::string& reduction) {
  // data (R, N), upd (R, K, 1), mask (R, K, N)
  const DType dt = data.dtype();
  Tensor hit = mask.Any(1);
  if (reduction == "add") return data.Add(mask.Where(upd, data.ZerosLike().Unsqueeze(1)).Sum(1, false, dt).Cast(dt));
  if (reduction == "mul") return data.Mul(mask.Where(upd, data.OnesLike().Unsqueeze(1)).Prod(1).Cast(dt));
  if (reduction == "max") {
    Tensor m = mask.Where(upd, data.FullLike(Lowest(dt)).Unsqueeze(1)).Max(1);
    return hit.Where(data.Maximum(m), data);
  }
  if (reduction == "min") {
    Tensor m = mask.Where(upd, data.FullLike(Highest(dt)).Unsqueeze(1)).Min(1);
    return hit.Where(data.Minimum(m), data);
  }
  // none: the last update to a position wins (duplicates are undefined in ONNX)
  Tensor d = dt.IsBool() ? data.Cast(dtypes::kUInt8) : data;
  Tensor u = dt.IsBool() ? upd.Cast(dtypes::kUInt8) : upd;
  Tensor v = mask.Where(u, d.ZerosLike().Unsqueeze(1)).Sum(1, false, d.dtype()).Cast(d.dtype());
  Tensor r = hit.Where(v, d);
  return dt.IsBool() ? r.Cast(dtypes::kBool) : r;
}

absl::StatusOr<std::vector<Value>> ScatterElements(OpContext& ctx) {
  ONNX_INPUT(data, 0);
  ONNX_INPUT(indices, 1);
  ONNX_INPUT(updates, 2);
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", 0), data.ndim()));
  const std::string reduction = ctx.String("reduction", "none");
  if (indices.shape() != updates.shape() || indices.ndim() != data.ndim()) {
    return ctx.Error("indices and updates must have the data's rank and one shape");
  }
  const int64_t n = data.size(axis), r = data.ndim();
  // pad indices (with -1: no match) and updates to the data's extent in the other dims
  std::vector<std::pair<int64_t, int64_t>> pad(r, {0, 0});
  for (int64_t d = 0; d < r; ++d) {
    if (d != axis) pad[d] = {0, data.size(d) - indices.size(d)};
  }
  Tensor idx = NormIndex(indices, n).Pad(pad, -1);
  Tensor upd = updates.Pad(pad, 0);
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < r; ++d) {
    if (d != axis) perm.push_back(d);
  }
  perm.push_back(axis);
  std::vector<int64_t> inv(r);
  for (int64_t i = 0; i < r; ++i) inv[perm[i]] = i;
  Tensor dp = data.Permute(perm);
  const Shape dps = dp.shape();
  const int64_t rows = Prod(dps, 0, r - 1), k = indices.size(axis);
  Tensor d2 = dp.Reshape({rows, n});
  Tensor i3 = idx.Permute(perm).Reshape({rows, k, 1});
  Tensor u3 = upd.Permute(perm).Reshape({rows, k, 1});
  Tensor mask = i3.Eq(Tensor::Arange(0, n, 1, dtypes::kInt64, ctx.device()).Reshape({1, 1, n}));
  Tensor out = ScatterCombine(d2, u3, mask, reduction);
  return One(out.Reshape(std::vector<int64_t>(dps.begin(), dps.end())).Permute(inv));
}

absl::StatusOr<std::vector<Value>> ScatterND(OpContext& ctx) {
  ONNX_INPUT(data, 0);
  ONNX_INPUT(indices, 1);
  ONNX_INPUT(updates, 2);
  const Shape ds = data.shape(), is = indices.shape();
  if (is.empty()) return ctx.Error("indices must have rank >= 1");
  const int64_t m = is.back();
  if (m > static_cast<int64_t>(ds.size())) return ctx.Error("index depth exceeds the data rank");
  const int64_t nrows = Prod(ds, 0, m), rest = Prod(ds, m, ds.size()), k = Prod(is, 0, is.size() - 1);
  Tensor idx = indices.Cast(dtypes::kInt64).Reshape({k, m});
  Tensor lin = Tensor::Zeros({k}, dtypes::kInt64, ctx.device());
  int64_t stride = 1;
  for (int64_t j = m - 1; j >= 0; --j) {
    Tensor ij = NormIndex(idx.Shrink({{0, k}, {j, j + 1}}).Reshape({k}), ds[j]);
    lin = lin.Add(ij.Mul(stride));
    stride *= ds[j];
  }
  // (1, K, N) masks over rows; data (rest, N) so the combine works per trailing element
  Tensor d2 = data.Reshape({nrows, rest}).Permute({1, 0});
  Tensor u3 = updates.Reshape({k, rest}).Permute({1, 0}).Reshape({rest, k, 1});
  Tensor mask = lin.Reshape({1, k, 1}).Eq(Tensor::Arange(0, nrows, 1, dtypes::kInt64, ctx.device()).Reshape({1, 1, nrows}));
  mask = mask.Expand({rest, k, nrows});
  Tensor out = ScatterCombine(d2, u3, mask, ctx.String("reduction", "none"));
  return One(out.Permute({1, 0}).Reshape(Dims(data)));
}

absl::StatusOr<std::vector<Value>> OneHot(OpContext& ctx) {
  ONNX_INPUT(indices, 0);
  KILN_ASSIGN_OR_RETURN(HostArrayPtr depth_h, ctx.Host(1));
  ONNX_INPUT(values, 2);
  if (depth_h->numel() != 1) return ctx.Error("depth must be a scalar");
  const int64_t depth = static_cast<int64_t>(depth_h->GetDouble(0));
  if (depth < 0) return ctx.Error("depth must be non-negative");
  if (values.numel() != 2) return ctx.Error("values must hold [off, on]");
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", -1), indices.ndim() + 1));
  Tensor idx = indices.dtype().IsFloat() ? indices.Trunc().Cast(dtypes::kInt64) : indices.Cast(dtypes::kInt64);
  idx = idx.Lt(0).Where(idx.Add(depth), idx).Unsqueeze(axis);
  std::vector<int64_t> shape(indices.ndim() + 1, 1);
  shape[axis] = depth;
  Tensor classes = Tensor::Arange(0, depth, 1, dtypes::kInt64, ctx.device()).Reshape(shape);
  Tensor v = values.Reshape({2});
  Tensor off = v.Shrink({{0, 1}}).Reshape({}), on = v.Shrink({{1, 2}}).Reshape({});
  return One(idx.Eq(classes).Where(on, off));
}

// Indices of the non-zero elements (2, count): a data-dependent shape, computed on the host from the values.
absl::StatusOr<std::vector<Value>> NonZero(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(HostArrayPtr x, ctx.Host(0));
  const Shape& s = x->shape;
  std::vector<int64_t> flat;
  for (int64_t i = 0; i < x->numel(); ++i) {
    if (x->GetDouble(i) != 0.0) flat.push_back(i);
  }
  const int64_t r = static_cast<int64_t>(s.size()), n = static_cast<int64_t>(flat.size());
  HostArray out = HostArray::Zeros(dtypes::kInt64, {r, n});
  for (int64_t j = 0; j < n; ++j) {
    int64_t rem = flat[j];
    for (int64_t d = r - 1; d >= 0; --d) {
      out.SetInt(d * n + j, rem % s[d]);
      rem /= s[d];
    }
  }
  Value v;
  v.kind = Value::Kind::kTensor;
  v.host = std::make_shared<const HostArray>(std::move(out));
  return std::vector<Value>{v};
}

absl::StatusOr<std::vector<Value>> Compress(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(HostArrayPtr cond, ctx.Host(1));
  Tensor data = x;
  int64_t axis = 0;
  if (ctx.HasAttr("axis")) {
    KILN_ASSIGN_OR_RETURN(axis, Axis(ctx, ctx.Int("axis", 0), x.ndim()));
  } else {
    data = x.Reshape({x.numel()});
  }
  std::vector<Tensor> parts;
  for (int64_t i = 0; i < cond->numel() && i < data.size(axis); ++i) {
    if (cond->GetDouble(i) == 0.0) continue;
    std::vector<std::pair<int64_t, int64_t>> b;
    for (int64_t d = 0; d < data.ndim(); ++d) b.emplace_back(0, data.size(d));
    b[axis] = {i, i + 1};
    parts.push_back(data.Shrink(b));
  }
  if (parts.empty()) {
    std::vector<int64_t> shape = Dims(data);
    shape[axis] = 0;
    return One(Tensor::Zeros(shape, x.dtype(), ctx.device()));
  }
  return One(parts.size() == 1 ? parts[0] : Tensor::Cat(parts, axis));
}

// TopK by K rounds of arg-max (or arg-min) with the picked element masked out: ties go to the lower index, as the
// reference's stable sort does.
absl::StatusOr<std::vector<Value>> TopK(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  int64_t k = ctx.Int("k", 0);
  if (ctx.opset() >= 10) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> kv, ctx.Ints(1));
    if (kv.size() != 1) return ctx.Error("K must hold one value");
    k = kv[0];
  }
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", -1), x.ndim()));
  const bool largest = ctx.Int("largest", 1) != 0;
  const int64_t n = x.size(axis);
  if (k < 0 || k > n) return ctx.Error(absl::StrCat("K=", k, " is out of range for axis size ", n));
  std::vector<int64_t> shape(x.ndim(), 1);
  shape[axis] = n;
  Tensor pos = Tensor::Arange(0, n, 1, dtypes::kInt64, ctx.device()).Reshape(shape);
  Tensor work = x.dtype().IsBool() ? x.Cast(dtypes::kInt32) : x;
  const Scalar fill = largest ? Lowest(work.dtype()) : Highest(work.dtype());
  std::vector<Tensor> vals, idxs;
  Tensor taken = x.FullLike(false, dtypes::kBool);
  for (int64_t i = 0; i < k; ++i) {
    Tensor masked = taken.Where(work.FullLike(fill), work);
    Tensor arg = (largest ? masked.Argmax(axis, true) : masked.Argmin(axis, true)).Cast(dtypes::kInt64);
    Tensor sel = pos.Eq(arg);
    vals.push_back(sel.Where(work, work.ZerosLike()).Sum(axis, true, work.dtype()).Cast(work.dtype()));
    idxs.push_back(arg);
    taken = taken.LogicalOr(sel);
  }
  if (k == 0) {
    std::vector<int64_t> s = Dims(x);
    s[axis] = 0;
    return std::vector<Value>{Value::Of(Tensor::Zeros(s, x.dtype(), ctx.device())),
                              Value::Of(Tensor::Zeros(s, dtypes::kInt64, ctx.device()))};
  }
  Tensor v = vals.size() == 1 ? vals[0] : Tensor::Cat(vals, axis);
  Tensor ix = idxs.size() == 1 ? idxs[0] : Tensor::Cat(idxs, axis);
  return std::vector<Value>{Value::Of(v.Cast(x.dtype())), Value::Of(ix)};
}

absl::StatusOr<std::vector<Value>> ReverseSequence(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(lens, 1);
  KILN_ASSIGN_OR_RETURN(int64_t batch, Axis(ctx, ctx.Int("batch_axis", 1), x.ndim()));
  KILN_ASSIGN_OR_RETURN(int64_t time, Axis(ctx, ctx.Int("time_axis", 0), x.ndim()));
  std::vector<int64_t> ts(x.ndim(), 1), bs(x.ndim(), 1);
  ts[time] = x.size(time);
  bs[batch] = x.size(batch);
  Tensor t = Tensor::Arange(0, x.size(time), 1, dtypes::kInt64, ctx.device()).Reshape(ts);
  Tensor l = lens.Cast(dtypes::kInt64).Reshape(bs);
  Tensor idx = t.Lt(l).Where(l.Sub(1).Sub(t), t).Expand(Dims(x));
  return One(x.Gather(time, idx));
}


// TensorScatter (a KV cache's in-place update): present = past with update written along `axis` from each batch
// entry's write index on (circular: wrapping around the axis). Per output position j of the axis the source row is
// s = j - write_index[b] (mod the axis length when circular), taken from update where 0 <= s < update's length.
absl::StatusOr<std::vector<Value>> TensorScatter(OpContext& ctx) {
  ONNX_INPUT(past, 0);
  ONNX_INPUT(update, 1);
  const int64_t r = past.ndim();
  if (r < 2 || update.ndim() != r) return ctx.Error("past_cache and update must have the same rank, at least 2");
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", -2), r));
  if (axis == 0) return ctx.Error("axis must not be the batch dim");
  const std::string mode = ctx.String("mode", "linear");
  if (mode != "linear" && mode != "circular") return ctx.Error("mode must be linear or circular");
  for (int64_t d = 0; d < r; ++d) {
    if (d == axis ? update.size(d) > past.size(d) : update.size(d) != past.size(d))
      return ctx.Error(absl::StrCat("update's shape ", ShapeString(update.shape()), " does not fit past_cache's ",
                                    ShapeString(past.shape()), " along axis ", axis));
  }
  if (update.dtype() != past.dtype()) return ctx.Error("update must have past_cache's dtype");
  const int64_t b = past.size(0), len = past.size(axis), ulen = update.size(axis);
  if (ulen == 0) return std::vector<Value>{ctx.In(0)};
  Tensor w = ctx.Has(2) ? ctx.OptT(2)->Cast(dtypes::kInt64) : Tensor::Zeros({b}, dtypes::kInt64, past.device());
  if (w.ndim() != 1 || w.size(0) != b) return ctx.Error("write_indices must be [batch_size]");
  std::vector<int64_t> wshape(r, 1), jshape(r, 1);
  wshape[0] = b;
  jshape[axis] = len;
  Tensor src = Tensor::Arange(0, len, 1, dtypes::kInt64, past.device()).Reshape(jshape).Sub(w.Reshape(wshape));
  if (mode == "circular") src = src.Mod(len);
  const Tensor valid = src.Ge(0).LogicalAnd(src.Lt(ulen)).Expand(Dims(past));
  const Tensor index = src.Clip(0, ulen - 1).Cast(dtypes::kInt32).Expand(Dims(past));
  Tensor u = update, p = past;
  if (past.dtype().IsBool()) u = u.Cast(dtypes::kUInt8), p = p.Cast(dtypes::kUInt8);
  Tensor out = valid.Where(u.Gather(axis, index), p);
  if (past.dtype().IsBool()) out = out.Cast(dtypes::kBool);
  return One(out);
}
}  // namespace

void RegisterIndexOps(OpTable* t) {
  Reg(t, "TensorScatter", 24, kMaxOnnxOpset, {"axis", "mode"}, TensorScatter);
  Reg(t, "Gather", 1, kMaxOnnxOpset, {"axis"}, Gather);
  Reg(t, "GatherElements", 11, kMaxOnnxOpset, {"axis"}, GatherElements);
  Reg(t, "GatherND", 11, kMaxOnnxOpset, {"batch_dims"}, GatherND);
  Reg(t, "ScatterElements", 11, kMaxOnnxOpset, {"axis", "reduction"}, ScatterElements);
  Reg(t, "Scatter", 9, 10, {"axis"}, ScatterElements);
  Reg(t, "ScatterND", 11, kMaxOnnxOpset, {"reduction"}, ScatterND);
  Reg(t, "OneHot", 9, kMaxOnnxOpset, {"axis"}, OneHot);
  Reg(t, "NonZero", 9, kMaxOnnxOpset, {}, NonZero);
  Reg(t, "Compress", 9, kMaxOnnxOpset, {"axis"}, Compress);
  Reg(t, "TopK", 1, kMaxOnnxOpset, {"axis", "k", "largest", "sorted"}, TopK);
  Reg(t, "ReverseSequence", 10, kMaxOnnxOpset, {"batch_axis", "time_axis"}, ReverseSequence);
}

}  // namespace kiln::onnx
