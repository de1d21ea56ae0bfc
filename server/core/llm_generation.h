// One kiln_llm generation between a route and the model's generator (engine/api/llm_model.h),
// the same for every route that starts one (server/rest/llm_routes.cc, llm_infer.cc):
//
//   PrepareGeneration  the prompt text tokenized and max_tokens settled, ready for Submit;
//   GenerationMeter    its timings, reported to the InferObserver when it ends (the kiln_llm_*
//                      metric families, labelled with the route) with the model's slot occupancy.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/llm_model.h"
#include "server/core/model_repository.h"
#include "server/core/observer.h"

namespace kiln::server {

struct PreparedGeneration {
  std::vector<int32_t> prompt;
  api::GenerateParams params;
};

// `text` tokenized as it is (no chat template: the text of control tokens, "<|im_start|>",
// becomes those tokens), with `params` whose max_tokens is `max_tokens`, else
// `default_max_tokens` (<= 0: the rest of the context), cut to the room the prompt leaves in a
// slot's context. INVALID_ARGUMENT "<field>: ..." for text that is not UTF-8, and
// "prompt: N tokens leave no room ..." for a prompt that fills the context.
absl::StatusOr<PreparedGeneration> PrepareGeneration(const api::LlmModel& llm,
                                                     std::string_view text, std::string_view field,
                                                     std::optional<int64_t> max_tokens,
                                                     api::GenerateParams params,
                                                     int64_t default_max_tokens);

// The timings of one generation of `version` (a kiln_llm version with its model), from its
// construction (the request's arrival) to its last event. `observer` (null: none) gets the
// GenerationObservation, labelled `route`, when the last event is timed, and the model's
// occupancy then and whenever Occupancy is called (after Submit). Time is called on the
// generator's thread, once per event in order; Occupancy from any thread.
class GenerationMeter {
 public:
  GenerationMeter(InferObserver* observer, std::shared_ptr<const ModelVersion> version,
                  std::string route);

  const ModelVersion& version() const { return *version_; }
  api::LlmModel& llm() const { return *version_->llm; }

  void Time(const api::GenerateEvent& ev);
  void Occupancy() const;

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxGaps = 1 << 16;

  InferObserver* const observer_;
  const std::shared_ptr<const ModelVersion> version_;
  const std::string route_;
  const Clock::time_point start_;
  bool seen_token_ = false;
  Clock::time_point last_token_;
  GenerationObservation obs_;
};

}  // namespace kiln::server
