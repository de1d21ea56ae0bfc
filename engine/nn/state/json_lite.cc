// Strict JSON reader: see json_lite.h. Recursive descent; recursion is bounded by max_depth.
#include "engine/nn/state/json_lite.h"

#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace kiln::nn::json {
namespace {

class Parser {
 public:
  Parser(std::string_view s, int max_depth) : s_(s), max_depth_(max_depth) {}

  absl::StatusOr<Value> Document() {
    Value v;
    if (absl::Status st = ParseValue(&v, 0); !st.ok()) return st;
    SkipWs();
    if (pos_ != s_.size()) return Error("trailing characters after the JSON value");
    return v;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("JSON: ", what, " at byte ", pos_));
  }
  void SkipWs() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool Literal(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }

  absl::Status ParseValue(Value* v, int depth) {
    if (depth > max_depth_) return Error("nesting too deep");
    SkipWs();
    if (pos_ >= s_.size()) return Error("unexpected end of input");
    char c = s_[pos_];
    if (c == '{') return ParseObject(v, depth);
    if (c == '[') return ParseArray(v, depth);
    if (c == '"') {
      v->kind = Value::Kind::kString;
      return ParseString(&v->text);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(v);
    if (Literal("true")) {
      v->kind = Value::Kind::kBool;
      v->boolean = true;
      return absl::OkStatus();
    }
    if (Literal("false")) {
      v->kind = Value::Kind::kBool;
      return absl::OkStatus();
    }
    if (Literal("null")) return absl::OkStatus();
    return Error("unexpected character");
  }

  absl::Status ParseObject(Value* v, int depth) {
    v->kind = Value::Kind::kObject;
    absl::flat_hash_set<std::string> keys;  // duplicate check in O(1): a header may hold 10^7 keys
    ++pos_;  // {
    SkipWs();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      SkipWs();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a string key");
      std::string key;
      if (absl::Status st = ParseString(&key); !st.ok()) return st;
      if (!keys.insert(key).second) {
        return Error(absl::StrCat("duplicate key \"", key.substr(0, 64), "\""));
      }
      SkipWs();
      if (pos_ >= s_.size() || s_[pos_] != ':') return Error("expected ':'");
      ++pos_;
      Value member;
      if (absl::Status st = ParseValue(&member, depth + 1); !st.ok()) return st;
      v->object.push_back({std::move(key), std::move(member)});
      SkipWs();
      if (pos_ >= s_.size()) return Error("unterminated object");
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == '}') {
        ++pos_;
        return absl::OkStatus();
      }
      return Error("expected ',' or '}'");
    }
  }

  absl::Status ParseArray(Value* v, int depth) {
    v->kind = Value::Kind::kArray;
    ++pos_;  // [
    SkipWs();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      Value item;
      if (absl::Status st = ParseValue(&item, depth + 1); !st.ok()) return st;
      v->array.push_back(std::move(item));
      SkipWs();
      if (pos_ >= s_.size()) return Error("unterminated array");
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == ']') {
        ++pos_;
        return absl::OkStatus();
      }
      return Error("expected ',' or ']'");
    }
  }

  static int Hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  absl::Status Hex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return Error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      int h = Hex(s_[pos_ + i]);
      if (h < 0) return Error("bad \\u escape");
      v = v * 16 + static_cast<uint32_t>(h);
    }
    pos_ += 4;
    *out = v;
    return absl::OkStatus();
  }
  static void AppendUtf8(std::string* o, uint32_t cp) {
    if (cp < 0x80) {
      o->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      o->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      o->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      o->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      o->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      o->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      o->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      o->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      o->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      o->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  absl::Status ParseString(std::string* out) {
    ++pos_;  // "
    while (true) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (c < 0x20) return Error("control character in string");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      if (++pos_ >= s_.size()) return Error("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          if (absl::Status st = Hex4(&cp); !st.ok()) return st;
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // surrogate pair
            uint32_t lo = 0;
            if (!Literal("\\u")) return Error("unpaired surrogate");
            if (absl::Status st = Hex4(&lo); !st.ok()) return st;
            if (lo < 0xDC00 || lo > 0xDFFF) return Error("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Error("unpaired surrogate");
          }
          AppendUtf8(out, cp);
          break;
        }
        default:
          return Error("bad escape");
      }
    }
  }

  absl::Status ParseNumber(Value* v) {
    v->kind = Value::Kind::kNumber;
    size_t start = pos_;
    bool neg = false;
    if (s_[pos_] == '-') {
      neg = true;
      ++pos_;
    }
    if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) return Error("bad number");
    if (s_[pos_] == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9')
      return Error("leading zero in number");
    bool fits = true;
    uint64_t mag = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      uint64_t d = static_cast<uint64_t>(s_[pos_] - '0');
      if (mag > (UINT64_MAX - d) / 10) fits = false;
      if (fits) mag = mag * 10 + d;
      ++pos_;
    }
    bool integral = true;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) return Error("bad fraction");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) return Error("bad exponent");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    v->text = std::string(s_.substr(start, pos_ - start));
    const uint64_t limit = neg ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
    if (integral && fits && mag <= limit) {
      v->is_int = true;
      v->integer = neg ? static_cast<int64_t>(0 - mag) : static_cast<int64_t>(mag);
    }
    return absl::OkStatus();
  }

  std::string_view s_;
  int max_depth_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<Value> Parse(std::string_view text, int max_depth) {
  return Parser(text, max_depth).Document();
}

}  // namespace kiln::nn::json
