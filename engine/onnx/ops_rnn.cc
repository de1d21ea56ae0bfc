// Recurrent ONNX ops: RNN, GRU, LSTM (opsets 7 through 22: directions, layouts, sequence_lens, initial states,
// peepholes, clip, input_forget, linear_before_reset, every activation the spec names).
//
// A recurrence unrolls into Tensor ops, as tinygrad runs one: the input projection of every step is one matmul
// (X W^T + Wb over [seq * batch, input]); each step adds H R^T + Rb and applies the gates, so the graph grows with the
// sequence length and the scheduler fuses each step's elementwise work into its matmul's epilogue. A batch entry past
// its sequence_lens keeps its state (and outputs zeros), which also gives the reverse direction its per-entry start:
// stepping t = seq-1 .. 0, entry b's state changes first at t = len[b] - 1.
#include <cmath>
#include <functional>

#include "engine/onnx/ops_util.h"

namespace kiln::onnx {
namespace {

using Activation = std::function<Tensor(const Tensor&)>;

// The spec's activation functions by name; `alphas` / `betas` are consumed in order by those that take them.
absl::StatusOr<Activation> MakeActivation(const OpContext& ctx, const std::string& name, const std::vector<double>& alphas,
                                          const std::vector<double>& betas, size_t* ai, size_t* bi) {
  auto alpha = [&](double def) { return *ai < alphas.size() ? alphas[(*ai)++] : def; };
  auto beta = [&](double def) { return *bi < betas.size() ? betas[(*bi)++] : def; };
  if (name == "Tanh") return Activation([](const Tensor& x) { return x.Tanh(); });
  if (name == "Sigmoid") return Activation([](const Tensor& x) { return x.Sigmoid(); });
  if (name == "Relu") return Activation([](const Tensor& x) { return x.Relu(); });
  if (name == "Softsign") return Activation([](const Tensor& x) { return x.Div(x.Abs().Add(1.0)); });
  if (name == "Softplus") return Activation([](const Tensor& x) { return Softplus(x); });
  if (name == "Affine") {
    const double a = alpha(1.0), b = beta(0.0);
    return Activation([a, b](const Tensor& x) { return x.Mul(a).Add(b); });
  }
  if (name == "LeakyRelu") {
    const double a = alpha(0.01);
    return Activation([a](const Tensor& x) { return x.Gt(0).Where(x, x.Mul(a)); });
  }
  if (name == "ThresholdedRelu") {
    const double a = alpha(1.0);
    return Activation([a](const Tensor& x) { return x.Gt(a).Where(x, x.ZerosLike()); });
  }
  if (name == "ScaledTanh") {
    const double a = alpha(1.0), b = beta(1.0);
    return Activation([a, b](const Tensor& x) { return x.Mul(b).Tanh().Mul(a); });
  }
  if (name == "HardSigmoid") {
    const double a = alpha(0.2), b = beta(0.5);
    return Activation([a, b](const Tensor& x) { return x.Mul(a).Add(b).Maximum(0.0).Minimum(1.0); });
  }
  if (name == "Elu") {
    const double a = alpha(1.0);
    return Activation([a](const Tensor& x) { return x.Gt(0).Where(x, x.Exp().Sub(1.0).Mul(a)); });
  }
  return ctx.Error(absl::StrCat("activation '", name, "' is not one the spec names"));
}

enum class Cell { kRnn, kGru, kLstm };

absl::StatusOr<std::vector<Value>> Recurrent(OpContext& ctx, Cell cell) {
  const int64_t gates = cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 3 : 4;
  ONNX_INPUT(x_in, 0);
  ONNX_INPUT(w, 1);
  ONNX_INPUT(r, 2);
  const std::string direction = ctx.String("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return ctx.Error(absl::StrCat("direction '", direction, "' must be forward, reverse or bidirectional"));
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const int64_t layout = ctx.opset() >= 14 ? ctx.Int("layout", 0) : 0;
  if (layout != 0 && layout != 1) return ctx.Error("layout must be 0 or 1");
  if (x_in.ndim() != 3) return ctx.Error("X must have rank 3");
  const DType dt = x_in.dtype();
  if (!dt.IsFloat()) return ctx.Error("X must be a float tensor");
  const DType f = dt == dtypes::kFloat64 ? dtypes::kFloat64 : dtypes::kFloat32;
  Tensor x = x_in.Cast(f);
  if (layout == 1) x = x.Permute({1, 0, 2});  // [seq, batch, input]
  const int64_t seq = x.size(0), batch = x.size(1), in = x.size(2);
  if (w.ndim() != 3 || w.size(0) != dirs || w.size(2) != in || w.size(1) % gates != 0)
    return ctx.Error(absl::StrCat("W must be [", dirs, ", ", gates, " * hidden_size, ", in, "]"));
  const int64_t hidden = w.size(1) / gates;
  if (ctx.HasAttr("hidden_size") && ctx.Int("hidden_size", hidden) != hidden)
    return ctx.Error(absl::StrCat("hidden_size ", ctx.Int("hidden_size", 0), " does not match W's ", hidden));
  if (r.ndim() != 3 || r.size(0) != dirs || r.size(1) != gates * hidden || r.size(2) != hidden)
    return ctx.Error(absl::StrCat("R must be [", dirs, ", ", gates * hidden, ", ", hidden, "]"));
  if (seq < 1 || batch < 1) return ctx.Error("X must have a sequence and a batch");
  if (seq > 4096) return ctx.Error(absl::StrCat("sequence length ", seq, " exceeds 4096 (the recurrence unrolls)"));

  std::optional<Tensor> b = ctx.OptT(3);
  if (b && (b->ndim() != 2 || b->size(0) != dirs || b->size(1) != 2 * gates * hidden))
    return ctx.Error(absl::StrCat("B must be [", dirs, ", ", 2 * gates * hidden, "]"));
  std::optional<Tensor> lens = ctx.OptT(4);
  if (lens && (lens->ndim() != 1 || lens->size(0) != batch)) return ctx.Error("sequence_lens must be [batch_size]");
  auto state_in = [&](size_t i) -> absl::StatusOr<std::optional<Tensor>> {
    std::optional<Tensor> s = ctx.OptT(i);
    if (!s) return s;
    Tensor t = s->Cast(f);
    if (layout == 1) t = t.Permute({1, 0, 2});
    if (t.ndim() != 3 || t.size(0) != dirs || t.size(1) != batch || t.size(2) != hidden)
      return ctx.Error("an initial state must be [num_directions, batch_size, hidden_size]");
    return std::optional<Tensor>(t);
  };
  KILN_ASSIGN_OR_RETURN(std::optional<Tensor> h0, state_in(5));
  std::optional<Tensor> c0, p;
  if (cell == Cell::kLstm) {
    KILN_ASSIGN_OR_RETURN(c0, state_in(6));
    p = ctx.OptT(7);
    if (p && (p->ndim() != 2 || p->size(0) != dirs || p->size(1) != 3 * hidden))
      return ctx.Error(absl::StrCat("P must be [", dirs, ", ", 3 * hidden, "]"));
  }

  // Activations: per direction f (RNN), f, g (GRU) or f, g, h (LSTM).
  const size_t per_dir = cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 2 : 3;
  std::vector<std::string> names = ctx.Strings("activations").value_or(std::vector<std::string>{});
  if (names.empty()) {
    const std::vector<std::string> def = cell == Cell::kRnn   ? std::vector<std::string>{"Tanh"}
                                         : cell == Cell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                              : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), def.begin(), def.end());
  }
  if (names.size() != per_dir * static_cast<size_t>(dirs))
    return ctx.Error(absl::StrCat("activations lists ", names.size(), " functions; this op takes ",
                                  per_dir * static_cast<size_t>(dirs)));
  const std::vector<double> alphas = ctx.Floats("activation_alpha").value_or(std::vector<double>{});
  const std::vector<double> betas = ctx.Floats("activation_beta").value_or(std::vector<double>{});
  std::vector<Activation> acts;
  size_t ai = 0, bi = 0;
  for (const std::string& n : names) {
    KILN_ASSIGN_OR_RETURN(Activation a, MakeActivation(ctx, n, alphas, betas, &ai, &bi));
    acts.push_back(std::move(a));
  }
  const double clip = ctx.Float("clip", 0.0);
  const bool has_clip = ctx.HasAttr("clip");
  if (has_clip && !(clip > 0)) return ctx.Error("clip must be positive");
  const bool input_forget = cell == Cell::kLstm && ctx.Int("input_forget", 0) != 0;
  const bool linear_before_reset = cell == Cell::kGru && ctx.Int("linear_before_reset", 0) != 0;
  auto clipped = [&](const Tensor& t) { return has_clip ? t.Maximum(-clip).Minimum(clip) : t; };

  // Per-entry validity of step t: [batch, 1] (sequence_lens; all valid without it).
  auto valid = [&](int64_t t) -> std::optional<Tensor> {
    if (!lens) return std::nullopt;
    return lens->Cast(dtypes::kInt64).Gt(t).Reshape({batch, 1});
  };

  std::vector<Tensor> ys;       // per direction: [seq, batch, hidden]
  std::vector<Tensor> hs, cs;   // per direction: [batch, hidden]
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const Tensor wd = w.Cast(f).Shrink({{d, d + 1}, {0, gates * hidden}, {0, in}}).Reshape({gates * hidden, in});
    const Tensor rd = r.Cast(f).Shrink({{d, d + 1}, {0, gates * hidden}, {0, hidden}}).Reshape({gates * hidden, hidden});
    std::optional<Tensor> wb, rb;
    if (b) {
      const Tensor bd = b->Cast(f).Shrink({{d, d + 1}, {0, 2 * gates * hidden}}).Reshape({2 * gates * hidden});
      wb = bd.Shrink({{0, gates * hidden}});
      rb = bd.Shrink({{gates * hidden, 2 * gates * hidden}});
    }
    // Every step's input projection at once: [seq, batch, gates * hidden].
    Tensor xw = x.Reshape({seq * batch, in}).Matmul(wd.Permute({1, 0}));
    if (wb) xw = xw.Add(*wb);
    xw = xw.Reshape({seq, batch, gates * hidden}).Contiguous();
    const Tensor rt = rd.Permute({1, 0}).Contiguous();  // [hidden, gates * hidden]
    const bool gru_reset_first = cell == Cell::kGru && !linear_before_reset;
    const Tensor rt_zr = rt.Shrink({{0, hidden}, {0, 2 * hidden}});
    auto gate = [&](const Tensor& t, int64_t g) { return t.Shrink({{0, batch}, {g * hidden, (g + 1) * hidden}}); };
    auto vec = [&](const std::optional<Tensor>& v, int64_t g) {  // one gate's slice of a bias, as [1, hidden]
      return v->Shrink({{g * hidden, (g + 1) * hidden}}).Reshape({1, hidden});
    };
    std::optional<Tensor> pi, po, pf;
    if (p) {
      const Tensor pd = p->Cast(f).Shrink({{d, d + 1}, {0, 3 * hidden}}).Reshape({3 * hidden});
      pi = vec(pd, 0), po = vec(pd, 1), pf = vec(pd, 2);
    }
    const Activation& fa = acts[d * per_dir];
    const Activation* ga = per_dir > 1 ? &acts[d * per_dir + 1] : nullptr;
    const Activation* ha = per_dir > 2 ? &acts[d * per_dir + 2] : nullptr;

    Tensor h = h0 ? h0->Shrink({{d, d + 1}, {0, batch}, {0, hidden}}).Reshape({batch, hidden})
                  : Tensor::Zeros({batch, hidden}, f, x.device());
    Tensor c = c0 ? c0->Shrink({{d, d + 1}, {0, batch}, {0, hidden}}).Reshape({batch, hidden})
                  : Tensor::Zeros({batch, hidden}, f, x.device());
    std::vector<Tensor> out(seq);
    for (int64_t i = 0; i < seq; ++i) {
      const int64_t t = reverse ? seq - 1 - i : i;
      const Tensor xt = xw.Shrink({{t, t + 1}, {0, batch}, {0, gates * hidden}}).Reshape({batch, gates * hidden});
      // [batch, gates * hidden]; a GRU resetting before the product takes its h gate's product from r * h below
      Tensor hr = gru_reset_first ? h.Matmul(rt_zr) : h.Matmul(rt);
      if (rb) hr = hr.Add(rb->Shrink({{0, hr.size(1)}}).Reshape({1, hr.size(1)}));
      Tensor h_new, c_new = c;
      if (cell == Cell::kRnn) {
        h_new = fa(clipped(xt.Add(hr)));
      } else if (cell == Cell::kGru) {  // gates z, r, h
        const Tensor z = fa(clipped(gate(xt, 0).Add(gate(hr, 0))));
        const Tensor rg = fa(clipped(gate(xt, 1).Add(gate(hr, 1))));
        Tensor pre;
        if (linear_before_reset) {
          pre = gate(xt, 2).Add(rg.Mul(gate(hr, 2)));
        } else {
          Tensor rh = rg.Mul(h).Matmul(rt.Shrink({{0, hidden}, {2 * hidden, 3 * hidden}}));
          if (rb) rh = rh.Add(vec(rb, 2));
          pre = gate(xt, 2).Add(rh);
        }
        const Tensor hh = (*ga)(clipped(pre));
        h_new = z.RSub(1.0).Mul(hh).Add(z.Mul(h));
      } else {  // gates i, o, f, c
        Tensor ipre = gate(xt, 0).Add(gate(hr, 0));
        Tensor fpre = gate(xt, 2).Add(gate(hr, 2));
        if (pi) ipre = ipre.Add(pi->Mul(c));
        if (pf) fpre = fpre.Add(pf->Mul(c));
        const Tensor ig = fa(clipped(ipre));
        const Tensor fg = input_forget ? ig.RSub(1.0) : fa(clipped(fpre));
        const Tensor cg = (*ga)(clipped(gate(xt, 3).Add(gate(hr, 3))));
        c_new = fg.Mul(c).Add(ig.Mul(cg));
        Tensor opre = gate(xt, 1).Add(gate(hr, 1));
        if (po) opre = opre.Add(po->Mul(c_new));
        const Tensor og = fa(clipped(opre));
        h_new = og.Mul((*ha)(c_new));
      }
      if (std::optional<Tensor> v = valid(t)) {
        out[t] = v->Where(h_new, h_new.ZerosLike());
        h = v->Where(h_new, h);
        c = v->Where(c_new, c);
      } else {
        out[t] = h_new;
        h = h_new;
        c = c_new;
      }
      // Each step's state is stored: the next step's matmul reads it, and unstored the graph would recompute the
      // whole chain per step.
      h = h.Contiguous();
      if (cell == Cell::kLstm) c = c.Contiguous();
    }
    ys.push_back(Tensor::Stack(out, 0));  // [seq, batch, hidden]
    hs.push_back(h);
    cs.push_back(c);
  }
  Tensor y = Tensor::Stack(ys, 1);         // [seq, dirs, batch, hidden]
  Tensor yh = Tensor::Stack(hs, 0);        // [dirs, batch, hidden]
  Tensor yc = Tensor::Stack(cs, 0);
  if (layout == 1) {
    y = y.Permute({2, 0, 1, 3});           // [batch, seq, dirs, hidden]
    yh = yh.Permute({1, 0, 2});            // [batch, dirs, hidden]
    yc = yc.Permute({1, 0, 2});
  }
  std::vector<Value> res = {Value::Of(y.Cast(dt)), Value::Of(yh.Cast(dt))};
  if (cell == Cell::kLstm) res.push_back(Value::Of(yc.Cast(dt)));
  return res;
}

absl::StatusOr<std::vector<Value>> Rnn(OpContext& ctx) { return Recurrent(ctx, Cell::kRnn); }
absl::StatusOr<std::vector<Value>> Gru(OpContext& ctx) { return Recurrent(ctx, Cell::kGru); }
absl::StatusOr<std::vector<Value>> Lstm(OpContext& ctx) { return Recurrent(ctx, Cell::kLstm); }

}  // namespace

void RegisterRnnOps(OpTable* t) {
  const std::vector<std::string> common = {"activation_alpha", "activation_beta", "activations", "clip",
                                           "direction", "hidden_size", "layout"};
  std::vector<std::string> gru = common, lstm = common;
  gru.push_back("linear_before_reset");
  lstm.push_back("input_forget");
  Reg(t, "RNN", 7, kMaxOnnxOpset, common, Rnn);
  Reg(t, "GRU", 7, kMaxOnnxOpset, gru, Gru);
  Reg(t, "LSTM", 7, kMaxOnnxOpset, lstm, Lstm);
}

}  // namespace kiln::onnx
