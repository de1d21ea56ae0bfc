// Strict HTTP/1.1 request framing (RFC 9112) for the REST gateway: where a request head ends,
// what it means for the body, and the body's decoding. Anything a proxy in front of kilnd could
// read differently (request smuggling) is refused with 400 and the connection is closed:
//
//   bare LF or bare CR anywhere in the head or in chunk framing       400
//   obs-fold (a field line starting with SP/HTAB)                     400
//   Content-Length sent twice (even with equal values), not 1*DIGIT   400
//   Content-Length together with Transfer-Encoding                    400
//   Transfer-Encoding other than exactly "chunked", or in HTTP/1.0    400
//   HTTP/1.1 without Host, Host twice, Host not host[:port]           400
//   chunk size not 1*HEXDIG (at most 16 digits), whitespace after it
//   without a chunk extension, chunk data not followed by CRLF       400
//   request line over 8 KiB 414; a field line over 8 KiB 400; all field lines over
//   max_header_bytes or more than max_header_count lines 431 (also for chunked trailers)
//   body over max_body_bytes or more than max_chunks chunks           413
//   Expect other than 100-continue                                    417
//
// The request line and field lines are then parsed by Boost.Beast's parser (token, target,
// version and field-value grammar); Beast 1.74 alone is not strict enough (it folds obs-fold,
// accepts duplicate equal Content-Length lists and ignores a Transfer-Encoding without chunked,
// and its chunk decoder scans past bare LFs), hence the checks above on the raw bytes.
// Pure; thread-compatible (one scanner or decoder per connection).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/rest/http_message.h"

namespace kiln::server {

inline constexpr size_t kMaxRequestLineBytes = 8192;  // 414 above
inline constexpr size_t kMaxFieldLineBytes = 8192;    // 400 above
inline constexpr size_t kMaxChunkLineBytes = 4096;    // chunk size + extensions; 400 above

struct HeadLimits {
  int64_t max_header_bytes = 16 << 10;  // all field lines, CRLFs included
  int max_header_count = 64;            // field lines
};

struct HttpError {
  int status = 0;
  std::string message;
};

// Finds the end of a request head in a buffer that grows between calls, checking line endings
// and limits as the bytes arrive (a client cannot make it buffer more than the limits).
class HeadScanner {
 public:
  enum class Result { kNeedMore, kComplete, kError };
  explicit HeadScanner(HeadLimits limits) : limits_(limits) {}
  // Scans the part of `buf` not seen yet; `buf` must start with the bytes earlier calls saw.
  // kComplete: the head is buf[begin(), end()) (empty lines before the request line skipped,
  // RFC 9112 §2.2; end() is after the blank line).
  Result Scan(std::string_view buf);
  size_t begin() const { return begin_; }
  size_t end() const { return pos_; }
  const HttpError& error() const { return error_; }
  void Reset() { *this = HeadScanner(limits_); }

 private:
  Result Fail(int status, std::string message);

  HeadLimits limits_;
  size_t pos_ = 0;         // next byte to scan
  size_t begin_ = 0;       // start of the request line
  size_t line_start_ = 0;  // start of the current line
  bool in_request_line_ = true;
  int lines_ = 0;            // field lines so far
  int64_t field_bytes_ = 0;  // bytes of complete field lines, CRLFs included
  HttpError error_;
};

struct ParsedHead {
  HttpRequest request;
  bool keep_alive = true;  // the client allows another request on this connection
  bool expect_continue = false;
};

// Parses a head found by HeadScanner (the request line through the blank line). False with
// `error` set (400, or 417 for an unknown expectation) when the head breaks the rules above or
// Beast's grammar, or names a method the gateway does not route (GET, HEAD, POST, PUT, PATCH,
// DELETE and OPTIONS are routed).
bool ParseRequestHead(std::string_view head, ParsedHead* out, HttpError* error);

// Decodes a request body: Content-Length bytes, or chunked framing (trailer fields skipped).
class BodyDecoder {
 public:
  struct Limits {
    int64_t max_body_bytes = 64LL << 20;
    int64_t max_chunks = 32768;
    HeadLimits trailer;  // the trailer section counts against the header limits
  };
  static BodyDecoder Fixed(uint64_t content_length);
  static BodyDecoder Chunked(const Limits& limits);

  // Consumes a prefix of `in`, appending body bytes to *out; returns the bytes consumed. After
  // done() or failed(), consumes nothing. Bytes after the body are left for the next request.
  size_t Feed(std::string_view in, std::string* out);
  // A Content-Length body's bytes still to come (0 for chunked), and the way to account for
  // n <= remaining() of them read straight into the body instead of through Feed.
  uint64_t remaining() const { return state_ == State::kFixed ? remaining_ : 0; }
  void Consumed(uint64_t n);
  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kFailed; }
  const HttpError& error() const { return error_; }
  int64_t body_bytes() const { return body_bytes_; }

 private:
  enum class State {
    kFixed,    // Content-Length body; remaining_ bytes to go
    kSize,     // chunk-size digits
    kSizeWs,   // BWS after the size: only ";" may follow
    kExt,      // chunk extensions up to CR
    kSizeLf,   // LF of the chunk line
    kData,     // remaining_ bytes of chunk data
    kDataCr,   // CR after chunk data
    kDataLf,   // LF after chunk data
    kTrailer,  // start of a trailer line (or the final CRLF)
    kTrailerLine,
    kTrailerLf,  // LF of a trailer line
    kEndLf,      // LF of the final CRLF
    kDone,
    kFailed,
  };
  size_t Fail(int status, std::string message, size_t consumed);

  State state_ = State::kFixed;
  Limits limits_;
  uint64_t remaining_ = 0;
  uint64_t size_ = 0;  // chunk size being read
  int size_digits_ = 0;
  size_t line_bytes_ = 0;  // bytes of the current chunk or trailer line
  int64_t chunks_ = 0;
  int64_t body_bytes_ = 0;
  int trailer_lines_ = 0;
  int64_t trailer_bytes_ = 0;
  HttpError error_;
};

}  // namespace kiln::server
