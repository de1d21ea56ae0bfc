// Response and body helpers shared by the REST gateway's route handlers (rest_server.cc,
// training_routes.cc). Internal to server/rest: they take cpp-httplib types.
// Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "httplib.h"

namespace kiln::server {

inline constexpr char kJsonType[] = "application/json";

// The gateway's body limits (RestServerOptions' subset that reading a body needs).
struct BodyLimits {
  int64_t max_body_bytes = 64LL << 20;
  int64_t max_chunks = 32768;
};

// {"error": message} with `http_status`.
void SetError(httplib::Response& res, int http_status, std::string_view message);
// The status's message with the HTTP code of its absl code (http_status.h).
void SetStatus(httplib::Response& res, const absl::Status& status);
void SetJson(httplib::Response& res, std::string body);

// For a response that leaves (part of) the request body unread: the connection cannot carry
// another request, so it must close after this response. cpp-httplib 0.11 decides keep-alive
// from the request only, but closes the connection when a content provider reports failure;
// the provider writes the whole body first, then reports it, so the client gets the full
// response (Content-Length is exact) followed by the close. Call after the body is set.
void CloseAfter(httplib::Response& res);

// 405 with `Allow: allow` and a message naming the method, the path and what to use; closes the
// connection after the response when the request body is left unread.
void MethodNotAllowed(httplib::Response& res, const httplib::Request& req, const char* allow,
                      bool body_unread);

bool IsChunked(const httplib::Request& req);

// Reads the whole body (Content-Length or chunked) into `body` within `limits`. On failure sets
// the error response (400 malformed/timeout, 413 over a limit, naming it), marks the connection
// to close and returns false. No body (neither header): `body` stays empty. A multipart body is
// refused with 415 (only the dataset upload route reads one, through the multipart reader).
bool ReadBody(const BodyLimits& limits, const httplib::Request& req,
              const httplib::ContentReader* reader, std::string* body, httplib::Response& res);

}  // namespace kiln::server
