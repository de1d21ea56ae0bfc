// The text-generation routes of kiln_llm models (issue #24 item 6), over the models' generators
// (engine/api/llm_model.h: continuous batching, one thread per model):
//
//   OpenAI-compatible (what the `openai` client and most LLM tooling speak):
//     GET  /v1/models                 the READY kiln_llm models
//     POST /v1/completions            {model, prompt, max_tokens, temperature, top_p, top_k, seed,
//                                      stop, stream, ...}
//     POST /v1/chat/completions       {model, messages: [{role, content}], ...}: the prompt is the
//                                      model file's chat template applied to `messages`
//   Triton's generate extension:
//     POST /v2/models/{m}[/versions/{v}]/generate         {"text_input": ..., "parameters": {...}}
//     POST /v2/models/{m}[/versions/{v}]/generate_stream  the same, answered as server-sent events
//
// With "stream": true (and always for generate_stream) the answer is text/event-stream: one
// `data: {json}` event per batch of new text, then (OpenAI routes) `data: [DONE]`. A client that
// disconnects mid-stream cancels its generation: its KV-cache slot is free before the next step.
// Errors before the first byte are ordinary HTTP errors ({"error": ...}, the status from the
// core's code: 400 naming the field, 404 unknown model, 429 queue full); an error after it is a
// last event {"error": ...}. Sampling fields an engine cannot honour (n > 1, logprobs, echo,
// non-zero penalties) are 400, never silently ignored; fields kiln does not read otherwise
// (user, ...) are ignored as OpenAI's own server ignores unknown ones. The sampling fields are read
// by server/core/llm_sampling.h, as KServe inference on these models reads them (llm_infer.cc).
#pragma once

#include <string_view>

#include "server/core/inference_server.h"
#include "server/rest/http_message.h"
#include "server/rest/http_util.h"

namespace kiln::server {

class LlmRoutes {
 public:
  LlmRoutes(InferenceServer* core, BodyLimits limits) : core_(core), limits_(limits) {}
  // The path is one of the routes above (any method: Plan answers 405 for the wrong one).
  static bool Matches(std::string_view path);
  // The path's row in the endpoint table (server/core/auth.h); "" when !Matches.
  static std::string_view EndpointName(std::string_view path);
  RoutePlan Plan(const HttpRequest& req) const;

 private:
  InferenceServer* const core_;
  const BodyLimits limits_;
};

}  // namespace kiln::server
