#include "server/rest/http_parse.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "boost/beast/http/empty_body.hpp"
#include "boost/beast/http/parser.hpp"

namespace kiln::server {
namespace {

namespace http = boost::beast::http;

constexpr size_t kMaxLeadingEmptyBytes = 8;  // CRLFs tolerated before a request line
constexpr int kMaxChunkSizeDigits = 16;

bool IsOws(char c) { return c == ' ' || c == '\t'; }

bool IsHexDigit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && IsOws(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsOws(s.back())) s.remove_suffix(1);
  return s;
}

std::string HeaderLimitMessage(const HeadLimits& limits, std::string_view what) {
  return absl::StrCat(std::string(what), ": exceed the limit of ", limits.max_header_count,
                      " lines, ", limits.max_header_bytes, " bytes");
}

// host[:port] with the characters of RFC 3986's reg-name, IPv4 and IP-literal.
bool ValidHost(std::string_view host) {
  for (char c : host) {
    const bool ok = absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                    std::string_view("-._~%!$&'()*+;=:[]").find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The framing rules on the raw field lines (RFC 9112 §3.2, §6.1-6.3), before Beast sees them.
bool CheckFraming(std::string_view head, ParsedHead* out, HttpError* error) {
  auto fail = [&](std::string message) {
    *error = {400, std::move(message)};
    return false;
  };
  const size_t request_end = head.find("\r\n");
  const std::string_view request_line = head.substr(0, request_end);
  const bool http10 =
      request_line.size() >= 9 && request_line.substr(request_line.size() - 9) == " HTTP/1.0";
  int hosts = 0, lengths = 0, encodings = 0;
  std::string_view host, length, encoding, expect;
  for (size_t start = request_end + 2; start < head.size();) {
    const size_t end = head.find("\r\n", start);
    const std::string_view line = head.substr(start, end - start);
    start = end + 2;
    if (line.empty()) break;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return fail("request header: a field line without ':'");
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = TrimOws(line.substr(colon + 1));
    if (EqualsNoCase(name, "host")) {
      ++hosts;
      host = value;
    } else if (EqualsNoCase(name, "content-length")) {
      ++lengths;
      length = value;
    } else if (EqualsNoCase(name, "transfer-encoding")) {
      ++encodings;
      encoding = value;
    } else if (EqualsNoCase(name, "expect")) {
      expect = value;
    }
  }
  if (hosts == 0 && !http10) return fail("Host: missing (HTTP/1.1 requires it)");
  if (hosts > 1) return fail(absl::StrCat("Host: sent ", hosts, " times (once at most)"));
  if (hosts == 1 && !ValidHost(host)) return fail("Host: not a host[:port]");
  if (lengths > 1) {
    return fail(absl::StrCat("Content-Length: sent ", lengths, " times (once at most)"));
  }
  if (encodings > 0 && lengths > 0) {
    return fail("Content-Length and Transfer-Encoding together: refused (RFC 9112 §6.3)");
  }
  if (encodings > 1) {
    return fail(absl::StrCat("Transfer-Encoding: sent ", encodings, " times (once at most)"));
  }
  if (encodings == 1) {
    if (http10) return fail("Transfer-Encoding: not allowed in HTTP/1.0");
    if (!EqualsNoCase(encoding, "chunked")) {
      return fail("Transfer-Encoding: only chunked is supported");
    }
    out->request.chunked = true;
  }
  if (lengths == 1) {
    // 19 digits always fit in uint64_t.
    if (!AllDigits(length) || length.size() > 19) {
      return fail("Content-Length: not a non-negative integer");
    }
    uint64_t n = 0;
    for (char c : length) n = n * 10 + static_cast<uint64_t>(c - '0');
    out->request.content_length = n;
  }
  if (!expect.empty() && !http10) {
    if (!EqualsNoCase(expect, "100-continue")) {
      *error = {417, "Expect: only 100-continue is supported"};
      return false;
    }
    out->expect_continue = true;
  }
  return true;
}

constexpr std::array<std::string_view, 7> kMethods = {"GET",   "HEAD",   "POST",   "PUT",
                                                      "PATCH", "DELETE", "OPTIONS"};

}  // namespace

// ** head scanner **

HeadScanner::Result HeadScanner::Fail(int status, std::string message) {
  error_ = {status, std::move(message)};
  return Result::kError;
}

HeadScanner::Result HeadScanner::Scan(std::string_view buf) {
  const char* d = buf.data();
  const size_t n = buf.size();
  while (pos_ < n) {
    const char c = d[pos_];
    if (c == '\n') return Fail(400, "request head: a bare LF (lines must end with CRLF)");
    if (c == '\r') {
      if (pos_ + 1 >= n) break;  // the LF has not arrived yet
      if (d[pos_ + 1] != '\n') return Fail(400, "request head: a CR not followed by LF");
      const size_t len = pos_ - line_start_;
      pos_ += 2;
      if (in_request_line_) {
        if (len == 0) {  // an empty line before the request line (RFC 9112 §2.2)
          if (pos_ > kMaxLeadingEmptyBytes) {
            return Fail(400, "request head: empty lines instead of a request line");
          }
          line_start_ = begin_ = pos_;
          continue;
        }
        in_request_line_ = false;
      } else if (len == 0) {
        return Result::kComplete;
      } else {
        if (d[line_start_] == ' ' || d[line_start_] == '\t') {
          return Fail(400, "request head: obs-fold (a line starting with whitespace) is refused");
        }
        ++lines_;
        field_bytes_ += static_cast<int64_t>(len) + 2;
        if (lines_ > limits_.max_header_count || field_bytes_ > limits_.max_header_bytes) {
          return Fail(431, HeaderLimitMessage(limits_, "request headers"));
        }
      }
      line_start_ = pos_;
      continue;
    }
    size_t next = pos_ + 1;
    while (next < n && d[next] != '\r' && d[next] != '\n') ++next;
    pos_ = next;
    const size_t len = pos_ - line_start_;
    if (in_request_line_) {
      if (len > kMaxRequestLineBytes) {
        return Fail(414, absl::StrCat("request line: longer than ", kMaxRequestLineBytes,
                                      " bytes (the limit)"));
      }
    } else {
      if (len > kMaxFieldLineBytes) {
        return Fail(400, absl::StrCat("request header: a field line longer than ",
                                      kMaxFieldLineBytes, " bytes (the limit)"));
      }
      if (field_bytes_ + static_cast<int64_t>(len) > limits_.max_header_bytes) {
        return Fail(431, HeaderLimitMessage(limits_, "request headers"));
      }
    }
  }
  return Result::kNeedMore;
}

// ** head parser **

bool ParseRequestHead(std::string_view head, ParsedHead* out, HttpError* error) {
  *out = ParsedHead();
  if (!CheckFraming(head, out, error)) return false;
  http::request_parser<http::empty_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(head.size() + 1));
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // boost::none fails in 1.74
  parser.eager(false);
  boost::beast::error_code ec;
  parser.put(boost::asio::const_buffer(head.data(), head.size()), ec);
  if (ec || !parser.is_header_done()) {
    *error = {400, absl::StrCat("request head: ", ec ? ec.message() : "incomplete")};
    return false;
  }
  const http::request<http::empty_body>& msg = parser.get();
  HttpRequest& req = out->request;
  req.method = std::string(msg.method_string());
  if (std::find(kMethods.begin(), kMethods.end(), req.method) == kMethods.end()) {
    *error = {400, absl::StrCat("method ", req.method.substr(0, 32),
                                ": not supported (GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS)")};
    return false;
  }
  req.target = std::string(msg.target());
  if (!ParseTarget(req.target, &req.path, &req.params)) {
    *error = {400, "request target: not /path[?query] with valid percent-escapes"};
    return false;
  }
  req.version = static_cast<int>(msg.version());
  req.headers.reserve(std::distance(msg.begin(), msg.end()));
  for (const auto& field : msg) {
    req.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  out->keep_alive = parser.keep_alive();
  return true;
}

// ** body decoder **

BodyDecoder BodyDecoder::Fixed(uint64_t content_length) {
  BodyDecoder d;
  d.state_ = content_length == 0 ? State::kDone : State::kFixed;
  d.remaining_ = content_length;
  return d;
}

BodyDecoder BodyDecoder::Chunked(const Limits& limits) {
  BodyDecoder d;
  d.state_ = State::kSize;
  d.limits_ = limits;
  return d;
}

void BodyDecoder::Consumed(uint64_t n) {
  remaining_ -= std::min(n, remaining_);
  body_bytes_ += static_cast<int64_t>(n);
  if (remaining_ == 0) state_ = State::kDone;
}

size_t BodyDecoder::Fail(int status, std::string message, size_t consumed) {
  state_ = State::kFailed;
  error_ = {status, std::move(message)};
  return consumed;
}

size_t BodyDecoder::Feed(std::string_view in, std::string* out) {
  size_t i = 0;
  const size_t n = in.size();
  auto bad = [&](std::string what) {
    return Fail(400, absl::StrCat("request body: malformed chunked framing (", what, ")"), i);
  };
  while (i < n) {
    const char c = in[i];
    switch (state_) {
      case State::kDone:
      case State::kFailed:
        return i;
      case State::kFixed:
      case State::kData: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, n - i));
        out->append(in.data() + i, take);
        i += take;
        remaining_ -= take;
        if (state_ == State::kFixed) body_bytes_ += static_cast<int64_t>(take);
        if (remaining_ == 0) state_ = state_ == State::kFixed ? State::kDone : State::kDataCr;
        continue;
      }
      case State::kSize:
        if (IsHexDigit(c)) {
          if (++size_digits_ > kMaxChunkSizeDigits) return bad("chunk size over 16 hex digits");
          size_ = size_ * 16 + static_cast<uint64_t>(HexValue(c));
          break;
        }
        if (size_digits_ == 0) return bad("chunk size not hexadecimal");
        if (c == '\r') {
          state_ = State::kSizeLf;
        } else if (c == ';') {
          state_ = State::kExt;
        } else if (IsOws(c)) {
          state_ = State::kSizeWs;
        } else if (c == '\n') {
          return bad("bare LF after the chunk size");
        } else {
          return bad("chunk size not hexadecimal");
        }
        break;
      case State::kSizeWs:
        if (c == ';') {
          state_ = State::kExt;
        } else if (!IsOws(c)) {
          return bad("whitespace after the chunk size without an extension");
        }
        break;
      case State::kExt:
        if (c == '\r') {
          state_ = State::kSizeLf;
        } else if (c == '\n') {
          return bad("bare LF in a chunk extension");
        } else if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) {
          return bad("control character in a chunk extension");
        }
        break;
      case State::kSizeLf:
        if (c != '\n') return bad("CR not followed by LF after the chunk size");
        line_bytes_ = 0;
        size_digits_ = 0;
        if (size_ == 0) {
          state_ = State::kTrailer;
          break;
        }
        if (++chunks_ > limits_.max_chunks) {
          return Fail(
              413,
              absl::StrCat("request body: more than ", limits_.max_chunks, " chunks (the limit)"),
              i);
        }
        if (size_ > static_cast<uint64_t>(limits_.max_body_bytes - body_bytes_)) {
          return Fail(
              413,
              absl::StrCat("request body: exceeds the limit of ", limits_.max_body_bytes, " bytes"),
              i);
        }
        body_bytes_ += static_cast<int64_t>(size_);
        remaining_ = size_;
        size_ = 0;
        state_ = State::kData;
        ++i;
        continue;
      case State::kDataCr:
        if (c != '\r') return bad("chunk data not followed by CRLF");
        state_ = State::kDataLf;
        break;
      case State::kDataLf:
        if (c != '\n') return bad("chunk data not followed by CRLF");
        state_ = State::kSize;
        line_bytes_ = 0;
        ++i;
        continue;
      case State::kTrailer:
        if (c == '\r') {
          state_ = State::kEndLf;
        } else if (c == '\n') {
          return bad("bare LF ending the body");
        } else if (IsOws(c)) {
          return bad("obs-fold in the trailer section");
        } else {
          state_ = State::kTrailerLine;
          if (++trailer_lines_ > limits_.trailer.max_header_count) {
            return Fail(431, HeaderLimitMessage(limits_.trailer, "request trailers"), i);
          }
        }
        break;
      case State::kTrailerLine:
        if (c == '\r') {
          state_ = State::kTrailerLf;
        } else if (c == '\n') {
          return bad("bare LF in the trailer section");
        }
        break;
      case State::kTrailerLf:
        if (c != '\n') return bad("CR not followed by LF in the trailer section");
        state_ = State::kTrailer;
        line_bytes_ = 0;
        ++i;
        continue;
      case State::kEndLf:
        if (c != '\n') return bad("CR not followed by LF at the end of the body");
        state_ = State::kDone;
        return i + 1;
    }
    // One byte of a chunk line or a trailer line was consumed.
    ++i;
    if (state_ == State::kTrailerLine || state_ == State::kTrailerLf) {
      if (++trailer_bytes_ > limits_.trailer.max_header_bytes) {
        return Fail(431, HeaderLimitMessage(limits_.trailer, "request trailers"), i);
      }
    } else if (++line_bytes_ > kMaxChunkLineBytes) {
      return bad(absl::StrCat("a chunk line longer than ", kMaxChunkLineBytes, " bytes"));
    }
  }
  return i;
}

}  // namespace kiln::server
