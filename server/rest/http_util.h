// Response helpers shared by the REST gateway's route handlers (rest_routes.cc,
// training_routes.cc, dataset_upload.cc). Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "server/rest/http_message.h"

namespace kiln::server {

// The gateway's body limits (RestServerOptions' subset that reading a body needs).
struct BodyLimits {
  int64_t max_body_bytes = 64LL << 20;
  int64_t max_chunks = 32768;
};

// {"error": message} with `http_status`.
void SetError(HttpResponse* res, int http_status, std::string_view message);
// The status's message with the HTTP code of its absl code (http_status.h).
void SetStatus(HttpResponse* res, const absl::Status& status);
void SetJson(HttpResponse* res, std::string body);

// A response given from the head alone: when the request has a body, the connection closes
// after it (the body is not read).
HttpResponse Answer(int http_status, std::string_view message);

// 405 with `Allow: allow` and a message naming the method, the path and what to use.
HttpResponse MethodNotAllowed(const HttpRequest& req, const char* allow);

// 415 for a multipart body on a route that does not take one.
HttpResponse MultipartNotHere();

}  // namespace kiln::server
