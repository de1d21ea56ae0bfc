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
// So far: Logits(tokens) runs the whole sequence at once (causal attention, no KV cache). Each sequence length is a
// new graph; one trace for every position needs the symbolic sequence length of issue #20 item 2.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/nn/state/gguf.h"
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

class LlamaModel {
 public:
  // Reads the config and checks that every weight is present with the shape the config implies (InvalidArgument
  // naming the tensor). The weights' bytes are copied to `device` once.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(const nn::GgufModel& gguf, const std::string& device = "CPU");
  const LlamaConfig& config() const { return config_; }

  // Logits [T, vocab] of every position of `tokens` (1 <= T <= context_length, ids inside the vocabulary), float32.
  absl::StatusOr<Tensor> Logits(const std::vector<int32_t>& tokens) const;

 private:
  LlamaModel() = default;
  const Tensor& W(const std::string& name) const { return weights_.at(name); }

  std::string device_;
  LlamaConfig config_;
  std::map<std::string, Tensor> weights_;  // each a decoding graph over the file's bytes in a device buffer
};

}  // namespace kiln::llm
