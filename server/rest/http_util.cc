#include "server/rest/http_util.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/rest/http_status.h"
#include "spdlog/spdlog.h"

namespace kiln::server {

void SetError(HttpResponse* res, int http_status, std::string_view message) {
  res->status = http_status;
  res->content_type = kJsonType;
  res->body = ErrorBody(message);
}

void SetStatus(HttpResponse* res, const absl::Status& status) {
  spdlog::debug("http: {} {}", absl::StatusCodeToString(status.code()),
                std::string(status.message()));
  SetError(res, HttpStatusFor(status.code()), std::string(status.message()));
}

void SetJson(HttpResponse* res, std::string body) {
  res->status = 200;
  res->content_type = kJsonType;
  res->body = std::move(body);
}

HttpResponse Answer(int http_status, std::string_view message) {
  HttpResponse res;
  SetError(&res, http_status, message);
  return res;
}

HttpResponse MethodNotAllowed(const HttpRequest& req, const char* allow) {
  HttpResponse res = Answer(405, absl::StrCat("method ", req.method, " not allowed on ",
                                              req.path.substr(0, 256), " (use ", allow, ")"));
  res.headers.emplace_back("Allow", allow);
  return res;
}

HttpResponse MultipartNotHere() {
  return Answer(415, "Content-Type: multipart/form-data is only for POST /v1/training/datasets");
}

}  // namespace kiln::server
