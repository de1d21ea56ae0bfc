// Less common ONNX ops: LinearAttention, CausalConvWithState, AffineGrid, BitCast, the window functions, DFT, STFT,
// MelWeightMatrix, Det, Unique, NonMaxSuppression (data-dependent outputs computed on the host), and the
// ai.onnx.preview.training optimizers.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>

#include "engine/onnx/ops_util.h"

namespace kiln::onnx {
namespace {

constexpr double kPi = 3.14159265358979323846;

Value HostValue(HostArray a) {
  Value v;
  v.kind = Value::Kind::kTensor;
  v.host = std::make_shared<const HostArray>(std::move(a));
  return v;
}

// ** LinearAttention (opset 27): the recurrence of the reference, unrolled over time **
absl::StatusOr<std::vector<Value>> LinearAttention(OpContext& ctx) {
  ONNX_INPUT(q, 0);
  ONNX_INPUT(k, 1);
  ONNX_INPUT(v, 2);
  const std::string rule = ctx.String("update_rule", "gated_delta");
  const bool gating = rule == "gated" || rule == "gated_delta";
  const bool delta = rule == "delta" || rule == "gated_delta";
  if (rule != "linear" && !gating && !delta) return ctx.Error("unsupported update_rule");
  const int64_t hq = ctx.Int("q_num_heads", 0), hk = ctx.Int("kv_num_heads", 0);
  if (hq <= 0 || hk <= 0 || hq % hk != 0) return ctx.Error("q_num_heads must be a positive multiple of kv_num_heads");
  if (q.ndim() != 3 || k.ndim() != 3 || v.ndim() != 3) return ctx.Error("query, key and value must be 3-D");
  if (gating != ctx.Has(4) || delta != ctx.Has(5)) return ctx.Error("decay/beta inputs do not match update_rule");
  const DType out_dt = q.dtype();
  const DType f = dtypes::kFloat32;
  const int64_t b = q.size(0), t = q.size(1), dk = q.size(2) / hq, dv = v.size(2) / hk, group = hq / hk;
  auto heads = [&](const Tensor& x, int64_t h) {
    return x.Cast(f).Reshape({b, t, h, x.size(2) / h}).Permute({0, 2, 1, 3});
  };
  Tensor q4 = heads(q, hq), k4 = heads(k, hk), v4 = heads(v, hk);
  std::optional<Tensor> decay4, beta4;
  if (gating) {
    ONNX_INPUT(decay, 4);
    if (decay.size(2) == hk) decay4 = decay.Cast(f).Reshape({b, t, hk, 1}).Permute({0, 2, 1, 3});
    else decay4 = heads(decay, hk);
  }
  if (delta) {
    ONNX_INPUT(beta, 5);
    beta4 = beta.Cast(f).Reshape({b, t, beta.size(2), 1}).Permute({0, 2, 1, 3});
  }
  Tensor state = Tensor::Zeros({b, hk, dk, dv}, f, ctx.device());
  DType state_dt = out_dt;
  if (ctx.Has(3)) {
    ONNX_INPUT(past, 3);
    state = past.Cast(f);
    state_dt = past.dtype();
  }
  const double scale = ctx.Float("scale", 0.0) != 0.0 ? ctx.Float("scale", 0.0) : 1.0 / std::sqrt(double(dk));
  auto at = [&](const Tensor& x, int64_t i) {  // (B, H, T, D) -> (B, H, D)
    return x.Shrink({{0, x.size(0)}, {0, x.size(1)}, {i, i + 1}, {0, x.size(3)}}).Reshape({x.size(0), x.size(1), x.size(3)});
  };
  std::vector<Tensor> outs;
  for (int64_t i = 0; i < t; ++i) {
    Tensor qt = at(q4, i), kt = at(k4, i), vt = at(v4, i);
    if (gating) state = state.Mul(at(*decay4, i).Exp().Unsqueeze(-1));
    if (delta) {
      Tensor retrieved = state.Mul(kt.Unsqueeze(-1)).Sum(2);  // (B, H, dv)
      vt = at(*beta4, i).Mul(vt.Sub(retrieved));
    }
    state = state.Add(kt.Unsqueeze(-1).Mul(vt.Unsqueeze(-2))).Contiguous();
    Tensor read = state;
    if (group > 1) read = state.Reshape({b, hk, 1, dk, dv}).Expand({b, hk, group, dk, dv}).Reshape({b, hq, dk, dv});
    outs.push_back(qt.Unsqueeze(-1).Mul(read).Sum(2).Mul(scale).Unsqueeze(2));  // (B, Hq, 1, dv)
  }
  Tensor o = outs.size() == 1 ? outs[0] : Tensor::Cat(outs, 2);
  o = o.Permute({0, 2, 1, 3}).Reshape({b, t, hq * dv}).Cast(out_dt);
  return std::vector<Value>{Value::Of(o), Value::Of(state.Cast(state_dt))};
}

absl::StatusOr<std::vector<Value>> CausalConvWithState(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(w, 1);
  if (x.ndim() != 3 || w.ndim() != 3) return ctx.Error("input and weight must be 3-D");
  const int64_t b = x.size(0), c = x.size(1), kk = w.size(2);
  const std::string act = ctx.String("activation", "none");
  if (act != "none" && act != "silu" && act != "swish") return ctx.Error("activation must be none, silu or swish");
  Tensor pad = ctx.Has(3) ? *ctx.OptT(3) : Tensor::Zeros({b, c, kk - 1}, x.dtype(), ctx.device());
  Tensor padded = kk > 1 ? Tensor::Cat({pad.Cast(x.dtype()), x}, 2) : x;
  ConvOptions o;
  o.groups = c;
  const DType f = IsLowFloat(x.dtype()) ? dtypes::kFloat32 : x.dtype();
  std::optional<Tensor> bias = ctx.OptT(2);
  if (bias) bias = bias->Cast(f);
  Tensor y = padded.Cast(f).Conv2d(w.Cast(f), bias, o).Cast(x.dtype());
  if (act != "none") y = y.Cast(dtypes::kFloat32).Silu().Cast(x.dtype());
  const int64_t len = padded.size(2);
  Tensor state = padded.Shrink({{0, b}, {0, c}, {len - (kk - 1), len}});
  return std::vector<Value>{Value::Of(y), Value::Of(state)};
}

absl::StatusOr<std::vector<Value>> AffineGrid(OpContext& ctx) {
  ONNX_INPUT(theta, 0);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, ctx.Ints(1));
  const bool align = ctx.Int("align_corners", 0) != 0;
  if (size.size() != 4 && size.size() != 5) return ctx.Error("size must have 4 or 5 values");
  const int64_t n = size[0];
  std::vector<int64_t> dims(size.begin() + 2, size.end());  // (H, W) or (D, H, W)
  const int64_t nd = static_cast<int64_t>(dims.size());
  auto coords = [&](int64_t len) {
    std::vector<double> a(len);
    for (int64_t i = 0; i < len; ++i) {
      if (align) a[i] = len == 1 ? -1.0 : -1.0 + i * 2.0 / double(len - 1);
      else a[i] = -1.0 + 1.0 / double(len) + i * 2.0 / double(len);
    }
    return a;
  };
  int64_t points = 1;
  for (int64_t d : dims) points *= d;
  // base grid (points, nd + 1): [x, y, (z), 1] with x along the last dim
  std::vector<double> base(static_cast<size_t>(points * (nd + 1)));
  std::vector<std::vector<double>> axis(nd);
  for (int64_t i = 0; i < nd; ++i) axis[i] = coords(dims[i]);
  for (int64_t p = 0; p < points; ++p) {
    int64_t rem = p;
    std::vector<int64_t> idx(nd);
    for (int64_t i = nd - 1; i >= 0; --i) {
      idx[i] = rem % dims[i];
      rem /= dims[i];
    }
    for (int64_t j = 0; j < nd; ++j) base[p * (nd + 1) + j] = axis[nd - 1 - j][idx[nd - 1 - j]];
    base[p * (nd + 1) + nd] = 1.0;
  }
  const DType f = theta.dtype();
  HostArray g = HostArray::FromDoubles(f, {points, nd + 1}, base);
  Tensor grid = Tensor::FromHost(g.bytes.data(), f, g.shape, ctx.device());
  Tensor out = grid.Reshape({1, points, nd + 1}).Matmul(theta.Transpose(1, 2));  // (N, points, nd)
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), dims.begin(), dims.end());
  shape.push_back(nd);
  return One(out.Reshape(shape));
}

absl::StatusOr<std::vector<Value>> BitCast(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(DType to, OnnxToDType(static_cast<int32_t>(ctx.Int("to", 1))));
  if (to.ItemSize() != x.dtype().ItemSize()) return ctx.Error("BitCast needs types of the same bit width");
  if (to.IsBool() || x.dtype().IsBool()) return One(x.Cast(to));  // one byte each: 0/1 patterns map through a cast
  return One(x.Bitcast(to));
}

// Hann / Hamming / Blackman: a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), computed on the host.
OpImpl Window(double a0, double a1, double a2, bool hann) {
  return [=](OpContext& ctx) -> absl::StatusOr<std::vector<Value>> {
    KILN_ASSIGN_OR_RETURN(HostArrayPtr size_h, ctx.Host(0));
    if (size_h->numel() != 1) return ctx.Error("size must be a scalar");
    const int64_t size = size_h->GetInt(0);
    if (size < 0) return ctx.Error("size must be non-negative");
    KILN_ASSIGN_OR_RETURN(DType dt, OnnxToDType(static_cast<int32_t>(ctx.Int("output_datatype", 1))));
    const double n1 = ctx.Int("periodic", 1) ? double(size) : double(size - 1);
    std::vector<double> w(size);
    for (int64_t i = 0; i < size; ++i) {
      const double n = double(i);
      w[i] = hann ? std::pow(std::sin(n * kPi / n1), 2) : a0 - a1 * std::cos(2 * kPi * n / n1) + a2 * std::cos(4 * kPi * n / n1);
    }
    return std::vector<Value>{Value::Constant(HostArray::FromDoubles(dt, {size}, w))};
  };
}

// Det of (..., n, n) by Gaussian elimination with partial pivoting, computed on the host (the matrices are data).
absl::StatusOr<std::vector<Value>> Det(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(HostArrayPtr x, ctx.Host(0));
  const Shape& s = x->shape;
  if (s.size() < 2 || s[s.size() - 1] != s[s.size() - 2]) return ctx.Error("input must be (..., n, n)");
  const int64_t n = s.back(), batch = x->numel() / std::max<int64_t>(n * n, 1);
  Shape out(s.begin(), s.end() - 2);
  HostArray r = HostArray::Zeros(x->dtype, out);
  for (int64_t bi = 0; bi < batch; ++bi) {
    std::vector<double> m(n * n);
    for (int64_t i = 0; i < n * n; ++i) m[i] = x->GetDouble(bi * n * n + i);
    double det = 1.0;
    for (int64_t c = 0; c < n; ++c) {
      int64_t p = c;
      for (int64_t rr = c + 1; rr < n; ++rr) {
        if (std::fabs(m[rr * n + c]) > std::fabs(m[p * n + c])) p = rr;
      }
      if (m[p * n + c] == 0) {
        det = 0;
        break;
      }
      if (p != c) {
        for (int64_t j = 0; j < n; ++j) std::swap(m[p * n + j], m[c * n + j]);
        det = -det;
      }
      det *= m[c * n + c];
      for (int64_t rr = c + 1; rr < n; ++rr) {
        const double fct = m[rr * n + c] / m[c * n + c];
        for (int64_t j = c; j < n; ++j) m[rr * n + j] -= fct * m[c * n + j];
      }
    }
    r.SetDouble(bi, det);
  }
  return std::vector<Value>{HostValue(std::move(r))};
}

// Unique (sorted or in first-occurrence order; flattened or along an axis), on the host.
absl::StatusOr<std::vector<Value>> Unique(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(HostArrayPtr x, ctx.Host(0));
  const bool sorted = ctx.Int("sorted", 1) != 0;
  const Shape& s = x->shape;
  int64_t axis = -1, outer = 1, len = x->numel(), inner = 1;
  if (ctx.HasAttr("axis")) {
    KILN_ASSIGN_OR_RETURN(axis, Axis(ctx, ctx.Int("axis", 0), static_cast<int64_t>(s.size())));
    len = s[axis];
    for (int64_t i = 0; i < axis; ++i) outer *= s[i];
    for (size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  }
  auto slice = [&](int64_t j) {  // the values of slice j along the axis
    std::vector<double> v;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) v.push_back(x->GetDouble((o * len + j) * inner + i));
    }
    return v;
  };
  std::vector<std::vector<double>> keys(len);
  for (int64_t j = 0; j < len; ++j) keys[j] = slice(j);
  std::vector<int64_t> firsts;  // first occurrence per unique key, in first-occurrence order
  std::vector<int64_t> inverse(len);
  std::map<std::vector<double>, int64_t> seen;
  for (int64_t j = 0; j < len; ++j) {
    auto [it, inserted] = seen.emplace(keys[j], static_cast<int64_t>(firsts.size()));
    if (inserted) firsts.push_back(j);
    inverse[j] = it->second;
  }
  std::vector<int64_t> order(firsts.size());
  std::iota(order.begin(), order.end(), 0);
  if (sorted) {
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return keys[firsts[a]] < keys[firsts[b]]; });
  }
  std::vector<int64_t> rank(order.size());
  for (size_t i = 0; i < order.size(); ++i) rank[order[i]] = static_cast<int64_t>(i);
  const int64_t u = static_cast<int64_t>(order.size());
  Shape ys = axis < 0 ? Shape{u} : s;
  if (axis >= 0) ys[axis] = u;
  HostArray y = HostArray::Zeros(x->dtype, ys);
  const int64_t isz = x->dtype.ItemSize();
  for (int64_t i = 0; i < u; ++i) {
    const int64_t j = firsts[order[i]];
    for (int64_t o = 0; o < outer; ++o) {
      std::copy_n(x->bytes.begin() + ((o * len + j) * inner) * isz, inner * isz,
                  y.bytes.begin() + ((o * u + i) * inner) * isz);
    }
  }
  std::vector<int64_t> idx(u), counts(u, 0), inv(len);
  for (int64_t i = 0; i < u; ++i) idx[i] = firsts[order[i]];
  for (int64_t j = 0; j < len; ++j) {
    inv[j] = rank[inverse[j]];
    ++counts[inv[j]];
  }
  return std::vector<Value>{HostValue(std::move(y)), HostValue(HostArray::FromInts(dtypes::kInt64, {u}, idx)),
                            HostValue(HostArray::FromInts(dtypes::kInt64, {len}, inv)),
                            HostValue(HostArray::FromInts(dtypes::kInt64, {u}, counts))};
}

// NonMaxSuppression on the host: boxes (B, N, 4), scores (B, C, N) -> selected (K, 3) [batch, class, box].
absl::StatusOr<std::vector<Value>> NonMaxSuppression(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(HostArrayPtr boxes, ctx.Host(0));
  KILN_ASSIGN_OR_RETURN(HostArrayPtr scores, ctx.Host(1));
  int64_t max_out = 0;
  double iou_th = 0, score_th = -std::numeric_limits<double>::infinity();
  bool has_score_th = false;
  if (ctx.Has(2)) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> m, ctx.Ints(2));
    if (!m.empty()) max_out = m[0];
  }
  if (ctx.Has(3)) {
    KILN_ASSIGN_OR_RETURN(std::vector<double> v, ctx.Doubles(3));
    if (!v.empty()) iou_th = v[0];
  }
  if (ctx.Has(4)) {
    KILN_ASSIGN_OR_RETURN(std::vector<double> v, ctx.Doubles(4));
    if (!v.empty()) {
      score_th = v[0];
      has_score_th = true;
    }
  }
  const bool center = ctx.Int("center_point_box", 0) != 0;
  if (boxes->shape.size() != 3 || scores->shape.size() != 3 || boxes->shape[2] != 4) {
    return ctx.Error("boxes must be (B, N, 4) and scores (B, C, N)");
  }
  const int64_t nb = boxes->shape[0], n = boxes->shape[1], nc = scores->shape[1];
  auto corners = [&](int64_t b, int64_t i) {
    std::array<double, 4> v;
    for (int k = 0; k < 4; ++k) v[k] = boxes->GetDouble((b * n + i) * 4 + k);
    if (center) {
      return std::array<double, 4>{v[1] - v[3] / 2, v[0] - v[2] / 2, v[1] + v[3] / 2, v[0] + v[2] / 2};
    }
    return std::array<double, 4>{std::min(v[0], v[2]), std::min(v[1], v[3]), std::max(v[0], v[2]), std::max(v[1], v[3])};
  };
  auto iou = [&](const std::array<double, 4>& a, const std::array<double, 4>& c) {
    const double ih = std::max(0.0, std::min(a[2], c[2]) - std::max(a[0], c[0]));
    const double iw = std::max(0.0, std::min(a[3], c[3]) - std::max(a[1], c[1]));
    const double inter = ih * iw;
    const double area = (a[2] - a[0]) * (a[3] - a[1]) + (c[2] - c[0]) * (c[3] - c[1]) - inter;
    return area <= 0 ? 0.0 : inter / area;
  };
  std::vector<int64_t> sel;
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t c = 0; c < nc; ++c) {
      std::vector<int64_t> cand;
      for (int64_t i = 0; i < n; ++i) {
        const double sc = scores->GetDouble((b * nc + c) * n + i);
        if (!has_score_th || sc > score_th) cand.push_back(i);
      }
      std::stable_sort(cand.begin(), cand.end(), [&](int64_t x, int64_t y) {
        return scores->GetDouble((b * nc + c) * n + x) > scores->GetDouble((b * nc + c) * n + y);
      });
      std::vector<int64_t> kept;
      for (int64_t i : cand) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        bool ok = true;
        for (int64_t j : kept) ok = ok && !(iou(corners(b, i), corners(b, j)) > iou_th);
        if (ok) kept.push_back(i);
      }
      for (int64_t i : kept) sel.insert(sel.end(), {b, c, i});
    }
  }
  const int64_t k = static_cast<int64_t>(sel.size() / 3);
  return std::vector<Value>{HostValue(HostArray::FromInts(dtypes::kInt64, {k, 3}, sel))};
}

// ** ai.onnx.preview.training optimizers (R, T, then groups of per-tensor inputs) **

absl::StatusOr<std::pair<Tensor, int64_t>> RateAndStep(OpContext& ctx) {
  ONNX_INPUT(r, 0);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> t, ctx.Ints(1));
  if (t.size() != 1) return ctx.Error("T must be a scalar");
  return std::make_pair(r.Reshape({}), t[0]);
}

absl::StatusOr<std::vector<Value>> Adagrad(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(auto rt, RateAndStep(ctx));
  const int64_t n = (static_cast<int64_t>(ctx.num_inputs()) - 2) / 3;
  const double decay = ctx.Float("decay_factor", 0.0), eps = ctx.Float("epsilon", 0.0), norm = ctx.Float("norm_coefficient", 0.0);
  std::vector<Value> xs, hs;
  for (int64_t i = 0; i < n; ++i) {
    ONNX_INPUT(x, 2 + i);
    ONNX_INPUT(g, 2 + n + i);
    ONNX_INPUT(h, 2 + 2 * n + i);
    Tensor r = rt.first.Div(1.0 + static_cast<double>(rt.second) * decay);
    Tensor gr = x.Mul(norm).Add(g);
    Tensor hn = h.Add(gr.Square());
    xs.push_back(Value::Of(x.Sub(r.Mul(gr).Div(hn.Sqrt().Add(eps))).Cast(x.dtype())));
    hs.push_back(Value::Of(hn.Cast(h.dtype())));
  }
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

absl::StatusOr<std::vector<Value>> Momentum(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(auto rt, RateAndStep(ctx));
  const int64_t n = (static_cast<int64_t>(ctx.num_inputs()) - 2) / 3;
  const double alpha = ctx.Float("alpha", 0.0), beta = ctx.Float("beta", 0.0), norm = ctx.Float("norm_coefficient", 0.0);
  const std::string mode = ctx.String("mode", "standard");
  if (mode != "standard" && mode != "nesterov") return ctx.Error("mode must be standard or nesterov");
  const double badj = rt.second > 0 ? beta : 1.0;
  std::vector<Value> xs, vs;
  for (int64_t i = 0; i < n; ++i) {
    ONNX_INPUT(x, 2 + i);
    ONNX_INPUT(g, 2 + n + i);
    ONNX_INPUT(v, 2 + 2 * n + i);
    Tensor gr = x.Mul(norm).Add(g);
    Tensor vn = v.Mul(alpha).Add(gr.Mul(badj));
    Tensor xn = mode == "standard" ? x.Sub(rt.first.Mul(vn)) : x.Sub(rt.first.Mul(gr.Add(vn.Mul(alpha))));
    xs.push_back(Value::Of(xn.Cast(x.dtype())));
    vs.push_back(Value::Of(vn.Cast(v.dtype())));
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  return xs;
}

absl::StatusOr<std::vector<Value>> Adam(OpContext& ctx) {
  KILN_ASSIGN_OR_RETURN(auto rt, RateAndStep(ctx));
  const int64_t n = (static_cast<int64_t>(ctx.num_inputs()) - 2) / 4;
  const double alpha = ctx.Float("alpha", 0.9), beta = ctx.Float("beta", 0.999), eps = ctx.Float("epsilon", 1e-6);
  const double norm = ctx.Float("norm_coefficient", 0.0), post = ctx.Float("norm_coefficient_post", 0.0);
  const int64_t t = rt.second;
  Tensor r = t > 0 ? rt.first.Mul(std::sqrt(1 - std::pow(beta, double(t))) / (1 - std::pow(alpha, double(t)))) : rt.first;
  std::vector<Value> xs, vs, hs;
  for (int64_t i = 0; i < n; ++i) {
    ONNX_INPUT(x, 2 + i);
    ONNX_INPUT(g, 2 + n + i);
    ONNX_INPUT(v, 2 + 2 * n + i);
    ONNX_INPUT(h, 2 + 3 * n + i);
    Tensor gr = x.Mul(norm).Add(g);
    Tensor vn = v.Mul(alpha).Add(gr.Mul(1 - alpha));
    Tensor hn = h.Mul(beta).Add(gr.Square().Mul(1 - beta));
    Tensor xn = x.Sub(r.Mul(vn.Div(hn.Sqrt().Add(eps)))).Mul(1 - post);
    xs.push_back(Value::Of(xn.Cast(x.dtype())));
    vs.push_back(Value::Of(vn.Cast(v.dtype())));
    hs.push_back(Value::Of(hn.Cast(h.dtype())));
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

void RegIn(OpTable* t, const char* domain, const char* op, int64_t since, int64_t until, std::vector<std::string> attrs,
           OpImpl impl) {
  t->push_back(OpDef{domain, op, since, until, std::move(attrs), std::move(impl), nullptr});
}


// cos and sin of 2 pi i o / n as (len, out_len) matrices over input index i < used and output index o, each entry
// times `scale(i)`: the DFT and STFT as matmuls.
std::pair<Tensor, Tensor> CosSin(DType f, int64_t len, int64_t out_len, int64_t used, int64_t n,
                                 const std::function<double(int64_t)>& scale, const std::string& device) {
  std::vector<double> cm(static_cast<size_t>(len * out_len), 0.0), sm(cm.size(), 0.0);
  for (int64_t i = 0; i < used; ++i) {
    for (int64_t o = 0; o < out_len; ++o) {
      const double theta = 2 * M_PI * static_cast<double>((i * o) % n) / static_cast<double>(n);
      cm[static_cast<size_t>(i * out_len + o)] = std::cos(theta) * scale(i);
      sm[static_cast<size_t>(i * out_len + o)] = std::sin(theta) * scale(i);
    }
  }
  auto mat = [&](const std::vector<double>& v) {
    return Tensor::FromHost(HostArray::FromDoubles(f, {len, out_len}, v).bytes.data(), f, {len, out_len}, device);
  };
  return {mat(cm), mat(sm)};
}

// ** DFT **
//
// A discrete Fourier transform along one axis is a matmul by cos and sin matrices of (input length, output length)
// built on the host in double: forward X_k = sum_t x_t e^(-2 pi i k t / n), the input cut or zero-padded to
// n = dft_length; onesided keeps k <= n / 2; inverse x_t = (1 / n) sum_k X_k e^(+2 pi i k t / n); inverse and
// onesided is numpy's irfft (the Hermitian half counted twice, a real output).
absl::StatusOr<std::vector<Value>> Dft(OpContext& ctx) {
  ONNX_INPUT(x_in, 0);
  const int64_t r = x_in.ndim();
  if (r < 2 || (x_in.size(r - 1) != 1 && x_in.size(r - 1) != 2))
    return ctx.Error("input's last dim must be 1 (real) or 2 (real and imaginary)");
  if (!x_in.dtype().IsFloat()) return ctx.Error("input must be a float tensor");
  int64_t axis = ctx.opset() >= 20 ? -2 : ctx.Int("axis", 1);
  if (ctx.opset() >= 20 && ctx.Has(2)) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> a, ctx.Ints(2));
    if (a.size() != 1) return ctx.Error("axis must be a scalar");
    axis = a[0];
  }
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r - 1) return ctx.Error(absl::StrCat("axis ", axis, " must name a signal dim"));
  const bool inverse = ctx.Int("inverse", 0) != 0, onesided = ctx.Int("onesided", 0) != 0;
  const int64_t len = x_in.size(axis);
  int64_t n = inverse && onesided ? 2 * (len - 1) : len;
  if (ctx.Has(1)) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dl, ctx.Ints(1));
    if (dl.size() != 1) return ctx.Error("dft_length must be a scalar");
    n = dl[0];
  }
  if (n < 1 || n > 16384) return ctx.Error(absl::StrCat("dft_length ", n, " must be in [1, 16384]"));
  if (len < 1) return ctx.Error("the transformed axis is empty");
  const DType f = x_in.dtype() == dtypes::kFloat64 ? dtypes::kFloat64 : dtypes::kFloat32;
  const bool complex_in = x_in.size(r - 1) == 2;
  const bool real_out = inverse && onesided;
  const int64_t out_len = inverse ? n : (onesided ? n / 2 + 1 : n);

  // The inverse's 1 / n and irfft's weights (k and n - k of the Hermitian spectrum).
  const int64_t used = inverse && onesided ? std::min(len, n / 2 + 1) : std::min(len, n);
  const auto [cmat, smat] = CosSin(f, len, out_len, used, n, [&](int64_t i) {
    const double s = inverse ? 1.0 / static_cast<double>(n) : 1.0;
    return real_out && i > 0 && 2 * i != n ? 2 * s : s;
  }, ctx.device());
  // The signal axis last: (..., len) per part.
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < r - 1; ++d)
    if (d != axis) perm.push_back(d);
  perm.push_back(axis);
  const Tensor x = x_in.Cast(f);
  auto part = [&](int64_t k) {
    std::vector<int64_t> shape = Dims(x);
    shape.back() = 1;
    std::vector<std::pair<int64_t, int64_t>> bounds;
    for (int64_t d = 0; d < r; ++d) bounds.emplace_back(d == r - 1 ? k : 0, d == r - 1 ? k + 1 : x.size(d));
    shape.pop_back();
    return x.Shrink(bounds).Reshape(shape).Permute(perm);
  };
  const Tensor xr = part(0);
  const std::optional<Tensor> xi = complex_in ? std::optional<Tensor>(part(1)) : std::nullopt;
  // forward: Re = xr cos + xi sin, Im = xi cos - xr sin; inverse: Re = xr cos - xi sin, Im = xr sin + xi cos
  const double sg = inverse ? -1.0 : 1.0;
  Tensor re = xr.Matmul(cmat);
  if (xi) re = re.Add(xi->Matmul(smat).Mul(sg));
  std::vector<Tensor> parts = {re};
  if (!real_out) {
    Tensor im = xr.Matmul(smat).Mul(-sg);
    if (xi) im = im.Add(xi->Matmul(cmat));
    parts.push_back(im);
  }
  std::vector<int64_t> inv(r - 1);
  for (int64_t d = 0; d < r - 1; ++d) inv[perm[d]] = d;
  std::vector<Tensor> back;
  for (const Tensor& p : parts) back.push_back(p.Permute(inv));
  return One(Tensor::Stack(back, r - 1).Cast(x_in.dtype()));
}

// ** STFT **
//
// Frames of frame_length every frame_step samples (a strided view of the signal), times the window, then the DFT of
// each frame as matmuls by cos / sin matrices (onesided: the frame_length / 2 + 1 unique bins).
absl::StatusOr<std::vector<Value>> Stft(OpContext& ctx) {
  ONNX_INPUT(sig_in, 0);
  if (sig_in.ndim() != 3 || (sig_in.size(2) != 1 && sig_in.size(2) != 2))
    return ctx.Error("signal must be [batch, length, 1 or 2]");
  if (!sig_in.dtype().IsFloat()) return ctx.Error("signal must be a float tensor");
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> step_v, ctx.Ints(1));
  if (step_v.size() != 1 || step_v[0] < 1) return ctx.Error("frame_step must be a positive scalar");
  const int64_t step = step_v[0], batch = sig_in.size(0), len = sig_in.size(1);
  std::optional<Tensor> window = ctx.OptT(2);
  int64_t flen = window ? window->numel() : 0;
  if (ctx.Has(3)) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> fl, ctx.Ints(3));
    if (fl.size() != 1) return ctx.Error("frame_length must be a scalar");
    if (window && fl[0] != flen) return ctx.Error("frame_length must equal the window's length");
    flen = fl[0];
  }
  if (flen < 1 || flen > len || flen > 16384)
    return ctx.Error(absl::StrCat("frame_length ", flen, " must be in [1, min(signal length, 16384)]"));
  const bool complex_in = sig_in.size(2) == 2;
  const bool onesided = ctx.Int("onesided", 1) != 0;
  if (onesided && complex_in) return ctx.Error("onesided needs a real signal");
  const int64_t bins = onesided ? flen / 2 + 1 : flen;
  const DType f = sig_in.dtype() == dtypes::kFloat64 ? dtypes::kFloat64 : dtypes::kFloat32;
  const auto [cmat, smat] = CosSin(f, flen, bins, flen, flen, [](int64_t) { return 1.0; }, ctx.device());
  const Tensor sig = sig_in.Cast(f);
  auto framed = [&](int64_t k) {  // [batch, frames, flen] of part k, windowed
    Tensor p = sig.Shrink({{0, batch}, {0, len}, {k, k + 1}}).Reshape({batch, len});
    p = p.Pool({flen}, {step}, {1});
    if (window) p = p.Mul(window->Cast(f).Reshape({1, 1, flen}));
    return p;
  };
  const Tensor xr = framed(0);
  Tensor re = xr.Matmul(cmat), im = xr.Matmul(smat).Neg();
  if (complex_in) {
    const Tensor xi = framed(1);
    re = re.Add(xi.Matmul(smat));
    im = im.Add(xi.Matmul(cmat));
  }
  return One(Tensor::Stack({re, im}, 3).Cast(sig_in.dtype()));
}

// MelWeightMatrix (dft_length / 2 + 1, num_mel_bins): triangular filters between mel-spaced points, computed on the
// host as the spec defines them: num_mel_bins + 2 points from lower_edge_hertz in mel steps of (high - low) / (bins +
// 2), each mapped back to hertz and to the spectrogram bin floor((dft_length + 1) * hz / sample_rate); filter i
// rises from point i to point i + 1 and falls to point i + 2.
absl::StatusOr<std::vector<Value>> MelWeightMatrix(OpContext& ctx) {
  std::vector<double> v(5);
  for (size_t i = 0; i < 5; ++i) {
    KILN_ASSIGN_OR_RETURN(HostArrayPtr h, ctx.Host(i));
    if (h->numel() != 1) return ctx.Error("every input must be a scalar");
    v[i] = h->GetDouble(0);
  }
  const int64_t mels = static_cast<int64_t>(v[0]), dft = static_cast<int64_t>(v[1]);
  const double rate = v[2], low = v[3], high = v[4];
  if (mels < 1 || mels > 4096 || dft < 1 || dft > 1 << 16 || !(rate > 0) || low < 0 || !(high > low))
    return ctx.Error("num_mel_bins (1..4096), dft_length (1..65536), sample_rate > 0 and 0 <= lower < upper edge");
  KILN_ASSIGN_OR_RETURN(DType dt, OnnxToDType(static_cast<int32_t>(ctx.Int("output_datatype", 1))));
  const int64_t bins = dft / 2 + 1;
  auto mel = [](double hz) { return 2595.0 * std::log10(1 + hz / 700.0); };
  const double lo_mel = mel(low), step = (mel(high) - lo_mel) / static_cast<double>(mels + 2);
  std::vector<int64_t> point(mels + 2);
  for (int64_t i = 0; i < mels + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * step + lo_mel) / 2595.0) - 1);
    point[i] = static_cast<int64_t>(std::floor(static_cast<double>(dft + 1) * hz / rate));
    if (point[i] < 0 || point[i] >= bins) return ctx.Error("upper_edge_hertz lies beyond the spectrogram's bins");
  }
  std::vector<double> w(static_cast<size_t>(bins * mels), 0.0);
  auto at = [&](int64_t j, int64_t i) -> double& { return w[static_cast<size_t>(j * mels + i)]; };
  for (int64_t i = 0; i < mels; ++i) {
    const int64_t a = point[i], b = point[i + 1], c = point[i + 2];
    if (b == a) {
      at(b, i) = 1;
    } else {
      for (int64_t j = a; j <= b; ++j) at(j, i) = static_cast<double>(j - a) / static_cast<double>(b - a);
    }
    for (int64_t j = b; j < c; ++j) at(j, i) = static_cast<double>(c - j) / static_cast<double>(c - b);
  }
  return std::vector<Value>{Value::Constant(HostArray::FromDoubles(dt, {bins, mels}, w))};
}
}  // namespace

void RegisterExtraOps(OpTable* t) {
  Reg(t, "LinearAttention", 27, kMaxOnnxOpset, {"chunk_size", "kv_num_heads", "q_num_heads", "scale", "update_rule"},
      LinearAttention);
  Reg(t, "CausalConvWithState", 27, kMaxOnnxOpset, {"activation"}, CausalConvWithState);
  Reg(t, "AffineGrid", 20, kMaxOnnxOpset, {"align_corners"}, AffineGrid);
  Reg(t, "BitCast", 26, kMaxOnnxOpset, {"to"}, BitCast);
  Reg(t, "HannWindow", 17, kMaxOnnxOpset, {"output_datatype", "periodic"}, Window(0, 0, 0, true));
  Reg(t, "HammingWindow", 17, kMaxOnnxOpset, {"output_datatype", "periodic"}, Window(25.0 / 46, 21.0 / 46, 0, false));
  Reg(t, "BlackmanWindow", 17, kMaxOnnxOpset, {"output_datatype", "periodic"}, Window(0.42, 0.5, 0.08, false));
  Reg(t, "Det", 11, kMaxOnnxOpset, {}, Det);
  Reg(t, "DFT", 17, kMaxOnnxOpset, {"axis", "inverse", "onesided"}, Dft);
  Reg(t, "STFT", 17, kMaxOnnxOpset, {"onesided"}, Stft);
  Reg(t, "MelWeightMatrix", 17, kMaxOnnxOpset, {"output_datatype"}, MelWeightMatrix);
  Reg(t, "Unique", 11, kMaxOnnxOpset, {"axis", "sorted"}, Unique);
  Reg(t, "NonMaxSuppression", 10, kMaxOnnxOpset, {"center_point_box"}, NonMaxSuppression);
  const char* kTraining = "ai.onnx.preview.training";
  RegIn(t, kTraining, "Adagrad", 1, 1, {"decay_factor", "epsilon", "norm_coefficient"}, Adagrad);
  RegIn(t, kTraining, "Momentum", 1, 1, {"alpha", "beta", "mode", "norm_coefficient"}, Momentum);
  RegIn(t, kTraining, "Adam", 1, 1, {"alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"}, Adam);
}

}  // namespace kiln::onnx
