// The sampling fields of a kiln_llm generation (issue #24), read the same way wherever a request
// carries them: the JSON bodies of the OpenAI and generate routes (server/rest/llm_routes.cc) and
// the KServe v2 inference call's `sampling_parameters` input and request parameters
// (llm_infer.cc). The fields, as vLLM and OpenAI spell them:
//
//   max_tokens (or max_completion_tokens, max_new_tokens)  integer 1 .. 2^20
//   temperature  number 0 .. 100            top_p  number 1e-9 .. 1
//   top_k        integer -1 .. 2^24 (-1 and 0: no limit)
//   seed         integer (any int64)        stop   a string or an array of strings ("" adds none)
//   ignore_eos   boolean
//   n, best_of   1 only; presence_penalty, frequency_penalty  0 only; repetition_penalty  1 only
//
// null leaves a field unset (ignore_eos excepted: it must be a boolean). Errors are
// INVALID_ARGUMENT "<field>: <problem>", the field named as the caller passes it
// ("parameters.top_p", "sampling_parameters.stop[1]"), so they can go to a client as they are.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/api/llm_model.h"
#include "rapidjson/document.h"

namespace kiln::server {

struct SamplingFields {
  std::optional<int64_t> max_tokens;  // unset: the route's default
  api::GenerateParams params;         // every field but max_tokens
};

// The field names ReadSamplingField reads (their aliases left out), for messages.
inline constexpr std::string_view kSamplingFieldNames =
    "max_tokens, temperature, top_p, top_k, seed, stop, ignore_eos, n, best_of, presence_penalty, "
    "frequency_penalty, repetition_penalty";

// Reads field `key` with value `value` into `out`. Returns false, `out` untouched, when `key` is
// not a sampling field (the caller decides whether that is an error).
absl::StatusOr<bool> ReadSamplingField(std::string_view key, const rapidjson::Value& value,
                                       const std::string& field, SamplingFields* out);

}  // namespace kiln::server
