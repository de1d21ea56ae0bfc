// The REST gateway's own request/response types: what a route sees and returns, independent of
// the HTTP library (the connection code in http_connection.h parses into them and writes them).
//
// A route is planned from the request head alone (Router::Plan, on an I/O thread: it must not
// block), then either answered at once (404, 405, 415, 503 ...), or handed the whole body
// (RoutePlan::handle, on a worker thread: it may block, e.g. on inference), or fed the body in
// pieces as it arrives (RoutePlan::sink, on worker threads, one call at a time). A response may
// carry a ResponseStream: a chunked body written as the stream produces it, without holding a
// worker (training event streams).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::server {

inline constexpr char kJsonType[] = "application/json";

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // as sent (a token; GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS)
  std::string target;  // the request-target as sent
  std::string path;    // percent-decoded path of the target
  HeaderList params;   // query parameters, decoded ('+' is a space), in order
  HeaderList headers;  // field lines in order; names as sent, values without surrounding OWS
  int version = 11;    // 10 or 11
  bool chunked = false;
  std::optional<uint64_t> content_length;

  // A body follows the head (Content-Length > 0 or chunked; RFC 9112 §6.3).
  bool has_body() const { return chunked || content_length.value_or(0) > 0; }
  // The first value of a header (case-insensitive name); "" when absent.
  std::string_view Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
  int HeaderCount(std::string_view name) const;  // field lines with this (case-insensitive) name
  // The first value of a query parameter; "" when absent.
  std::string_view Param(std::string_view name) const;
  bool HasParam(std::string_view name) const;
  bool IsMultipart() const;  // Content-Type multipart/form-data
};

// A body produced over time (a chunked response). Take and KeepAlive are called from the
// connection's loop; the producer calls the wake function (set once by the connection) from any
// thread whenever new bytes are ready. Close is called once, when the connection is done with the
// stream (ended, client gone, server stopping); the producer stops producing then.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  virtual void SetWake(std::function<void()> wake) = 0;
  // The bytes ready now (possibly none); *end = true when nothing follows them.
  virtual std::string Take(bool* end) = 0;
  // Bytes to send after `KeepAliveInterval()` without any (a comment line, an empty line).
  virtual std::string KeepAlive() const = 0;
  virtual std::chrono::milliseconds KeepAliveInterval() const = 0;
  // The last bytes when the server stops before the stream ended.
  virtual std::string StopMessage() const = 0;
  virtual void Close() = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;  // "" = no Content-Type
  std::string body;
  HeaderList headers;  // extra header lines (Allow, Inference-Header-Content-Length, ...)
  bool close = false;  // close the connection after this response
  std::shared_ptr<ResponseStream> stream;  // set: a chunked body from the stream, `body` unused
};

// A route that takes the body in pieces (dataset uploads). Calls are serialized and run on
// worker threads. Write returns false after setting `res` to the error: no more calls follow and
// the connection closes after the response (the rest of the body is not read).
class BodySink {
 public:
  virtual ~BodySink() = default;
  virtual bool Write(std::string_view piece, HttpResponse* res) = 0;
  virtual void Finish(HttpResponse* res) = 0;  // the whole body arrived
};

using BufferedHandler = std::function<void(const HttpRequest&, std::string& body, HttpResponse*)>;

struct RoutePlan {
  std::optional<HttpResponse> answer;  // set: answered from the head; the body is not read
  int64_t max_body_bytes = 0;          // 413 above it (before reading, when Content-Length says)
  int64_t max_chunks = 0;              // pieces of a chunked body; 413 above it
  BufferedHandler handle;              // the whole body, or
  bool nonblocking = false;            // `handle` never blocks: run it on the I/O thread
  std::unique_ptr<BodySink> sink;      // the body in pieces of at most kBodyPieceBytes
};

inline constexpr size_t kBodyPieceBytes = 1 << 20;

class Router {
 public:
  virtual ~Router() = default;
  // Runs on an I/O thread: pure routing and limits, no blocking call.
  virtual RoutePlan Plan(const HttpRequest& req) const = 0;
};

// Case-insensitive ASCII comparisons of header names and tokens (the packaged Abseil's
// string_view is not std::string_view, so absl::EqualsIgnoreCase does not take one).
bool EqualsNoCase(std::string_view a, std::string_view b);
bool StartsWithNoCase(std::string_view s, std::string_view prefix);

// Splits a request-target (origin-form "/p?q", or absolute-form "http://h/p?q") into the
// percent-decoded path and the decoded query parameters. False for any other form or a bad
// percent-escape.
bool ParseTarget(std::string_view target, std::string* path, HeaderList* params);

// The status line and header section of `res` (Content-Length or chunked framing, Connection).
// `keep_alive` false adds "Connection: close"; HTTP/1.0 keep-alive adds "Connection: keep-alive".
std::string SerializeHead(const HttpResponse& res, size_t body_bytes, bool keep_alive,
                          int request_version, bool chunked);

}  // namespace kiln::server
