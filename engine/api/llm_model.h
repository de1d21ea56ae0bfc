// kiln::api::LlmModel: a decoder LLM served from a GGUF file (issue #24), the facade kilnd's kiln_llm platform
// links. Like engine.h, no UOp, tensor or device type appears here.
//
//   Load        reads the GGUF file (engine/nn/state/gguf.h), builds the Llama model (engine/llm/llama.h), its
//               tokenizer and chat template from the file's metadata, and starts a Generator (engine/llm/generator.h):
//               `slots` KV-cache slots of `max_ctx` tokens each, stepped together by continuous batching on one
//               thread, with its own RealizeContext (so it shares no kernel cache or memo with any api::Engine).
//               With `warm`, the decode step is traced and captured before Load returns.
//   ApplyChatTemplate / Tokenize / Detokenize   the text side.
//   Submit / Cancel                              generations; events arrive on the generator's thread.
//
// Errors: Load is NOT_FOUND for a missing file, INVALID_ARGUMENT for a file that is not a supported GGUF Llama (the
// message names the key or tensor); Submit as Generator::Submit (INVALID_ARGUMENT naming the field,
// RESOURCE_EXHAUSTED when the queue is full). Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::api {

struct LlmOptions {
  int64_t slots = 4;  // concurrent generations
  int64_t max_ctx =
      1024;  // tokens per generation, prompt included (at most the model's context length)
  int64_t max_queue = 256;  // generations waiting for a slot; more are RESOURCE_EXHAUSTED
  std::string device;       // "" = CPU
  bool warm = true;
  // Multiply 8-bit quantized activations by the weights' integers, as llama.cpp does (llm/block_linear.h): faster
  // where the device has 8-bit dot products and several generations step together; the logits then carry 8-bit
  // quantization noise (a few percent of the largest logit) that float activations do not.
  bool int8_activations = false;
};

struct ChatTurn {
  std::string role, content;
};

struct GenerateParams {
  int64_t max_tokens = 16;
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

struct GenerateEvent {
  std::string text;        // whole UTF-8 characters since the last event
  int64_t new_tokens = 0;  // tokens sampled since the last event
  bool done = false;
  std::string finish_reason;  // when done: "stop", "length", "cancelled" or "error"
  absl::Status status;        // not OK with "error"
  int64_t prompt_tokens = 0, completion_tokens = 0;
};
using GenerateCallback = std::function<void(const GenerateEvent&)>;

struct LlmInfo {
  std::string architecture;  // "llama"
  std::string name;          // general.name, "" when absent
  int64_t context_length = 0, vocab = 0, n_layer = 0, n_embd = 0, params = 0;
  int64_t slots = 0, max_ctx = 0;
  bool has_chat_template = false;
  // The projections multiply 8-bit quantized activations by the weights' integers, as llama.cpp does
  // (llm/block_linear.h: where the device has 8-bit dot products), rather than float activations by decoded weights.
  bool quantized_activations = false;
};

struct LlmStats {
  int64_t slots = 0, active = 0, queued = 0;
  uint64_t steps = 0, slot_steps = 0, prompt_tokens = 0, generated_tokens = 0;
  uint64_t finished = 0, cancelled = 0, failed = 0, rejected = 0;
};

class LlmModel {
 public:
  static absl::StatusOr<std::shared_ptr<LlmModel>> Load(const std::string& gguf_path,
                                                        const LlmOptions& options);
  ~LlmModel();

  const LlmInfo& info() const;
  // The file's tokenizer.chat_template rendered with `messages` (FAILED_PRECONDITION when the file has none;
  // INVALID_ARGUMENT when the template raises, with its message).
  absl::StatusOr<std::string> ApplyChatTemplate(const std::vector<ChatTurn>& messages,
                                                bool add_generation_prompt = true) const;
  // Control tokens' text ("<|im_start|>") becomes those tokens. INVALID_ARGUMENT for text that is not UTF-8.
  absl::StatusOr<std::vector<int32_t>> Tokenize(std::string_view text) const;

  absl::StatusOr<uint64_t> Submit(std::vector<int32_t> prompt, const GenerateParams& params,
                                  GenerateCallback callback);
  void Cancel(uint64_t id);
  LlmStats stats() const;

  struct State;

 private:
  explicit LlmModel(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kiln::api
