// LlamaModel (llama.h).
#include "engine/llm/llama.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status.h"
#include "engine/jit/tiny_jit.h"
#include "engine/llm/block_linear.h"

namespace kiln::llm {
namespace {

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("llama: ", what)); }

absl::StatusOr<int64_t> PositiveInt(const nn::GgufFile& f, const std::string& key) {
  absl::StatusOr<int64_t> v = f.GetInt(key);
  if (!v.ok()) return Bad(std::string(v.status().message()));
  if (*v <= 0 || *v > (int64_t{1} << 24)) return Bad(absl::StrCat(key, " ", *v, " is outside [1, 2^24]"));
  return *v;
}

// x * rsqrt(mean(x^2) + eps) * w over the last axis, in a buffer of its own. Fused into the matmuls that read it,
// every output row recomputed each input's x * scale * w (two multiplies per weight and row, the matmul's own work
// being one multiply-add): the decode step of 8 slots spent ~2 of its 18 ms there (SmolLM2, 2-core Zen 5). One row
// was kept fused while its step was bound by reading the weights; since the weight streams are prefetched
// (llvm_ir.cc, StreamsNarrowWeights) its kernels are bound by their vector ops too, and the stored norm is faster for
// one row as well: 6.95-7.26 -> 6.59-6.80 ms per step in three interleaved pairs (2-core Emerald Rapids).
Tensor RmsNorm(const Tensor& x, const Tensor& w, double eps) {
  Tensor y = x * ((x * x).Mean(-1, /*keepdim=*/true) + static_cast<float>(eps)).Rsqrt() * w;
  return y.Contiguous();
}

// The part of a layer's cache a run reads and writes: its first `slots` slots and its first `span` positions, a view
// that an ASSIGN writes through (the rest of the buffer is neither read nor rewritten). `m_axis` is the position
// axis: 2 for V [S, Hkv, M, D], 3 for K kept transposed [S, Hkv, D, M].
Tensor CacheView(const Tensor& kv, int64_t slots, int m_axis, int64_t span) {
  std::vector<std::pair<int64_t, int64_t>> part;
  for (int64_t d : kv.shape()) part.push_back({0, d});
  part[0] = {0, slots};
  part[m_axis] = {0, span};
  return kv.Shrink(part);
}

}  // namespace

absl::StatusOr<LlamaConfig> LlamaConfig::FromGguf(const nn::GgufFile& f) {
  absl::StatusOr<std::string> arch = f.GetString("general.architecture");
  if (!arch.ok()) return Bad(std::string(arch.status().message()));
  if (*arch != "llama") return Bad(absl::StrCat("general.architecture \"", *arch, "\" is not llama"));
  LlamaConfig c;
  KILN_ASSIGN_OR_RETURN(c.n_layer, PositiveInt(f, "llama.block_count"));
  KILN_ASSIGN_OR_RETURN(c.n_embd, PositiveInt(f, "llama.embedding_length"));
  KILN_ASSIGN_OR_RETURN(c.n_ff, PositiveInt(f, "llama.feed_forward_length"));
  KILN_ASSIGN_OR_RETURN(c.n_head, PositiveInt(f, "llama.attention.head_count"));
  KILN_ASSIGN_OR_RETURN(c.context_length, PositiveInt(f, "llama.context_length"));
  c.n_head_kv = c.n_head;
  if (f.Find("llama.attention.head_count_kv") != nullptr) {
    KILN_ASSIGN_OR_RETURN(c.n_head_kv, PositiveInt(f, "llama.attention.head_count_kv"));
  }
  if (c.n_embd % c.n_head != 0 || c.n_head % c.n_head_kv != 0)
    return Bad(absl::StrCat("embedding_length ", c.n_embd, ", head_count ", c.n_head, " and head_count_kv ",
                            c.n_head_kv, " do not divide"));
  c.head_dim = c.n_embd / c.n_head;
  if (f.Find("llama.rope.dimension_count") != nullptr) {
    KILN_ASSIGN_OR_RETURN(int64_t rope_dims, PositiveInt(f, "llama.rope.dimension_count"));
    if (rope_dims != c.head_dim)
      return Bad(absl::StrCat("llama.rope.dimension_count ", rope_dims, " is not the head size ", c.head_dim,
                              " (partial RoPE is not supported)"));
  }
  if (c.head_dim % 2 != 0) return Bad(absl::StrCat("head size ", c.head_dim, " is odd"));
  if (f.Find("llama.rope.freq_base") != nullptr) {
    KILN_ASSIGN_OR_RETURN(c.rope_theta, f.GetFloat("llama.rope.freq_base"));
  }
  KILN_ASSIGN_OR_RETURN(c.rms_eps, f.GetFloat("llama.attention.layer_norm_rms_epsilon"));
  absl::StatusOr<std::vector<std::string>> tokens = f.GetStrings("tokenizer.ggml.tokens");
  if (!tokens.ok()) return Bad(std::string(tokens.status().message()));
  c.vocab = static_cast<int64_t>(tokens->size());
  c.tied_output = f.FindTensor("output.weight") == nullptr;
  return c;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(const nn::GgufModel& gguf, const std::string& device,
                                                               const LlamaOptions& options) {
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->device_ = device;
  KILN_ASSIGN_OR_RETURN(m->config_, LlamaConfig::FromGguf(gguf.file()));
  const LlamaConfig& c = m->config_;
  const int64_t kv = c.n_head_kv * c.head_dim;
  std::vector<std::pair<std::string, std::vector<int64_t>>> want = {
      {"token_embd.weight", {c.vocab, c.n_embd}}, {"output_norm.weight", {c.n_embd}}};
  if (!c.tied_output) want.push_back({"output.weight", {c.vocab, c.n_embd}});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    want.push_back({p + "attn_norm.weight", {c.n_embd}});
    want.push_back({p + "attn_q.weight", {c.n_embd, c.n_embd}});
    want.push_back({p + "attn_k.weight", {kv, c.n_embd}});
    want.push_back({p + "attn_v.weight", {kv, c.n_embd}});
    want.push_back({p + "attn_output.weight", {c.n_embd, c.n_embd}});
    want.push_back({p + "ffn_norm.weight", {c.n_embd}});
    want.push_back({p + "ffn_gate.weight", {c.n_ff, c.n_embd}});
    want.push_back({p + "ffn_up.weight", {c.n_ff, c.n_embd}});
    want.push_back({p + "ffn_down.weight", {c.n_embd, c.n_ff}});
  }
  auto is_qkv = [](const std::string& name) {
    return absl::EndsWith(name, "attn_q.weight") || absl::EndsWith(name, "attn_k.weight") ||
           absl::EndsWith(name, "attn_v.weight");
  };
  for (const auto& [name, shape] : want) {
    const nn::GgufTensorInfo* info = gguf.file().FindTensor(name);
    if (info == nullptr) return Bad(absl::StrCat("the file has no tensor ", name));
    if (info->shape() != shape)
      return Bad(absl::StrCat(name, " is [", absl::StrJoin(info->shape(), ", "), "], expected [",
                              absl::StrJoin(shape, ", "), "]"));
  }
  // LlamaOptions::int8_activations: the projections (and the output embedding) of a 32-wide block type are multiplied
  // as llama.cpp does, with the activations quantized to 8 bits too (block_linear.h); a weight that cannot be
  // (another type, rows not a multiple of 16) keeps the float decoding. The float weights they replace are not loaded.
  std::set<std::string> replaced;  // GGUF tensor names
  if (options.int8_activations) {
    const std::string out = c.tied_output ? "token_embd.weight" : "output.weight";
    std::vector<std::pair<std::string, std::vector<std::string>>> linear = {{out, {out}}};
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const std::string p = absl::StrCat("blk.", l, ".");
      for (const char* name : {"attn_output.weight", "ffn_down.weight"}) linear.push_back({p + name, {p + name}});
      linear.push_back({p + "ffn_gate_up", {p + "ffn_gate.weight", p + "ffn_up.weight"}});
      linear.push_back({p + "attn_qkv", {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}});
    }
    for (const auto& [name, parts] : linear) {
      absl::StatusOr<BlockWeight> w = LoadBlockWeight(gguf, std::vector<std::string_view>(parts.begin(), parts.end()), device);
      if (!w.ok()) continue;
      m->block_weights_.emplace(name, *std::move(w));
      replaced.insert(parts.begin(), parts.end());
    }
  }
  // The float weights (decoded in the matmul) of what no block weight replaced; token_embd always, for the lookup.
  for (const auto& [name, shape] : want) {
    if (is_qkv(name) || (replaced.contains(name) && name != "token_embd.weight")) continue;
    KILN_ASSIGN_OR_RETURN(Tensor w, gguf.Load(name, device));
    m->weights_.emplace(name, std::move(w));
  }
  // q, k and v stacked by rows into one weight (Project): one kernel streams all three instead of two (q; k and v
  // together), and the k/v kernel's 192 rows had been too few to split over the threads.
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    if (m->block_weights_.contains(p + "attn_qkv")) continue;
    absl::StatusOr<Tensor> qkv = gguf.LoadRows({p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, device);
    if (!qkv.ok()) return Bad(std::string(qkv.status().message()));
    m->weights_.emplace(p + "attn_qkv", *std::move(qkv));
  }
  // The decode step looks its tokens' rows up here: a one-hot matmul over the table would decode all vocab x n_embd
  // weights at every step (a fifth of SmolLM2's step time) to use n_embd of them.
  KILN_ASSIGN_OR_RETURN(m->embd_host_, m->W("token_embd.weight").ToVector<float>());
  return m;
}

Tensor LlamaModel::Linear(const Tensor& x, const std::string& name) const {
  if (auto it = block_weights_.find(name); it != block_weights_.end()) return BlockLinear(x, it->second);
  return x.Matmul(W(name).Transpose());
}

// The rest of a block after attention: x + Wo o, then x + Wdown(silu(Wgate g) * Wup g) with g = rmsnorm(x).
// Every sum and the FFN product get buffers of their own: left lazy, every later kernel that reads x would re-add all
// the earlier layers' outputs (layer 29's RMSNorm read 61 buffers, and no two layers shared a compiled kernel), and
// SiLU's exp would be recomputed inside the down matmul once per output tile.
Tensor LlamaModel::BlockTail(const Tensor& x, const Tensor& o, const std::string& p) const {
  const Tensor h = (x + Linear(o, p + "attn_output.weight")).Contiguous();
  const Tensor g = RmsNorm(h, W(p + "ffn_norm.weight"), config_.rms_eps);
  Tensor gate, up;
  if (block_weights_.contains(p + "ffn_gate_up")) {
    // One product against the stacked weight: the tensor core takes one block-scaled sum per kernel, and the two
    // products fused into one kernel (as the float ones are) would be two.
    const int64_t rows = g.size(0), n_ff = config_.n_ff;
    const Tensor gu = Linear(g, p + "ffn_gate_up").Contiguous();  // [rows, 2 n_ff]
    gate = gu.Shrink({{0, rows}, {0, n_ff}});
    up = gu.Shrink({{0, rows}, {n_ff, 2 * n_ff}});
  } else {
    gate = Linear(g, p + "ffn_gate.weight").Contiguous();
    up = Linear(g, p + "ffn_up.weight").Contiguous();
  }
  const Tensor ff = (gate.Silu() * up).Contiguous();
  return (h + Linear(ff, p + "ffn_down.weight")).Contiguous();
}

LlamaModel::Projections LlamaModel::Project(const Tensor& h, const std::string& p) const {
  const int64_t rows = h.shape()[0], e = config_.n_embd, kv = config_.n_head_kv * config_.head_dim;
  const Tensor qkv = Linear(h, p + "attn_qkv").Contiguous();  // [rows, e + 2 kv]
  return {qkv.Shrink({{0, rows}, {0, e}}), qkv.Shrink({{0, rows}, {e, e + kv}}),
          qkv.Shrink({{0, rows}, {e + kv, e + 2 * kv}})};
}

absl::StatusOr<Tensor> LlamaModel::Logits(const std::vector<int32_t>& tokens) const {
  const LlamaConfig& c = config_;
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T < 1 || T > c.context_length)
    return Bad(absl::StrCat("a sequence of ", T, " tokens (1..", c.context_length, ")"));
  for (int32_t t : tokens)
    if (t < 0 || t >= c.vocab) return Bad(absl::StrCat("token id ", t, " is outside the vocabulary of ", c.vocab));
  // Embedding: one-hot rows times the (decoded) table, so the lookup is a matmul the decoding fuses into.
  const Tensor ids = Tensor::FromVector(tokens, {T, 1}, device_);
  const Tensor onehot = Tensor::Arange(c.vocab).Cast(dtypes::kInt32).Reshape({1, c.vocab}).Eq(ids).Cast(dtypes::kFloat32);
  Tensor x = onehot.Matmul(W("token_embd.weight"));  // [T, n_embd]

  // RoPE tables: position p, pair i turns by p * theta^(-2i / head_dim).
  const int64_t half = c.head_dim / 2;
  std::vector<float> cos_t(T * half), sin_t(T * half);
  for (int64_t p = 0; p < T; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * std::pow(c.rope_theta, -2.0 * static_cast<double>(i) /
                                                                               static_cast<double>(c.head_dim));
      cos_t[p * half + i] = static_cast<float>(std::cos(angle));
      sin_t[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  const Tensor cos = Tensor::FromVector(cos_t, {T, 1, half}, device_);
  const Tensor sin = Tensor::FromVector(sin_t, {T, 1, half}, device_);
  auto rope = [&](const Tensor& v, int64_t heads) {  // [T, heads, head_dim], adjacent pairs
    const Tensor pairs = v.Reshape({T, heads, half, 2});
    const Tensor a = pairs.Shrink({{0, T}, {0, heads}, {0, half}, {0, 1}}).Reshape({T, heads, half});
    const Tensor b = pairs.Shrink({{0, T}, {0, heads}, {0, half}, {1, 2}}).Reshape({T, heads, half});
    return Tensor::Stack({a * cos - b * sin, a * sin + b * cos}, 3).Reshape({T, heads, c.head_dim});
  };
  // Causal mask: 0 on and below the diagonal, -inf above.
  std::vector<float> mask(T * T, 0.0f);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = i + 1; j < T; ++j) mask[i * T + j] = -std::numeric_limits<float>::infinity();
  const Tensor causal = Tensor::FromVector(mask, {1, T, T}, device_);
  const int64_t rep = c.n_head / c.n_head_kv;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));

  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    const Tensor h = RmsNorm(x, W(p + "attn_norm.weight"), c.rms_eps);
    const Projections proj = Project(h, p);
    const Tensor q = rope(proj.q.Reshape({T, c.n_head, c.head_dim}), c.n_head).Permute({1, 0, 2});  // [H, T, D]
    const Tensor k = rope(proj.k.Reshape({T, c.n_head_kv, c.head_dim}), c.n_head_kv)
                         .Permute({1, 0, 2})
                         .Reshape({c.n_head_kv, 1, T, c.head_dim})
                         .Expand({c.n_head_kv, rep, T, c.head_dim})
                         .Reshape({c.n_head, T, c.head_dim});  // kv head j serves q heads j*rep .. j*rep+rep-1
    const Tensor v = proj.v.Reshape({T, c.n_head_kv, c.head_dim})
                         .Permute({1, 0, 2})
                         .Reshape({c.n_head_kv, 1, T, c.head_dim})
                         .Expand({c.n_head_kv, rep, T, c.head_dim})
                         .Reshape({c.n_head, T, c.head_dim});
    const Tensor att = (q.Matmul(k.Transpose(1, 2)) * scale + causal).Softmax(-1);  // [H, T, T]
    const Tensor o = att.Matmul(v).Permute({1, 0, 2}).Reshape({T, c.n_embd});
    x = BlockTail(x, o, p);
  }
  x = RmsNorm(x, W("output_norm.weight"), c.rms_eps);
  return Linear(x, c.tied_output ? "token_embd.weight" : "output.weight");
}

struct KvCache::Jit {
  // By (attention span (SpanFor), width: the slots the step computes, 1 or all; StepWidth).
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<jit::TinyJit>> steps;
  std::map<int64_t, std::unique_ptr<jit::TinyJit>> prefills;  // by attention span (SpanFor of the rows a chunk needs)
};

KvCache::KvCache() = default;

int KvCache::captures() const {
  int n = 0;
  if (jit_ != nullptr)
    for (const auto& [span, jit] : jit_->steps) n += jit->captured() ? 1 : 0;
  return n;
}

int64_t KvCache::SpanFor(int64_t rows) const {
  int64_t span = kMinSpan;
  while (span < rows && span < max_ctx_) span *= 2;
  return std::min(span, max_ctx_);
}

void KvCache::Reset(int64_t slot) {
  if (slot < 0) {
    std::fill(pos_.begin(), pos_.end(), 0);
  } else if (slot < slots()) {
    pos_[slot] = 0;
  }
}

// The decode step whose attention reads the first `span` rows of the cache (KvCache::SpanFor), over its first
// `width` slots (StepWidth: 1 or all of them).
// in: embeddings [S, n_embd] float32, cos / sin [S, 1, half], mask [S, 1, 1, span] (0 up to each slot's position, -inf
// after), write [S, 1, max_ctx, 1] int32 (1 at each stepping slot's position, all 0 in the other slots); S = width.
std::unique_ptr<jit::TinyJit> LlamaModel::MakeStep(KvCache* raw, int64_t span, int64_t width) const {
  // Captured at its first call (TinyJit::set_capture_first): the weights and the cache are realized before it.
  auto jit = std::make_unique<jit::TinyJit>(
      [this, raw, span, width](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
        const LlamaConfig& c = config_;
        const int64_t S = width, half = c.head_dim / 2, rep = c.n_head / c.n_head_kv;
        // The step's part of each cache (CacheView): its first `width` slots, and the first `span` positions
        // (every stepping slot's position is below the span).
        const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
        Tensor x = in[0];  // [S, n_embd]: the tokens' embedding rows, looked up on the host
        const Tensor& cos = in[1];
        const Tensor& sin = in[2];
        const Tensor write = in[4].Eq(1).Shrink({{0, S}, {0, 1}, {0, span}, {0, 1}});  // [S, 1, span, 1]
        const Tensor write_t = write.Reshape({S, 1, 1, span});  // K's rows are columns
        auto rope = [&](const Tensor& v, int64_t heads) {  // [S, heads, head_dim], adjacent pairs
          const Tensor pairs = v.Reshape({S, heads, half, 2});
          const Tensor a = pairs.Shrink({{0, S}, {0, heads}, {0, half}, {0, 1}}).Reshape({S, heads, half});
          const Tensor b = pairs.Shrink({{0, S}, {0, heads}, {0, half}, {1, 2}}).Reshape({S, heads, half});
          return Tensor::Stack({a * cos - b * sin, a * sin + b * cos}, 3).Reshape({S, heads, c.head_dim});
        };
        auto heads_of = [&](const Tensor& kv) {  // [S, n_head_kv, span, D] -> [S, n_head, span, D]
          return kv.Reshape({S, c.n_head_kv, 1, span, c.head_dim})
              .Expand({S, c.n_head_kv, rep, span, c.head_dim})
              .Reshape({S, c.n_head, span, c.head_dim});
        };
        auto heads_of_t = [&](const Tensor& kt) {  // [S, n_head_kv, D, span] -> [S, n_head, D, span]
          return kt.Reshape({S, c.n_head_kv, 1, c.head_dim, span})
              .Expand({S, c.n_head_kv, rep, c.head_dim, span})
              .Reshape({S, c.n_head, c.head_dim, span});
        };
        std::vector<Tensor> written;
        for (int64_t l = 0; l < c.n_layer; ++l) {
          const std::string p = absl::StrCat("blk.", l, ".");
          const Tensor h = RmsNorm(x, W(p + "attn_norm.weight"), c.rms_eps);
          const Projections proj = Project(h, p);
          const Tensor q =
              rope(proj.q.Reshape({S, c.n_head, c.head_dim}), c.n_head).Reshape({S, c.n_head, 1, c.head_dim});
          const Tensor k_new = rope(proj.k.Reshape({S, c.n_head_kv, c.head_dim}), c.n_head_kv)
                                   .Reshape({S, c.n_head_kv, c.head_dim, 1});
          const Tensor v_new = proj.v.Reshape({S, c.n_head_kv, 1, c.head_dim});
          // The new column / row written into the cache (a gated store), then attention reads the cache as
          // written: the where is not recomputed inside the attention matmuls.
          Tensor k_store = CacheView(raw->k_[l], width, 3, span);  // [S, Hkv, D, span]
          Tensor v_store = CacheView(raw->v_[l], width, 2, span);  // [S, Hkv, span, D]
          const Tensor k_all = k_store.Assign(write_t.Where(k_new, k_store));
          const Tensor v_all = v_store.Assign(write.Where(v_new, v_store));
          const Tensor att = (q.Matmul(heads_of_t(k_all)) * scale + in[3]).Contiguous().Softmax(-1);  // [S, H, 1, span]
          const Tensor o = att.Matmul(heads_of(v_all)).Reshape({S, c.n_embd});
          x = BlockTail(x, o, p);
          written.push_back(k_all);
          written.push_back(v_all);
        }
        x = RmsNorm(x, W("output_norm.weight"), c.rms_eps);
        Tensor logits = Linear(x, c.tied_output ? "token_embd.weight" : "output.weight");  // [S, vocab]
        std::vector<Tensor*> all;
        for (Tensor& t : written) all.push_back(&t);
        all.push_back(&logits);
        KILN_RETURN_IF_ERROR(Tensor::Realize(all));
        return std::vector<Tensor>{logits};
      });
  jit->set_capture_first(true);
  return jit;
}

absl::StatusOr<std::unique_ptr<KvCache>> LlamaModel::NewCache(int64_t max_ctx, int64_t slots) const {
  const LlamaConfig& c = config_;
  if (max_ctx < 1 || max_ctx > c.context_length)
    return Bad(absl::StrCat("a cache of ", max_ctx, " tokens (1..", c.context_length, ")"));
  if (slots < 1 || slots > 256) return Bad(absl::StrCat("a cache of ", slots, " slots (1..256)"));
  std::unique_ptr<KvCache> cache(new KvCache());
  cache->max_ctx_ = max_ctx;
  cache->pos_.assign(slots, 0);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    for (std::vector<Tensor>* v : {&cache->k_, &cache->v_}) {
      // A buffer of its own (Empty, then zeroed): Zeros().Contiguous() is one interned graph, and the realize memo
      // would give every layer's cache the same buffer.
      // K is kept transposed, [S, Hkv, D, M] (KvCache::k_), V as [S, Hkv, M, D].
      const bool is_k = v == &cache->k_;
      Tensor z = Tensor::Empty(is_k ? std::vector<int64_t>{slots, c.n_head_kv, c.head_dim, max_ctx}
                                    : std::vector<int64_t>{slots, c.n_head_kv, max_ctx, c.head_dim},
                               dtypes::kFloat32, device_);
      z.Assign(0.0f);
      KILN_RETURN_IF_ERROR(z.Realize());
      v->push_back(std::move(z));
    }
  }
  cache->jit_ = std::make_shared<KvCache::Jit>();
  return cache;
}

// The prefill run whose chunk needs the first `span` positions of the cache (KvCache::SpanFor(pos + chunk)): its
// attention, placement and writes cover those positions only (a view of every slot's cache, written through).
std::unique_ptr<jit::TinyJit> LlamaModel::MakePrefill(KvCache* raw, int64_t span) const {
  // in: embeddings [C, n_embd], cos / sin [C, 1, half], mask [1, C, span] (query t sees rows 0..pos + t),
  // written [S, 1, span, 1] int32 (1 at the prefilling slot's positions pos..pos + valid - 1), place [1, C, span]
  // float32 (1 at [t, pos + t] for the valid chunk rows t), slot [S, 1, 1, 1] float32 (one-hot: the prefilling
  // slot). C = KvCache::kPrefillChunk. No logits: the caller feeds the prompt's last token through the decode step,
  // which gives them.
  auto jit = std::make_unique<jit::TinyJit>(
      [this, raw, span](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
        const LlamaConfig& c = config_;
        const int64_t M = span, C = KvCache::kPrefillChunk, half = c.head_dim / 2;
        const int64_t rep = c.n_head / c.n_head_kv;
        const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
        Tensor x = in[0];
        const Tensor& cos = in[1];
        const Tensor& sin = in[2];
        const Tensor written_row = in[4].Eq(1);                        // [S, 1, M, 1]
        const Tensor written_row_t = written_row.Reshape({raw->slots(), 1, 1, M});
        const Tensor& place = in[5];                                   // [1, C, M]
        const Tensor& slot = in[6];
        auto rope = [&](const Tensor& v, int64_t heads) {  // [C, heads, head_dim], adjacent pairs
          const Tensor pairs = v.Reshape({C, heads, half, 2});
          const Tensor a = pairs.Shrink({{0, C}, {0, heads}, {0, half}, {0, 1}}).Reshape({C, heads, half});
          const Tensor b = pairs.Shrink({{0, C}, {0, heads}, {0, half}, {1, 2}}).Reshape({C, heads, half});
          return Tensor::Stack({a * cos - b * sin, a * sin + b * cos}, 3).Reshape({C, heads, c.head_dim});
        };
        auto heads_of = [&](const Tensor& kv) {  // [n_head_kv, M, D] -> [n_head, M, D]
          return kv.Reshape({c.n_head_kv, 1, M, c.head_dim})
              .Expand({c.n_head_kv, rep, M, c.head_dim})
              .Reshape({c.n_head, M, c.head_dim});
        };
        auto heads_of_t = [&](const Tensor& kt) {  // [n_head_kv, D, M] -> [n_head, D, M]
          return kt.Reshape({c.n_head_kv, 1, c.head_dim, M})
              .Expand({c.n_head_kv, rep, c.head_dim, M})
              .Reshape({c.n_head, c.head_dim, M});
        };
        std::vector<Tensor> written;
        for (int64_t l = 0; l < c.n_layer; ++l) {
          const std::string p = absl::StrCat("blk.", l, ".");
          const Tensor h = RmsNorm(x, W(p + "attn_norm.weight"), c.rms_eps);
          const Projections proj = Project(h, p);
          const Tensor q = rope(proj.q.Reshape({C, c.n_head, c.head_dim}), c.n_head).Permute({1, 0, 2});  // [H, C, D]
          const Tensor k_new = rope(proj.k.Reshape({C, c.n_head_kv, c.head_dim}), c.n_head_kv)
                                   .Permute({1, 2, 0})
                  .Reshape({1, c.n_head_kv, c.head_dim, C});  // transposed, as K is kept
          const Tensor v_new =
              proj.v.Reshape({C, c.n_head_kv, c.head_dim}).Permute({1, 0, 2}).Reshape({1, c.n_head_kv, C, c.head_dim});
          // Chunk row t lands on cache position pos + t: the chunk times a one-hot [C, M] placement is each position
          // exactly (1 * x + 0 * the others), computed once (not per slot) into a buffer of its own; the slot's
          // written positions then take it (a gated store), and attention reads the caches as written. K's rows
          // are columns. (The placement per slot, [S, 1, M, C] against K's columns, was 4.3 ms per layer at
          // 4 slots x 1,024 positions.)
          const Tensor k_placed = k_new.Matmul(place).Contiguous();                  // [1, Hkv, D, M]
          const Tensor v_placed = place.Transpose(1, 2).Matmul(v_new).Contiguous();  // [1, Hkv, M, D]
          Tensor k_store = CacheView(raw->k_[l], raw->slots(), 3, span);  // [S, Hkv, D, span]: all slots
          Tensor v_store = CacheView(raw->v_[l], raw->slots(), 2, span);  // [S, Hkv, span, D]
          const Tensor k_all = k_store.Assign(written_row_t.Where(k_placed, k_store));  // [S, Hkv, D, M]
          const Tensor v_all = v_store.Assign(written_row.Where(v_placed, v_store));    // [S, Hkv, M, D]
          const Tensor k_slot = (k_all * slot).Sum(0);  // [Hkv, D, M]
          const Tensor v_slot = (v_all * slot).Sum(0);  // [Hkv, M, D]
          const Tensor att = (q.Matmul(heads_of_t(k_slot)) * scale + in[3]).Softmax(-1);  // [H, C, M]
          const Tensor o = att.Matmul(heads_of(v_slot)).Permute({1, 0, 2}).Reshape({C, c.n_embd});
          x = BlockTail(x, o, p);
          written.push_back(k_all);
          written.push_back(v_all);
        }
        std::vector<Tensor*> all;
        for (Tensor& t : written) all.push_back(&t);
        KILN_RETURN_IF_ERROR(Tensor::Realize(all));
        return std::vector<Tensor>{};
      });
  jit->set_capture_first(true);
  return jit;
}

absl::Status LlamaModel::WarmUp(KvCache& cache) const {
  // Each span's step once (its capture: the step and prefill JITs capture at their first call) with the slot placed
  // at the span's last row, then each span's prefill with a chunk ending at its last row. The rows written are
  // garbage, but every row is rewritten by its own step or prefill before anything reads it.
  std::vector<int64_t> spans;
  for (int64_t span = cache.SpanFor(1);; span = cache.SpanFor(span + 1)) {
    spans.push_back(span);
    if (span >= cache.max_ctx_) break;
  }
  // Both widths (StepWidth): slot 0 alone, and the last slot (which needs all of them).
  std::vector<int64_t> lone_slots = {0};
  if (cache.slots() > 1) lone_slots.push_back(cache.slots() - 1);
  for (int64_t span : spans) {
    for (int64_t slot : lone_slots) {
      cache.pos_[slot] = span - 1;
      KILN_ASSIGN_OR_RETURN(Tensor logits, StepBatch(cache, {SlotToken{slot, 0}}));
      KILN_RETURN_IF_ERROR(logits.ToVector<float>().status());
    }
  }
  for (int64_t span : spans) {
    cache.Reset();
    const int64_t n = std::min(KvCache::kPrefillChunk, span);
    cache.pos_[0] = span - n;
    KILN_RETURN_IF_ERROR(Prefill(cache, 0, std::vector<int32_t>(n, 0)));
  }
  cache.Reset();
  return absl::OkStatus();
}

absl::Status LlamaModel::Prefill(KvCache& cache, int64_t slot, const std::vector<int32_t>& tokens) const {
  const LlamaConfig& c = config_;
  const int64_t S = cache.slots(), M = cache.max_ctx_, C = KvCache::kPrefillChunk, half = c.head_dim / 2;
  if (slot < 0 || slot >= S) return Bad(absl::StrCat("slot ", slot, " is outside 0..", S - 1));
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (cache.pos_[slot] + n > M)
    return absl::FailedPreconditionError(absl::StrCat("llama: slot ", slot, " holds ", cache.pos_[slot],
                                                      " tokens; ", n, " more do not fit in ", M));
  for (int32_t t : tokens)
    if (t < 0 || t >= c.vocab) return Bad(absl::StrCat("token id ", t, " is outside the vocabulary of ", c.vocab));
  std::vector<float> one_hot(S, 0.0f);
  one_hot[slot] = 1.0f;
  for (int64_t at = 0; at < n; at += C) {
    const int64_t valid = std::min(C, n - at), pos = cache.pos_[slot];
    const int64_t L = cache.SpanFor(pos + valid);  // the positions this chunk's run covers
    std::vector<float> rows(C * c.n_embd, 0.0f);
    std::vector<float> cos_t(C * half, 1.0f), sin_t(C * half, 0.0f);
    std::vector<float> mask(C * L, -std::numeric_limits<float>::infinity());
    std::vector<int32_t> written(S * L, 0);
    std::vector<float> place(C * L, 0.0f);
    for (int64_t t = 0; t < C; ++t) {
      if (t >= valid) {  // padding: row 0 only (a finite softmax), nothing written
        mask[t * L] = 0.0f;
        continue;
      }
      const int64_t p = pos + t;
      std::copy_n(embd_host_.begin() + tokens[at + t] * c.n_embd, c.n_embd, rows.begin() + t * c.n_embd);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(p) *
                             std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
        cos_t[t * half + i] = static_cast<float>(std::cos(angle));
        sin_t[t * half + i] = static_cast<float>(std::sin(angle));
      }
      for (int64_t j = 0; j <= p; ++j) mask[t * L + j] = 0.0f;
      written[slot * L + p] = 1;
      place[t * L + p] = 1.0f;
    }
    std::vector<Tensor> in = {Tensor::FromVector(rows, {C, c.n_embd}, device_),
                              Tensor::FromVector(cos_t, {C, 1, half}, device_),
                              Tensor::FromVector(sin_t, {C, 1, half}, device_),
                              Tensor::FromVector(mask, {1, C, L}, device_),
                              Tensor::FromVector(written, {S, 1, L, 1}, device_),
                              Tensor::FromVector(place, {1, C, L}, device_),
                              Tensor::FromVector(one_hot, {S, 1, 1, 1}, device_)};
    std::unique_ptr<jit::TinyJit>& jit = cache.jit_->prefills[L];
    if (jit == nullptr) jit = MakePrefill(&cache, L);
    KILN_RETURN_IF_ERROR((*jit)(in).status());
    cache.pos_[slot] += valid;
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> LlamaModel::Step(KvCache& cache, int32_t token) const {
  KILN_ASSIGN_OR_RETURN(Tensor logits, StepBatch(cache, {SlotToken{0, token}}));
  return logits.Reshape({config_.vocab});  // slot 0 alone: a step of width 1
}

absl::StatusOr<Tensor> LlamaModel::StepBatch(KvCache& cache, const std::vector<SlotToken>& tokens) const {
  const LlamaConfig& c = config_;
  const int64_t M = cache.max_ctx_, half = c.head_dim / 2;
  if (tokens.empty()) return Bad("a step of no slot");
  const int64_t all = cache.slots();
  std::vector<bool> named(all, false);
  int64_t last = 0;  // the highest stepping slot
  for (const SlotToken& st : tokens) {
    if (st.slot < 0 || st.slot >= all) return Bad(absl::StrCat("slot ", st.slot, " is outside 0..", all - 1));
    if (named[st.slot]) return Bad(absl::StrCat("slot ", st.slot, " is named twice in one step"));
    named[st.slot] = true;
    last = std::max(last, st.slot);
    if (cache.pos_[st.slot] >= M)
      return absl::FailedPreconditionError(
          absl::StrCat("llama: slot ", st.slot, " of the cache holds ", M, " tokens, all used"));
    if (st.token < 0 || st.token >= c.vocab)
      return Bad(absl::StrCat("token id ", st.token, " is outside the vocabulary of ", c.vocab));
  }
  // The step computes the first S slots: 1 when slot 0 steps alone (a lone generation: its step costs a quarter of
  // the 4-slot one), else all of them (StepWidth).
  const int64_t S = StepWidth(all, last);
  // Idle slots: token 0, angle 0, attention to row 0 only (a finite softmax), nothing written.
  std::vector<int32_t> write(S * M, 0);
  std::vector<float> rows(S * c.n_embd, 0.0f);
  std::vector<float> cos_t(S * half, 1.0f), sin_t(S * half, 0.0f);
  int64_t rows_needed = 1;
  for (const SlotToken& st : tokens) rows_needed = std::max(rows_needed, cache.pos_[st.slot] + 1);
  const int64_t L = cache.SpanFor(rows_needed);
  std::unique_ptr<jit::TinyJit>& jit = cache.jit_->steps[{L, S}];
  if (jit == nullptr) jit = MakeStep(&cache, L, S);
  std::vector<float> mask(S * L, -std::numeric_limits<float>::infinity());
  for (int64_t s = 0; s < S; ++s) mask[s * L] = 0.0f;
  for (const SlotToken& st : tokens) {
    const int64_t s = st.slot, pos = cache.pos_[s];
    std::copy_n(embd_host_.begin() + st.token * c.n_embd, c.n_embd, rows.begin() + s * c.n_embd);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) *
                           std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
      cos_t[s * half + i] = static_cast<float>(std::cos(angle));
      sin_t[s * half + i] = static_cast<float>(std::sin(angle));
    }
    for (int64_t j = 0; j <= pos; ++j) mask[s * L + j] = 0.0f;
    write[s * M + pos] = 1;
  }
  std::vector<Tensor> in = {Tensor::FromVector(rows, {S, c.n_embd}, device_),
                            Tensor::FromVector(cos_t, {S, 1, half}, device_),
                            Tensor::FromVector(sin_t, {S, 1, half}, device_),
                            Tensor::FromVector(mask, {S, 1, 1, L}, device_),
                            Tensor::FromVector(write, {S, 1, M, 1}, device_)};
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, (*jit)(in));
  for (const SlotToken& st : tokens) ++cache.pos_[st.slot];
  return out[0];
}

absl::StatusOr<std::vector<int32_t>> LlamaModel::Greedy(KvCache& cache, const std::vector<int32_t>& prompt,
                                                        int64_t max_new, int32_t stop) const {
  if (prompt.empty()) return Bad("an empty prompt");
  KILN_RETURN_IF_ERROR(Prefill(cache, 0, std::vector<int32_t>(prompt.begin(), prompt.end() - 1)));
  KILN_ASSIGN_OR_RETURN(Tensor logits, Step(cache, prompt.back()));
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < max_new) {
    KILN_ASSIGN_OR_RETURN(std::vector<float> l, logits.ToVector<float>());
    const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(next);
    if (next == stop || static_cast<int64_t>(out.size()) >= max_new) break;
    KILN_ASSIGN_OR_RETURN(logits, Step(cache, next));
  }
  return out;
}

}  // namespace kiln::llm
