// PrepareGeneration and GenerationMeter (llm_generation.h).
#include "server/core/llm_generation.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

uint64_t Nanos(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

}  // namespace

absl::StatusOr<PreparedGeneration> PrepareGeneration(const api::LlmModel& llm,
                                                     std::string_view text, std::string_view field,
                                                     std::optional<int64_t> max_tokens,
                                                     api::GenerateParams params,
                                                     int64_t default_max_tokens) {
  absl::StatusOr<std::vector<int32_t>> prompt = llm.Tokenize(text);
  if (!prompt.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(field), ": ", prompt.status().message()));
  }
  const int64_t max_ctx = llm.info().max_ctx;
  const int64_t room = max_ctx - static_cast<int64_t>(prompt->size());
  if (room < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt: ", prompt->size(), " tokens leave no room in the model's context of ",
                     max_ctx, " tokens"));
  }
  // A request for more than the room is cut to it (as OpenAI's server does).
  params.max_tokens =
      std::min(room, max_tokens.value_or(default_max_tokens > 0 ? default_max_tokens : room));
  return PreparedGeneration{*std::move(prompt), std::move(params)};
}

GenerationMeter::GenerationMeter(InferObserver* observer,
                                 std::shared_ptr<const ModelVersion> version, std::string route)
    : observer_(observer),
      version_(std::move(version)),
      route_(std::move(route)),
      start_(Clock::now()) {}

void GenerationMeter::Time(const api::GenerateEvent& ev) {
  if (ev.new_tokens > 0) {
    const Clock::time_point now = Clock::now();
    if (!seen_token_) {
      obs_.first_token_ns = Nanos(start_, now);
      seen_token_ = true;
    } else {
      const uint64_t gap = Nanos(last_token_, now) / static_cast<uint64_t>(ev.new_tokens);
      for (int64_t i = 0; i < ev.new_tokens && obs_.inter_token_ns.size() < kMaxGaps; ++i)
        obs_.inter_token_ns.push_back(gap);
    }
    last_token_ = now;
  }
  if (!ev.done) return;
  obs_.model = version_->name;
  obs_.version = std::to_string(version_->version);
  obs_.route = route_;
  obs_.finish_reason = ev.finish_reason;
  obs_.prompt_tokens = ev.prompt_tokens;
  obs_.completion_tokens = ev.completion_tokens;
  obs_.duration_ns = Nanos(start_, Clock::now());
  if (observer_ != nullptr) observer_->ObserveGeneration(obs_);
  Occupancy();
}

void GenerationMeter::Occupancy() const {
  if (observer_ == nullptr) return;
  const api::LlmStats s = version_->llm->stats();
  observer_->ObserveLlmOccupancy(
      {version_->name, std::to_string(version_->version), s.slots, s.active, s.queued});
}

}  // namespace kiln::server
