// Linear algebra and softmax-family ONNX ops: MatMul, Gemm, Einsum, Softmax / LogSoftmax / Hardmax, CumSum,
// CumProd, Trilu, MatMulInteger.
#include <optional>
#include <map>
#include <set>

#include "engine/onnx/ops_util.h"
#include "engine/realize/realize.h"

namespace kiln::onnx {

// sum_k (a - za)(b - zb) = sum_k a*b - zb * sum_k a - za * sum_k b + K * za * zb: the product of the raw 8-bit
// operands is a plain integer matmul, which the CPU's integer tensor core takes (codegen/tc.cc; a zero point
// subtracted inside the sum hid it), and sum_k b of a weight is computed once. int32 arithmetic wraps the same
// either way, so the result is the same bit for bit. A computed a (DynamicQuantizeLinear's output) is stored as its
// 8 bits first: inlined, it would be recomputed for every column, and its casts, folded together, would no longer
// be an 8-bit operand.
// A constant B (an initializer) is read through a copy packed for the CPU's tensor core (Tensor::Matmul, kConstant).
Tensor IntegerMatmul(Tensor a, const Tensor& b, const std::optional<Tensor>& za, const std::optional<Tensor>& zb) {
  if (!a.IsRealized()) a = a.Contiguous();
  const Tensor ai = a.Cast(dtypes::kInt32), bi = b.Cast(dtypes::kInt32);
  Tensor y = ai.Matmul(bi, std::nullopt, IsMarkedConstant(b.uop()) ? MatmulRhs::kConstant : MatmulRhs::kAny);
  std::optional<Tensor> zai, zbi;
  // a per-row zero point (M,) applies along a's rows, a per-column one (N,) along b's columns
  if (za) zai = za->ndim() == 1 && za->numel() > 1 ? za->Cast(dtypes::kInt32).Reshape({-1, 1}) : za->Cast(dtypes::kInt32);
  if (zb) zbi = zb->numel() > 1 ? zb->Cast(dtypes::kInt32) : zb->Cast(dtypes::kInt32).Reshape({});
  if (zbi) y = y.Sub(ai.Sum({-1}, /*keepdim=*/true).Mul(*zbi));
  if (zai) y = y.Sub(zai->Mul(bi.ndim() == 1 ? bi.Sum({0}) : bi.Sum({-2}, /*keepdim=*/true)));
  if (zai && zbi) y = y.Add(zai->Mul(*zbi).Mul(static_cast<int64_t>(a.size(-1))));
  return y;
}

namespace {

// float16/bfloat16 products accumulate in float32 (as the reference does) and are cast back. A B that is an
// initializer (marked constant) is read through a packed copy the JIT makes once (MatmulRhs::kConstant).
Tensor MatmulOf(const Tensor& a, const Tensor& b) {
  if (IsLowFloat(a.dtype())) return a.Cast(dtypes::kFloat32).Matmul(b.Cast(dtypes::kFloat32)).Cast(a.dtype());
  return a.Matmul(b, std::nullopt, IsMarkedConstant(b.uop()) ? MatmulRhs::kConstant : MatmulRhs::kAny);
}

absl::StatusOr<std::vector<Value>> MatMul(OpContext& ctx) {
  ONNX_INPUT(a, 0);
  ONNX_INPUT(b, 1);
  // A B that the graph computes (not a stored buffer) is stored first, in its own [.., K, N] layout, when A has rows
  // to share it. Attention's Q @ K^T reads K^T as a transposed view of the key projection: no output axis has a
  // contiguous load (MatmulTile's lanes), so the scores ran as 16-lane dot products summed horizontally one output
  // at a time (MiniLM, 12 x 128 x 128 x 32 per layer: 1.1 ms). A B computed from weights only is a constant call.
  if (!b.IsRealized() && b.ndim() >= 2 && a.ndim() >= 2 && a.size(-2) >= 8) b = b.Contiguous();
  return One(MatmulOf(a, b));
}

absl::StatusOr<std::vector<Value>> MatMulInteger(OpContext& ctx) {
  ONNX_INPUT(a, 0);
  ONNX_INPUT(b, 1);
  return One(IntegerMatmul(a, b, ctx.OptT(2), ctx.OptT(3)));
}

absl::StatusOr<std::vector<Value>> Gemm(OpContext& ctx) {
  ONNX_INPUT(a, 0);
  ONNX_INPUT(b, 1);
  if (a.ndim() != 2 || b.ndim() != 2) return ctx.Error("A and B must be 2-D");
  if (ctx.Int("transA", 0)) a = a.Transpose(0, 1);
  if (ctx.Int("transB", 0)) b = b.Transpose(0, 1);
  const double alpha = ctx.Float("alpha", 1.0), beta = ctx.Float("beta", 1.0);
  Tensor y = MatmulOf(a, b);
  if (alpha != 1.0) y = InF32(y, [&](const Tensor& t) { return t.Mul(alpha); });
  if (ctx.Has(2) && beta != 0.0) {
    ONNX_INPUT(c, 2);
    Tensor cb = beta != 1.0 ? InF32(c, [&](const Tensor& t) { return t.Mul(beta); }) : c;
    y = y.Add(cb.Cast(y.dtype()));
  }
  return One(y);
}

// Softmax-family ops: opset < 13 flattens to 2-D at `axis` (default 1) and normalizes the second dim; 13+ works
// on the single `axis` (default -1).
template <typename F>
absl::StatusOr<std::vector<Value>> SoftmaxLike(OpContext& ctx, F f) {
  ONNX_INPUT(x_in, 0);
  // The input is stored once: recomputed separately for the max and for exp(x - max), a long expression can round
  // differently (FMA contraction) and x - max become positive by an ulp of a large x (exp overflow -> NaN).
  Tensor x = x_in.IsRealized() ? x_in : x_in.Contiguous();
  if (x.ndim() == 0) return One(f(x.Reshape({1}), 0).Reshape({}));
  if (ctx.opset() < 13) {
    KILN_ASSIGN_OR_RETURN(int64_t axis, SplitAxis(ctx, ctx.Int("axis", 1), x.ndim()));
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < x.ndim(); ++i) (i < axis ? outer : inner) *= x.size(i);
    return One(InF32(x, [&](const Tensor& t) { return f(t.Reshape({outer, inner}), 1).Reshape(Dims(x)); }));
  }
  KILN_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.Int("axis", -1), x.ndim()));
  return One(InF32(x, [&](const Tensor& t) { return f(t, axis); }));
}

absl::StatusOr<std::vector<Value>> Softmax(OpContext& ctx) {
  // Tensor::Softmax's ops with exp(x - max) and the output stored. Attention's P @ V recomputed each
  // exp(x - max) / sum for every column tile of V (MiniLM: 230-250 us per layer for P @ V, 26 us from the stored
  // probabilities plus 21 us to store them); and the sum of exps ran its exps as scalar libm calls in its reduce loop
  // (175-275 us per layer), where stored they are one vectorized elementwise kernel (20 us) and a plain sum.
  return SoftmaxLike(ctx, [](const Tensor& t, int64_t axis) {
    Tensor e = t.Sub(t.Max(axis, true)).Exp().Contiguous();
    return e.Div(e.Sum(axis, true)).Contiguous();
  });
}
absl::StatusOr<std::vector<Value>> LogSoftmax(OpContext& ctx) {
  return SoftmaxLike(ctx, [](const Tensor& t, int64_t axis) { return t.LogSoftmax(axis); });
}
absl::StatusOr<std::vector<Value>> Hardmax(OpContext& ctx) {
  return SoftmaxLike(ctx, [](const Tensor& t, int64_t axis) {
    const int64_t n = t.size(axis);
    Tensor idx = t.Argmax(axis, true);  // first max
    std::vector<int64_t> shape(t.ndim(), 1);
    shape[axis] = n;
    Tensor r = Tensor::Arange(0, n, 1, dtypes::kInt32, t.device()).Reshape(shape);
    return r.Eq(idx).Cast(t.dtype());
  });
}

absl::StatusOr<std::vector<Value>> Cumulative(OpContext& ctx, bool product) {
  ONNX_INPUT(x, 0);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axis, ctx.Ints(1));
  if (axis.size() != 1) return ctx.Error("axis must hold one value");
  KILN_ASSIGN_OR_RETURN(int64_t a, Axis(ctx, axis[0], x.ndim()));
  const bool exclusive = ctx.Int("exclusive", 0) != 0, reverse = ctx.Int("reverse", 0) != 0;
  return One(InF32(x, [&](const Tensor& t) {
    return product ? t.CumProd(a, exclusive, reverse) : t.CumSum(a, exclusive, reverse);
  }));
}

absl::StatusOr<std::vector<Value>> Trilu(OpContext& ctx) {
  ONNX_INPUT(x, 0);
  int64_t k = 0;
  if (ctx.Has(1)) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> kv, ctx.Ints(1));
    if (kv.size() != 1) return ctx.Error("k must hold one value");
    k = kv[0];
  }
  return One(ctx.Int("upper", 1) ? x.Triu(k) : x.Tril(k));
}

// Einsum by broadcasting every operand to the union of its letters and summing the letters not in the output.
absl::StatusOr<std::vector<Value>> Einsum(OpContext& ctx) {
  std::string eq;
  for (char c : ctx.String("equation", "")) {
    if (c != ' ') eq.push_back(c);
  }
  std::vector<Tensor> ops;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    ONNX_INPUT(t, i);
    ops.push_back(t);
  }
  const size_t arrow = eq.find("->");
  std::string lhs = arrow == std::string::npos ? eq : eq.substr(0, arrow);
  std::vector<std::string> terms;
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ops.size()) return ctx.Error("equation does not match the number of inputs");
  // Ellipsis: replace "..." by upper-case letters for the broadcast dims.
  int64_t ell_rank = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const size_t e = terms[i].find("...");
    if (e != std::string::npos) ell_rank = std::max<int64_t>(ell_rank, ops[i].ndim() - (terms[i].size() - 3));
  }
  std::string ell;
  for (int64_t i = 0; i < ell_rank; ++i) ell.push_back(static_cast<char>('A' + i));
  for (size_t i = 0; i < terms.size(); ++i) {
    const size_t e = terms[i].find("...");
    if (e == std::string::npos) continue;
    const int64_t r = ops[i].ndim() - static_cast<int64_t>(terms[i].size() - 3);
    terms[i] = terms[i].substr(0, e) + ell.substr(ell_rank - r) + terms[i].substr(e + 3);
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    const size_t e = out.find("...");
    if (e != std::string::npos) out = out.substr(0, e) + ell + out.substr(e + 3);
  } else {
    std::map<char, int> count;
    for (const std::string& t : terms) {
      for (char c : t) ++count[c];
    }
    out = ell;
    for (const auto& [c, n] : count) {
      if (n == 1 && (c < 'A' || c > 'Z')) out.push_back(c);
    }
  }
  // sizes and the letter order: output letters first, then the summed ones
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i) {
    if (static_cast<int64_t>(terms[i].size()) != ops[i].ndim()) return ctx.Error("equation rank mismatch");
    for (size_t j = 0; j < terms[i].size(); ++j) {
      const int64_t d = ops[i].size(static_cast<int64_t>(j));
      auto [it, inserted] = size.emplace(terms[i][j], d);
      if (!inserted && it->second != d) {
        if (it->second == 1) it->second = d;
        else if (d != 1) return ctx.Error("einsum dims do not agree");
      }
    }
  }
  std::string letters = out;
  for (const auto& [c, d] : size) {
    if (letters.find(c) == std::string::npos) letters.push_back(c);
  }
  Tensor acc;
  for (size_t i = 0; i < ops.size(); ++i) {
    Tensor t = ops[i];
    // diagonal (repeated letter within a term): take it with a mask
    std::string term = terms[i];
    for (size_t j = 0; j < term.size(); ++j) {
      for (size_t k = j + 1; k < term.size(); ++k) {
        if (term[j] != term[k]) continue;
        const int64_t n = t.size(static_cast<int64_t>(j));
        std::vector<int64_t> sj(t.ndim(), 1), sk(t.ndim(), 1);
        sj[j] = n;
        sk[k] = n;
        Tensor eye = Tensor::Arange(0, n, 1, dtypes::kInt32, t.device()).Reshape(sj).Eq(
            Tensor::Arange(0, n, 1, dtypes::kInt32, t.device()).Reshape(sk));
        t = eye.Where(t, t.ZerosLike()).Sum(static_cast<int64_t>(k));
        term.erase(k, 1);
        --k;
      }
    }
    std::vector<int64_t> perm, shape;
    for (char c : letters) {
      const size_t p = term.find(c);
      if (p != std::string::npos) perm.push_back(static_cast<int64_t>(p));
    }
    t = t.Permute(perm);
    size_t next = 0;
    for (char c : letters) {
      const size_t p = term.find(c);
      shape.push_back(p == std::string::npos ? 1 : t.size(static_cast<int64_t>(next++)));
    }
    t = t.Reshape(shape);
    acc = i == 0 ? t : acc.Mul(t);
  }
  std::vector<int64_t> sum_axes;
  for (size_t i = out.size(); i < letters.size(); ++i) sum_axes.push_back(static_cast<int64_t>(i));
  std::vector<int64_t> full;
  for (char c : letters) full.push_back(size[c]);
  acc = acc.Expand(full);
  if (!sum_axes.empty()) acc = acc.Sum(Axes(absl::Span<const int64_t>(sum_axes)), false);
  return One(acc.Cast(ops[0].dtype()));
}

}  // namespace

void RegisterMathOps(OpTable* t) {
  Reg(t, "MatMul", 1, kMaxOnnxOpset, {}, MatMul);
  Reg(t, "MatMulInteger", 10, kMaxOnnxOpset, {}, MatMulInteger);
  Reg(t, "Gemm", 1, kMaxOnnxOpset, {"alpha", "beta", "transA", "transB", "broadcast"}, Gemm);
  Reg(t, "Einsum", 12, kMaxOnnxOpset, {"equation"}, Einsum);
  Reg(t, "Softmax", 1, kMaxOnnxOpset, {"axis"}, Softmax);
  Reg(t, "LogSoftmax", 1, kMaxOnnxOpset, {"axis"}, LogSoftmax);
  Reg(t, "Hardmax", 1, kMaxOnnxOpset, {"axis"}, Hardmax);
  Reg(t, "CumSum", 11, kMaxOnnxOpset, {"exclusive", "reverse"},
                [](OpContext& ctx) { return Cumulative(ctx, false); });
  Reg(t, "CumProd", 26, kMaxOnnxOpset, {"exclusive", "reverse"},
                [](OpContext& ctx) { return Cumulative(ctx, true); });
  Reg(t, "Trilu", 14, kMaxOnnxOpset, {"upper"}, Trilu);
}

}  // namespace kiln::onnx
