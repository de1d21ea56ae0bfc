// Sampler: the next token from a row of logits, with the knobs OpenAI's and Triton's generate APIs carry (issue #24
// item 4): temperature, top-k, top-p (nucleus) and a seed.
//
//   temperature 0       greedy: the argmax (the lowest id among equal maxima), no randomness used.
//   temperature T > 0   softmax(logits / T) restricted, in this order, to the top_k largest (0 = all) and then to
//                       the smallest set of the largest whose probabilities sum to at least top_p (1 = all; the
//                       most likely token always stays), renormalised, and drawn with one uniform number.
// Ties in the ordering break toward the lower id, so a (seed, logits) pair always gives the same token. Without a
// seed the generator is seeded from std::random_device.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace kiln::llm {

struct SamplingParams {
  double temperature = 1.0;  // 0..100
  int64_t top_k = 0;         // 0 = no limit
  double top_p = 1.0;        // (0, 1]
  std::optional<uint64_t> seed;
  // InvalidArgument naming the field and its range.
  absl::Status Validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int32_t Sample(absl::Span<const float> logits);
  // The distribution Sample draws from (probabilities per id, 0 outside the kept set; one 1 when greedy): for tests.
  std::vector<double> Distribution(absl::Span<const float> logits) const;

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;  // scratch
};

}  // namespace kiln::llm
