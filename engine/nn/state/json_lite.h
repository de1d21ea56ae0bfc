// A small, strict JSON reader for file headers (safetensors). Internal to engine/nn/state.
//
// Parse() accepts RFC 8259 JSON with limits: nesting depth <= max_depth, input size as given. Numbers are kept as
// their text plus an integer value when the text is an integer that fits in int64 (safetensors needs integers only).
// Errors are InvalidArgument with the byte offset. Objects keep their keys in input order; duplicate keys are an
// error. Not a general-purpose JSON library: no serializer, no floating-point conversion.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::nn::json {

struct Member;

struct Value {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  bool is_int = false;  // kNumber: the text is an integer that fits in int64
  int64_t integer = 0;
  std::string text;  // kString: the decoded string; kNumber: the literal
  std::vector<Value> array;
  std::vector<Member> object;  // in input order

  // The member `key` of an object, or nullptr.
  const Value* Find(std::string_view key) const;
};

// An object member. (A named struct, not std::pair<std::string, Value>: clang with libstdc++ cannot
// instantiate that pair while Value is incomplete.)
struct Member {
  std::string key;
  Value value;
};

inline const Value* Value::Find(std::string_view key) const {
  for (const auto& [k, v] : object)
    if (k == key) return &v;
  return nullptr;
}

absl::StatusOr<Value> Parse(std::string_view text, int max_depth = 64);

}  // namespace kiln::nn::json
