// Attention (opset 23/24) and RotaryEmbedding (opset 23), following onnx's reference implementation
// (onnx/reference/ops/op_attention.py, op_rotary_embedding.py) step by step.
#include <cmath>
#include <limits>

#include "engine/onnx/ops_util.h"

namespace kiln::onnx {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// (B, S, H * D) -> (B, H, S, D)
Tensor SplitHeads(const Tensor& x, int64_t heads) {
  const int64_t b = x.size(0), s = x.size(1), hd = x.size(2);
  return x.Reshape({b, s, heads, hd / heads}).Permute({0, 2, 1, 3});
}

// Interleaved repeat of KV heads for grouped-query attention: [h0, h0, h1, h1, ...].
Tensor RepeatHeads(const Tensor& x, int64_t reps) {
  if (reps == 1) return x;
  const int64_t b = x.size(0), h = x.size(1), s = x.size(2), d = x.size(3);
  return x.Reshape({b, h, 1, s, d}).Expand({b, h, reps, s, d}).Reshape({b, h * reps, s, d});
}

absl::StatusOr<std::vector<Value>> Attention(OpContext& ctx) {
  ONNX_INPUT(q, 0);
  ONNX_INPUT(k, 1);
  ONNX_INPUT(v, 2);
  const DType dt = q.dtype();
  const bool three_d = q.ndim() == 3;
  if (q.ndim() != k.ndim() || q.ndim() != v.ndim() || (q.ndim() != 3 && q.ndim() != 4)) {
    return ctx.Error("Q, K and V must all be 3-D or all 4-D");
  }
  if (three_d) {
    if (!ctx.HasAttr("q_num_heads") || !ctx.HasAttr("kv_num_heads")) {
      return ctx.Error("3-D inputs need q_num_heads and kv_num_heads");
    }
    q = SplitHeads(q, ctx.Int("q_num_heads", 1));
    k = SplitHeads(k, ctx.Int("kv_num_heads", 1));
    v = SplitHeads(v, ctx.Int("kv_num_heads", 1));
  }
  const DType f = IsLowFloat(dt) ? dtypes::kFloat32 : dt;
  q = q.Cast(f);
  k = k.Cast(f);
  v = v.Cast(f);
  double scale = ctx.HasAttr("scale") ? ctx.Float("scale", 1.0) : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  scale = std::sqrt(scale);
  int64_t past = 0;
  if (ctx.Has(4)) {
    ONNX_INPUT(pk, 4);
    past = pk.size(2);
    k = Tensor::Cat({pk.Cast(f), k}, 2);
  }
  if (ctx.Has(5)) {
    ONNX_INPUT(pv, 5);
    v = Tensor::Cat({pv.Cast(f), v}, 2);
  }
  const Tensor present_k = k, present_v = v;
  const int64_t sq = q.size(2), skv = k.size(2), batch = q.size(0);
  // bias (..., sq, skv): mask, causal, padding
  Tensor bias = Tensor::Zeros({sq, skv}, f, ctx.device());
  std::optional<Tensor> mask;
  if (ctx.Has(3)) {
    ONNX_INPUT(m, 3);
    const int64_t pad = skv - m.size(-1);
    if (pad > 0) {
      std::vector<std::pair<int64_t, int64_t>> p(m.ndim(), {0, 0});
      p.back() = {0, pad};
      m = m.dtype().IsBool() ? m.Pad(p, false) : m.Pad(p, -kInf);
    }
    mask = m.dtype().IsBool() ? m.Where(m.ZerosLike(f), m.FullLike(-kInf, f)) : m.Cast(f);
  }
  if (ctx.Int("is_causal", 0) != 0) {
    Tensor row = Tensor::Arange(0, sq, 1, dtypes::kInt64, ctx.device()).Reshape({sq, 1});
    Tensor col = Tensor::Arange(0, skv, 1, dtypes::kInt64, ctx.device()).Reshape({1, skv});
    Tensor causal = col.Sub(past).Gt(row).Where(bias.FullLike(-kInf), bias);
    bias = mask ? mask->Add(causal) : causal;
  } else if (mask) {
    bias = bias.Add(*mask);
  }
  if (ctx.Has(6)) {
    ONNX_INPUT(lens, 6);
    Tensor col = Tensor::Arange(0, skv, 1, dtypes::kInt64, ctx.device()).Reshape({1, skv});
    Tensor keep = col.Lt(lens.Cast(dtypes::kInt64).Reshape({batch, 1}));
    Tensor padding = keep.Where(Tensor::Zeros({1}, f, ctx.device()), Tensor::Full({1}, -kInf, f, ctx.device()));
    while (bias.ndim() < 4) bias = bias.Unsqueeze(0);
    bias = bias.Add(padding.Reshape({batch, 1, 1, skv}));
  }
  const int64_t hq = q.size(1), hk = k.size(1);
  if (hq != hk) {
    if (hq % hk != 0 || v.size(1) != hk) return ctx.Error("query heads must be a multiple of the key/value heads");
    k = RepeatHeads(k, hq / hk);
    v = RepeatHeads(v, hq / hk);
  }
  Tensor qk = q.Mul(scale).Matmul(k.Mul(scale).Transpose(2, 3));
  const double softcap = ctx.Float("softcap", 0.0);
  if (softcap > 0) qk = qk.Div(softcap).Tanh().Mul(softcap);
  const int64_t mode = ctx.Int("qk_matmul_output_mode", 0);
  Tensor qk_out = qk;
  Tensor with_bias = qk.Add(bias);
  if (mode == 2) qk_out = with_bias;
  if (ctx.HasAttr("softmax_precision")) {
    KILN_ASSIGN_OR_RETURN(DType sp, OnnxToDType(static_cast<int32_t>(ctx.Int("softmax_precision", 1))));
    with_bias = with_bias.Cast(sp);
  }
  Tensor x = with_bias.Contiguous();
  Tensor e = x.Sub(x.Max(-1, true)).Exp();
  Tensor probs = e.Div(e.Sum(-1, true));
  if (mode == 3) qk_out = probs;
  Tensor y = probs.Cast(f).Matmul(v);
  if (three_d) y = y.Permute({0, 2, 1, 3}).Reshape({y.size(0), y.size(2), -1});
  return std::vector<Value>{Value::Of(y.Cast(dt)), Value::Of(present_k.Cast(dt)), Value::Of(present_v.Cast(dt)),
                            Value::Of(qk_out.Cast(dt))};
}

// RotaryEmbedding: X (B, S, H*D) with num_heads, or (B, H, S, D); caches (max_pos, D_rot/2) or (B, S, D_rot/2) when
// position_ids are absent.
absl::StatusOr<std::vector<Value>> RotaryEmbedding(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  ONNX_INPUT(cos_cache, 1);
  ONNX_INPUT(sin_cache, 2);
  const Shape orig = x.shape();
  const bool interleaved = ctx.Int("interleaved", 0) != 0;
  Tensor xs;  // (B, S, H, D)
  if (x.ndim() == 4) {
    xs = x.Permute({0, 2, 1, 3});
  } else if (x.ndim() == 3) {
    const int64_t h = ctx.Int("num_heads", 0);
    if (h <= 0) return ctx.Error("3-D input needs num_heads");
    xs = x.Reshape({x.size(0), x.size(1), h, x.size(2) / h});
  } else {
    return ctx.Error("input must be 3-D or 4-D");
  }
  const int64_t d = xs.size(3);
  const int64_t rot = ctx.Int("rotary_embedding_dim", 0) > 0 ? ctx.Int("rotary_embedding_dim", 0) : d;
  const int64_t b = xs.size(0), s = xs.size(1), h = xs.size(2);
  Tensor c = cos_cache, sn = sin_cache;
  if (ctx.Has(3)) {  // position_ids (B, S): gather rows
    ONNX_INPUT(pos, 3);
    const int64_t maxp = c.size(0), half = c.size(1);
    Tensor onehot = pos.Cast(dtypes::kInt64).Reshape({b, s, 1, 1})
                        .Eq(Tensor::Arange(0, maxp, 1, dtypes::kInt64, ctx.device()).Reshape({1, 1, maxp, 1}));
    c = onehot.Where(c.Reshape({1, 1, maxp, half}), c.ZerosLike().Reshape({1, 1, maxp, half})).Sum(2, false, c.dtype());
    sn = onehot.Where(sn.Reshape({1, 1, maxp, half}), sn.ZerosLike().Reshape({1, 1, maxp, half})).Sum(2, false, sn.dtype());
  }
  // c, sn: (B, S, rot/2) -> (B, S, 1, rot/2)
  c = c.Shrink({{0, c.size(0)}, {0, c.size(1)}, {0, rot / 2}}).Reshape({c.size(0), c.size(1), 1, rot / 2});
  sn = sn.Shrink({{0, sn.size(0)}, {0, sn.size(1)}, {0, rot / 2}}).Reshape({sn.size(0), sn.size(1), 1, rot / 2});
  const DType f = IsLowFloat(x.dtype()) ? dtypes::kFloat32 : x.dtype();
  Tensor xf = xs.Cast(f);
  c = c.Cast(f);
  sn = sn.Cast(f);
  Tensor xr = xf.Shrink({{0, b}, {0, s}, {0, h}, {0, rot}});
  Tensor x1, x2;
  if (interleaved) {
    Tensor pairs = xr.Reshape({b, s, h, rot / 2, 2});
    x1 = pairs.Shrink({{0, b}, {0, s}, {0, h}, {0, rot / 2}, {0, 1}}).Reshape({b, s, h, rot / 2});
    x2 = pairs.Shrink({{0, b}, {0, s}, {0, h}, {0, rot / 2}, {1, 2}}).Reshape({b, s, h, rot / 2});
  } else {
    x1 = xr.Shrink({{0, b}, {0, s}, {0, h}, {0, rot / 2}});
    x2 = xr.Shrink({{0, b}, {0, s}, {0, h}, {rot / 2, rot}});
  }
  Tensor real = x1.Mul(c).Sub(x2.Mul(sn));
  Tensor imag = x1.Mul(sn).Add(x2.Mul(c));
  Tensor rotated = interleaved ? Tensor::Stack({real, imag}, -1).Reshape({b, s, h, rot}) : Tensor::Cat({real, imag}, -1);
  Tensor out = rot < d ? Tensor::Cat({rotated, xf.Shrink({{0, b}, {0, s}, {0, h}, {rot, d}})}, -1) : rotated;
  out = out.Cast(x.dtype());
  if (orig.size() == 4) return One(out.Permute({0, 2, 1, 3}));
  return One(out.Reshape(std::vector<int64_t>(orig.begin(), orig.end())));
}

}  // namespace

void RegisterAttentionOps(OpTable* t) {
  Reg(t, "Attention", 23, kMaxOnnxOpset,
      {"is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale", "softcap", "softmax_precision"},
      Attention);
  Reg(t, "RotaryEmbedding", 23, kMaxOnnxOpset, {"interleaved", "num_heads", "rotary_embedding_dim"},
      RotaryEmbedding);
}

}  // namespace kiln::onnx
