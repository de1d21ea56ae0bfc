// Generator: continuous batching of text generations over one LlamaModel (issue #24 items 4 and 5).
//
// A KvCache of `slots` sequences and one scheduler thread. Each iteration of the thread:
//   1. drops cancelled generations (their slot is free for the next admission at once);
//   2. admits queued generations, first come first served, into free slots;
//   3. prefills one chunk (LlamaModel::Prefill, KvCache::kPrefillChunk tokens) of each generation with more than a
//      few prompt tokens still to read besides its last;
//   4. runs ONE batched decode step (LlamaModel::StepBatch) in which every other admitted generation advances by
//      one token: its next prompt token while the last few are being read, else the token it sampled last;
//   5. for each generation whose prompt is read, samples the next token from its row of logits (Sampler), turns
//      it into text and reports it through the generation's callback, or finishes it: "stop" (the end-of-sequence
//      token, or a stop string), "length" (max_tokens, or the slot's context is full).
// So generations join and leave between steps, and N concurrent generations cost one step per token, not N.
//
// Text: the bytes of each token are appended to the generation's text; a callback carries only whole UTF-8
// characters (a character split over tokens waits for its last byte), control tokens ("<|im_end|>") add no text,
// and text that could be the start of a stop string is held back until it is known not to be one. A stop string is
// not part of the output (OpenAI's semantics).
//
// Callbacks run on the scheduler thread, one generation's strictly in order, the last one with done = true; they
// must not block (hand the event to another thread) and must not call back into the Generator except Cancel.
// Errors: Submit is InvalidArgument for an empty prompt, an id outside the vocabulary, bad sampling parameters, or
// a prompt that leaves no room in a slot's context (the message names the figures); ResourceExhausted when
// `max_queue` generations already wait. A failing step ends every generation in it with that status.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/llm/llama.h"
#include "engine/llm/sampler.h"
#include "engine/llm/tokenizer.h"
#include "engine/realize/realize.h"

namespace kiln::llm {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids (the chat template and tokenizer applied)
  int64_t max_tokens = 16;      // new tokens at most (>= 1)
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings, up to 16 of up to 256 bytes
  bool ignore_eos = false;        // keep going past the end-of-sequence token
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* FinishReasonName(
    FinishReason r);  // "stop", "length", "cancelled", "error"; "" for kNone

struct GenerationEvent {
  std::string text;             // whole UTF-8 characters new since the last event (may be empty)
  std::vector<int32_t> tokens;  // tokens sampled since the last event
  bool done = false;
  FinishReason finish = FinishReason::kNone;
  absl::Status status;  // not OK only with FinishReason::kError
  int64_t prompt_tokens = 0, completion_tokens = 0;
};
using GenerationCallback = std::function<void(const GenerationEvent&)>;

struct GeneratorOptions {
  int64_t slots = 4;        // concurrent generations (KV cache slots)
  int64_t max_ctx = 1024;   // tokens per slot, prompt and output together
  int64_t max_queue = 256;  // generations waiting for a slot
  // The realize context of the cache and of every step (the scheduler thread makes it current); null = the
  // calling thread's current one at Create.
  RealizeContext* context = nullptr;
  // Run two steps at Create (trace and capture), so that the first generation does not pay for compilation.
  bool warm = false;
};

struct GeneratorStats {
  int64_t slots = 0, max_ctx = 0, active = 0, queued = 0;
  uint64_t steps = 0;  // batched decode steps run
  uint64_t slot_steps =
      0;  // sum over steps of the generations in it (slot_steps / steps = mean batch)
  uint64_t prompt_tokens = 0;     // prompt tokens read
  uint64_t generated_tokens = 0;  // tokens sampled
  uint64_t finished = 0, cancelled = 0, failed = 0, rejected = 0;
  int captures = 0;  // decode-step traces captured (one per attention span used, KvCache::SpanFor)
};

class Generator {
 public:
  // `model` and `tokenizer` must outlive the Generator. Allocates the cache (slots x max_ctx) and starts the thread.
  static absl::StatusOr<std::unique_ptr<Generator>> Create(const LlamaModel* model,
                                                           const BpeTokenizer* tokenizer,
                                                           const GeneratorOptions& options);
  ~Generator();  // ends every generation still queued or running with kCancelled, then joins the thread

  // Queues a generation; returns its id. `callback` receives its events (never called from inside Submit).
  absl::StatusOr<uint64_t> Submit(GenerationRequest request, GenerationCallback callback);
  // Ends generation `id` with kCancelled before the next step (a no-op when it already ended).
  void Cancel(uint64_t id);

  GeneratorStats stats() const;
  const GeneratorOptions& options() const { return options_; }

 private:
  struct Seq;
  Generator(const LlamaModel* model, const BpeTokenizer* tokenizer,
            const GeneratorOptions& options);
  void Loop();
  // Appends token `t` to `s` and fills `ev` (text, tokens, and the end when the token ends it).
  void Accept(Seq& s, int32_t t, GenerationEvent* ev) const;
  void Finish(Seq& s, FinishReason why, GenerationEvent* ev) const;

  const LlamaModel* const model_;
  const BpeTokenizer* const tok_;
  const GeneratorOptions options_;
  RealizeContext* context_ = nullptr;
  std::unique_ptr<KvCache> cache_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                               // guarded by mu_
  uint64_t next_id_ = 1;                            // guarded by mu_
  std::deque<std::unique_ptr<Seq>> waiting_;        // guarded by mu_
  std::map<int64_t, std::unique_ptr<Seq>> active_;  // slot -> generation, guarded by mu_
  std::vector<uint64_t> cancel_;                    // ids asked to end, guarded by mu_
  GeneratorStats stats_;                            // guarded by mu_
  std::thread thread_;
};

}  // namespace kiln::llm
