// LlamaModel: the Llama architecture (RMSNorm, RoPE, grouped-query attention, SwiGLU, tied or separate output
// embeddings) built from a GGUF file's metadata and weights as kiln Tensor ops (issue #24 item 2).
//
// Weights stay as the file has them (Q4_1, Q8_0, ... in device buffers): each use is GgufModel::Load's decoding
// graph, which fuses into the matmul that consumes it. Names and layout are llama.cpp's: token_embd.weight,
// blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}.weight,
// output_norm.weight, output.weight (absent: tied to token_embd). A projection weight is [out, in] (y = x W^T).
// llama.cpp's converter permutes the rows of attn_q / attn_k so that RoPE rotates adjacent pairs (x[2i], x[2i+1])
// by position * theta^(-2i / head_dim) ("normal" RoPE), which is what this model does.
//
// Logits(tokens) runs a whole sequence at once (causal attention, no cache; each length is its own graph). Step runs
// one token against a KvCache of fixed length, one JIT trace for every position.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/nn/state/gguf.h"
#include "engine/jit/tiny_jit.h"
#include "engine/llm/block_linear.h"
#include "engine/tensor/tensor.h"

namespace kiln::llm {

struct LlamaConfig {
  int64_t n_layer = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0, vocab = 0;
  int64_t context_length = 0;
  double rope_theta = 10000.0;
  double rms_eps = 1e-5;
  bool tied_output = false;
  // From `general.architecture` == "llama" and the llama.* keys; InvalidArgument naming a missing or inconsistent key.
  static absl::StatusOr<LlamaConfig> FromGguf(const nn::GgufFile& f);
};

class LlamaModel;

// The keys and values of up to `slots` sequences: per layer [slots, n_head_kv, max_ctx, head_dim] device buffers of
// a fixed length, each slot's position, and the jitted decode step that writes them. Made by LlamaModel::NewCache.
// One slot per sequence; a batched step (LlamaModel::StepBatch) advances any subset of the slots by one token each,
// which is what continuous batching (generator.h) runs.
class KvCache {
 public:
  // Prompt tokens per prefill run (LlamaModel::Prefill): one JIT trace, shorter chunks padded.
  static constexpr int64_t kPrefillChunk = 32;
  // The decode step's attention reads only the first SpanFor(rows) rows of the cache: kMinSpan, doubled until it
  // covers `rows` (the longest stepping sequence), at most max_ctx. One JIT trace per span (a handful: 64, 128, ...,
  // max_ctx), so a short generation in a long context does not pay attention over the whole cache.
  static constexpr int64_t kMinSpan = 64;
  int64_t SpanFor(int64_t rows) const;
  int64_t max_ctx() const { return max_ctx_; }
  int64_t slots() const { return static_cast<int64_t>(pos_.size()); }
  int64_t pos(int64_t slot = 0) const { return pos_[slot]; }  // tokens written so far in `slot`
  // Decode-step traces captured by the JIT: one per attention span used (SpanFor) and step width (slot 0 alone, or
  // all slots: LlamaModel::StepWidth), each serving every position within it and every mix of active slots.
  int captures() const;
  // Starts a new sequence in `slot` (all slots when -1), in the same buffers and the same JIT trace: the position goes
  // back to 0 (rows past the position are masked, and each step rewrites its own row before reading it, so nothing
  // needs clearing).
  void Reset(int64_t slot = -1);

 private:
  friend class LlamaModel;
  KvCache();
  int64_t max_ctx_ = 0;
  std::vector<int64_t> pos_;
  std::vector<Tensor> k_, v_;  // per layer: K transposed [slots, n_head_kv, head_dim, max_ctx], V [.., max_ctx, head_dim]
  struct Jit;
  std::shared_ptr<Jit> jit_;
};

// One token for one slot of a batched decode step.
struct SlotToken {
  int64_t slot = 0;
  int32_t token = 0;
};

struct LlamaOptions {
  // The projections and the output embedding, where their GGUF type is Q4_0, Q4_1 or Q8_0, multiply 8-bit
  // activations (quantized per block of 32 at each use) by the weights' integers, as llama.cpp's CPU backend does
  // (block_linear.h): on a CPU with 8-bit dot products (AVX-512 VNNI) the batched decode step is ~1.8x faster at 8
  // slots; one slot, bound by reading the weights, is not faster. Off: float activations times the weights decoded
  // in the matmul. The 8-bit rounding makes the logits chaotic at the level of its noise: a last-bit change of the
  // input moves them by a few percent of the largest logit (also between llama.cpp builds), so greedy tokens match a
  // float reference only until the first near tie. Off by default.
  bool int8_activations = false;
};

class LlamaModel {
 public:
  // Reads the config and checks that every weight is present with the shape the config implies (InvalidArgument
  // naming the tensor). The weights' bytes are copied to `device` once.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(const nn::GgufModel& gguf, const std::string& device = "CPU",
                                                            const LlamaOptions& options = {});
  const LlamaConfig& config() const { return config_; }
  // Whether some projection multiplies 8-bit activations by the weights' integers (LlamaOptions::int8_activations
  // and a weight of a 32-wide block type).
  bool quantizes_activations() const { return !block_weights_.empty(); }

  // Logits [T, vocab] of every position of `tokens` (1 <= T <= context_length, ids inside the vocabulary), float32.
  absl::StatusOr<Tensor> Logits(const std::vector<int32_t>& tokens) const;

  // A cache of `slots` sequences (1..256) of at most `max_ctx` tokens each (1..context_length), zeroed.
  absl::StatusOr<std::unique_ptr<KvCache>> NewCache(int64_t max_ctx, int64_t slots = 1) const;
  // Decodes `token` at position cache.pos() (then advances it): its keys and values go into the cache, and the
  // result is the logits [vocab] of the token that follows. One TinyJit trace serves every position: the cache has a
  // fixed length and the position enters as data (the token's embedding row, looked up on the host; the RoPE
  // angles; the attention mask over the cache; the one-hot row the step writes), so attention spans all max_ctx
  // rows, the ones past the position masked to -inf (Hugging Face's "static cache"). The returned tensor is
  // overwritten by the next step. FailedPrecondition when the cache is full.
  // Uses slot 0.
  absl::StatusOr<Tensor> Step(KvCache& cache, int32_t token) const;
  // One decode step of every slot named in `tokens` (each at most once), in one batched run of the same trace: the
  // result is the logits [slots, vocab]; rows of slots not named are meaningless, and their caches are untouched.
  // InvalidArgument for a bad slot or token, FailedPrecondition when a named slot is full.
  absl::StatusOr<Tensor> StepBatch(KvCache& cache, const std::vector<SlotToken>& tokens) const;
  // Compiles and captures every trace the cache will use (each attention span's decode step, the prefill), so no
  // generation waits for a compile; leaves the cache reset.
  absl::Status WarmUp(KvCache& cache) const;
  // Writes the keys and values of `tokens` into `slot` at positions pos(slot).. (then advances it), kPrefillChunk
  // tokens per run of a second JIT trace (one per attention span, serving every position and chunk fill in it): a
  // prompt is read a chunk at a time rather than a token per decode step. No logits: feed the prompt's last token through Step / StepBatch.
  // InvalidArgument for a bad slot or token, FailedPrecondition when the tokens do not fit.
  absl::Status Prefill(KvCache& cache, int64_t slot, const std::vector<int32_t>& tokens) const;
  // Prefills all of `prompt` but its last token, steps that one, then appends the argmax token until `max_new` tokens or `stop` (e.g. eos); returns
  // the new tokens (the stop token included when it came).
  absl::StatusOr<std::vector<int32_t>> Greedy(KvCache& cache, const std::vector<int32_t>& prompt, int64_t max_new,
                                              int32_t stop = -1) const;

 private:
  LlamaModel() = default;
  std::unique_ptr<jit::TinyJit> MakeStep(KvCache* cache, int64_t span, int64_t width) const;
  std::unique_ptr<jit::TinyJit> MakePrefill(KvCache* cache, int64_t span) const;
  // The slots a decode step computes when `last` is the highest stepping slot of `all`: 1 when only slot 0 steps
  // (a lone generation, which the generator places in slot 0), else all. Two widths, so two traces per span.
  static int64_t StepWidth(int64_t all, int64_t last) { return last == 0 ? 1 : all; }
  Tensor BlockTail(const Tensor& x, const Tensor& o, const std::string& prefix) const;
  // The attention projections of h [rows, n_embd]: q [rows, n_embd], k and v [rows, n_head_kv * head_dim].
  struct Projections {
    Tensor q, k, v;
  };
  Projections Project(const Tensor& h, const std::string& prefix) const;
  const Tensor& W(const std::string& name) const { return weights_.at(name); }
  // x [rows, in] times the projection weight `name` transposed: BlockLinear where block_weights_ has it, else a
  // float matmul against the decoded weight.
  Tensor Linear(const Tensor& x, const std::string& name) const;

  std::string device_;
  LlamaConfig config_;
  std::map<std::string, Tensor> weights_;  // each a decoding graph over the file's bytes in a device buffer
  std::map<std::string, BlockWeight> block_weights_;  // the projections multiplied with 8-bit activations
  std::vector<float> embd_host_;           // token_embd decoded, [vocab, n_embd] row-major, for Step's lookups
};

}  // namespace kiln::llm
