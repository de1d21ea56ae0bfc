#include "server/rest/http_util.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/rest/http_status.h"
#include "spdlog/spdlog.h"

namespace kiln::server {

void SetError(httplib::Response& res, int http_status, std::string_view message) {
  res.status = http_status;
  res.set_content(ErrorBody(message), kJsonType);
}

void SetStatus(httplib::Response& res, const absl::Status& status) {
  spdlog::debug("http: {} {}", absl::StatusCodeToString(status.code()),
                std::string(status.message()));
  SetError(res, HttpStatusFor(status.code()), std::string(status.message()));
}

void SetJson(httplib::Response& res, std::string body) {
  res.status = 200;
  res.set_content(std::move(body), kJsonType);
}

void CloseAfter(httplib::Response& res) {
  res.set_header("Connection", "close");
  auto body = std::make_shared<std::string>(std::move(res.body));
  res.body.clear();
  const std::string type = res.get_header_value("Content-Type");
  res.headers.erase("Content-Type");  // set_content_provider sets it again
  res.set_content_provider(body->size(), type.empty() ? "text/plain" : type,
                           [body](size_t offset, size_t length, httplib::DataSink& sink) {
                             sink.write(body->data() + offset, length);
                             return false;
                           });
}

void MethodNotAllowed(httplib::Response& res, const httplib::Request& req, const char* allow,
                      bool body_unread) {
  res.set_header("Allow", allow);
  SetError(res, 405,
           absl::StrCat("method ", req.method, " not allowed on ", req.path.substr(0, 256),
                        " (use ", allow, ")"));
  if (body_unread) CloseAfter(res);
}

bool IsChunked(const httplib::Request& req) {
  const std::string te = req.get_header_value("Transfer-Encoding");
  return !te.empty();
}

bool ReadBody(const BodyLimits& limits, const httplib::Request& req,
              const httplib::ContentReader* reader, std::string* body, httplib::Response& res) {
  if (reader == nullptr || (!req.has_header("Content-Length") && !IsChunked(req))) return true;
  if (req.is_multipart_form_data()) {
    // cpp-httplib's plain reader cannot read a multipart body (it threw: a 500 before).
    SetError(res, 415, "Content-Type: multipart/form-data is only for POST /v1/training/datasets");
    CloseAfter(res);
    return false;
  }
  const bool chunked = IsChunked(req);
  if (!chunked) body->reserve(req.get_header_value<uint64_t>("Content-Length"));
  int64_t pieces = 0;
  const char* over = nullptr;
  const bool ok = (*reader)([&](const char* data, size_t n) {
    if (body->size() + n > static_cast<uint64_t>(limits.max_body_bytes)) {
      over = "bytes";
      return false;
    }
    if (chunked && ++pieces > limits.max_chunks) {
      over = "chunks";
      return false;
    }
    body->append(data, n);
    return true;
  });
  if (ok) return true;
  if (over == nullptr) {
    SetError(res, 400, "request body: incomplete or malformed (chunk framing or timeout)");
  } else if (std::string_view(over) == "bytes") {
    SetError(res, 413,
             absl::StrCat("request body: exceeds the limit of ", limits.max_body_bytes, " bytes"));
  } else {
    SetError(res, 413,
             absl::StrCat("request body: more than ", limits.max_chunks, " chunks (the limit)"));
  }
  CloseAfter(res);
  return false;
}

}  // namespace kiln::server
