// BpeTokenizer: the byte-level BPE tokenizer of GPT-2-style models (SmolLM2, Llama 3, Qwen, ...) read from a GGUF
// file's metadata (issue #24 item 3): tokenizer.ggml.model "gpt2", .tokens, .token_type, .merges, .pre, and the
// bos/eos ids.
//
// Encode(text):
//   1. With parse_special, the text of every control / user-defined token (token_type 3 or 4, e.g. "<|im_start|>") is
//      found first, leftmost-longest, and becomes that token; the text between them is encoded as below.
//   2. Pre-tokenization, by the file's `tokenizer.ggml.pre` (llama.cpp's names): "smollm" splits every digit on its
//      own first, then GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      ("gpt2" is the pattern alone). It is matched by hand over code points, with ICU's Unicode properties for
//      \p{L} (general category L*), \p{N} (N*) and \s (White_Space), not by a regex engine.
//   3. Each piece's UTF-8 bytes are mapped to GPT-2's printable byte alphabet and merged by rank (the lowest-ranked
//      adjacent pair first, as `tokenizer.ggml.merges` orders them) until no pair has a rank; the results are
//      looked up in the vocabulary. Results are cached per piece.
// Decode(ids) concatenates the tokens, maps the byte alphabet back to bytes; control tokens decode to their text.
// decode(encode(t)) == t for every valid UTF-8 t.
//
// Errors: FromGguf is InvalidArgument for a tokenizer it cannot read (another model than "gpt2", an unknown
// pre-tokenizer, a merge naming tokens the vocabulary lacks, mismatched array lengths); Encode for text that is not
// valid UTF-8; Decode for an id outside the vocabulary.
// Thread safety: Encode and Decode may be called from several threads (the piece cache has its own lock).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/nn/state/gguf.h"

namespace kiln::llm {

enum class PreTokenizer { kGpt2, kSmolLm };

class BpeTokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromGguf(const nn::GgufFile& file);

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool parse_special = true) const;
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  const std::string& token(int32_t id) const { return tokens_[id]; }  // in the byte alphabet
  // A control or user-defined token ("<|im_end|>"): generation leaves its text out of the output.
  bool is_special(int32_t id) const { return id >= 0 && id < vocab_size() && is_special_[id]; }
  // The pre-tokenizer's pieces of `text` (step 2), for tests.
  absl::StatusOr<std::vector<std::string>> PreTokenize(std::string_view text) const;

 private:
  BpeTokenizer() = default;
  void EncodePiece(std::string_view piece, std::vector<int32_t>* out) const;

  std::vector<std::string> tokens_;
  absl::flat_hash_map<std::string, int32_t> ids_;
  absl::flat_hash_map<std::string, int32_t> merge_rank_;  // "left right" -> rank
  std::vector<std::pair<std::string, int32_t>> specials_;  // control / user-defined tokens' text, longest first
  std::vector<bool> is_special_;
  PreTokenizer pre_ = PreTokenizer::kGpt2;
  int32_t bos_ = -1, eos_ = -1;
  bool add_bos_ = false;
  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_ ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace kiln::llm
