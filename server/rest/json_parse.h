// Bounded JSON parsing for the REST gateway (RapidJSON).
//
// Why RapidJSON (Debian rapidjson-dev): header-only, one of the fastest DOM parsers packaged in
// Debian 12, and its reader has an iterative mode (kParseIterativeFlag) whose stack lives on the
// heap, so nesting depth never touches the thread's stack; a SAX wrapper adds a hard depth limit
// so a 100,000-deep document is rejected after kMaxJsonDepth levels. It also has a Writer for
// responses. simdjson (libsimdjson-dev 3.0) parses faster but has no serializer in that version
// and needs padded input copies; protobuf's JSON is kept for the kiln.v1 API's proto mapping.
//
// Documents use RapidJSON's pool allocator: a failed parse frees everything with the document.
// Thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "rapidjson/document.h"

namespace kiln::server {

inline constexpr int kMaxJsonDepth = 64;  // nested arrays/objects per document
// Values (numbers, strings, ... , arrays, objects) per document. A DOM value takes 16 bytes, so
// this caps a document at 16 MiB of DOM whatever the body limit; large tensors go binary.
inline constexpr int64_t kMaxJsonValues = int64_t{1} << 20;

// Parses `text` (exactly those bytes; an embedded NUL or trailing text is an error) into `doc`.
// INVALID_ARGUMENT naming `what`, the byte offset and the problem (syntax, depth over the limit).
absl::Status ParseJson(std::string_view text, std::string_view what, rapidjson::Document* doc);

// Like ParseJson, but parses `text` in place (kParseInsituFlag): strings are unescaped inside
// `text` and the document points into it, so no string is copied. `text` is modified and must
// outlive `doc`. The fast path for request bodies.
absl::Status ParseJsonInPlace(std::string* text, std::string_view what, rapidjson::Document* doc);

// Checks only syntax and depth (no DOM), e.g. before handing text to protobuf's JSON parser.
absl::Status CheckJson(std::string_view text, std::string_view what);

}  // namespace kiln::server
