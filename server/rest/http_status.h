// The one mapping from absl::Status (the core's error type) to an HTTP status code, and the
// KServe v2 REST error body {"error": "<message>"}. Codes follow the google.rpc.Code -> HTTP table
// that gRPC gateways use, so a REST caller sees the status a gRPC caller would see for the same
// request (NOT_FOUND 404, INVALID_ARGUMENT 400, RESOURCE_EXHAUSTED 429, UNAVAILABLE 503, ...).
// HTTP framing errors that have no core status (413 body too large, 431 headers too large, 411
// length required, 405 method not allowed) are produced by the gateway itself (rest_server.cc).
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace kiln::server {

// 200 for kOk; never returns a 1xx/2xx/3xx code for an error.
int HttpStatusFor(absl::StatusCode code);

// {"error":"<message>"} with the message JSON-escaped; bytes that are not valid UTF-8 (a client's
// model name echoed back, say) become '?' so the body is always valid JSON.
std::string ErrorBody(std::string_view message);

// `text` with every byte that does not start a valid UTF-8 sequence (RFC 3629: overlong forms,
// surrogates and code points past U+10FFFF are not) replaced by '?'.
std::string ValidUtf8(std::string_view text);

}  // namespace kiln::server
