// A streaming multipart/form-data reader (RFC 7578 over RFC 2046 §5.1) for dataset uploads:
// the body is fed in pieces as it arrives and part data is handed on as it is found, so at most
// one piece plus a delimiter's length is held, whatever the size of a part.
//
// Strict: the body starts with the first delimiter ("--" boundary CRLF; no preamble), each part
// has at most kMaxPartHeaderBytes of header lines ending in CRLF and a Content-Disposition with
// a name, and the body ends with the close delimiter ("--" boundary "--"; an epilogue after it is
// ignored). Anything else is malformed. Thread-compatible.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace kiln::server {

inline constexpr size_t kMaxPartHeaderBytes = 8192;

class MultipartReader {
 public:
  struct Part {
    std::string name;
    std::string filename;
  };
  // Return false to stop reading (Feed then returns false with stopped() true).
  using OnPart = std::function<bool(const Part& part)>;
  using OnData = std::function<bool(const char* data, size_t n)>;

  // The boundary parameter of a multipart Content-Type (quoted or not, 1-70 characters).
  static bool BoundaryOf(std::string_view content_type, std::string* boundary);

  explicit MultipartReader(std::string boundary);

  // Feeds the next bytes of the body. False when the body is malformed or a callback stopped.
  bool Feed(std::string_view data, const OnPart& on_part, const OnData& on_data);
  // True once the close delimiter has been read.
  bool complete() const { return state_ == State::kEpilogue; }
  bool stopped() const { return stopped_; }

 private:
  enum class State { kFirst, kAfterBoundary, kHeaders, kData, kEpilogue, kMalformed };
  // Processes `in`; returns the bytes consumed (the rest is kept for the next Feed).
  size_t Process(std::string_view in, const OnPart& on_part, const OnData& on_data, bool* ok);

  const std::string first_;      // "--" boundary
  const std::string delimiter_;  // CRLF "--" boundary
  State state_ = State::kFirst;
  bool stopped_ = false;
  std::string held_;  // bytes not yet processed (a possible delimiter start, part headers)
};

}  // namespace kiln::server
