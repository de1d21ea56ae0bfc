// JsonLimits<Next>: a RapidJSON SAX filter that forwards every event to `Next` (a
// rapidjson::Document, a Writer, any handler) and stops the parse when the input nests containers
// deeper than `max_depth` or holds more than `max_values` values (containers count; 0 = no
// bound). Parsing with rapidjson::kParseIterativeFlag through it bounds both the parser's stack
// and the tree a Document builds, whose destructor recurses once per level. After Parse fails,
// too_deep() / too_many() tell whether a limit stopped it (else the JSON itself was bad).
//
// Header-only; the includer provides RapidJSON's include path (Debian's rapidjson-dev). Users:
// safetensors headers (engine/nn/state) and the REST gateway (server/rest, through
// engine/api/json_limits.h).
#pragma once

#include <cstdint>

#include "rapidjson/rapidjson.h"

namespace kiln {

template <typename Next>
class JsonLimits {
 public:
  JsonLimits(Next* next, int max_depth, int64_t max_values = 0)
      : next_(next), max_depth_(max_depth), max_values_(max_values) {}
  bool too_deep() const { return too_deep_; }
  bool too_many() const { return too_many_; }

  bool Null() { return Count() && next_->Null(); }
  bool Bool(bool b) { return Count() && next_->Bool(b); }
  bool Int(int i) { return Count() && next_->Int(i); }
  bool Uint(unsigned u) { return Count() && next_->Uint(u); }
  bool Int64(int64_t i) { return Count() && next_->Int64(i); }
  bool Uint64(uint64_t u) { return Count() && next_->Uint64(u); }
  bool Double(double d) { return Count() && next_->Double(d); }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool copy) {
    return Count() && next_->RawNumber(s, n, copy);
  }
  bool String(const char* s, rapidjson::SizeType n, bool copy) {
    return Count() && next_->String(s, n, copy);
  }
  bool Key(const char* s, rapidjson::SizeType n, bool copy) { return next_->Key(s, n, copy); }
  bool StartObject() { return Enter() && next_->StartObject(); }
  bool EndObject(rapidjson::SizeType n) {
    --depth_;
    return next_->EndObject(n);
  }
  bool StartArray() { return Enter() && next_->StartArray(); }
  bool EndArray(rapidjson::SizeType n) {
    --depth_;
    return next_->EndArray(n);
  }

 private:
  bool Count() {
    if (max_values_ > 0 && ++values_ > max_values_) {
      too_many_ = true;
      return false;
    }
    return true;
  }
  bool Enter() {
    if (++depth_ > max_depth_) {
      too_deep_ = true;
      return false;
    }
    return Count();
  }

  Next* next_;
  const int max_depth_;
  const int64_t max_values_;
  int depth_ = 0;
  int64_t values_ = 0;
  bool too_deep_ = false;
  bool too_many_ = false;
};

}  // namespace kiln
