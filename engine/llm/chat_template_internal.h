// Internals of the chat-template engine (chat_template.h), shared by its parser (chat_template_parse.cc) and its
// renderer (chat_template.cc): Python's str over UTF-8, the Python-like values a template computes with, and the
// syntax tree the parser builds and the renderer walks.
#pragma once

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/llm/chat_template.h"

namespace kiln::llm::jinja {

using Status = absl::Status;
// repr, tojson and == stop at this depth of nesting (a namespace can make a value cyclic).
constexpr int kMaxValueDepth = 64;
// Strings are copied by value: a step per 16 bytes made, copied, compared or searched bounds the
// time and the memory (kMaxSteps * 16 bytes) of a render.
constexpr size_t kBytesPerStep = 16;

// ** UTF-8 and Python's str **

// The code point at s[i] and its byte length; a byte that starts no valid sequence is a unit of its
// own (cp = 0xFFFD), so text that is not UTF-8 still indexes, prints and compares.
struct Cp {
  uint32_t cp;
  size_t len;
};
inline Cp DecodeAt(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return {c, 1};
  size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
  if (n == 0 || c > 0xF4 || i + n > s.size()) return {0xFFFD, 1};
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return {0xFFFD, 1};
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  const bool ok = (n == 3 && cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) ||
                  (n == 4 && cp >= 0x10000 && cp <= 0x10FFFF) || n == 2;
  return ok ? Cp{cp, n} : Cp{0xFFFD, 1};
}

inline void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Python's str.isspace (Py_UNICODE_ISSPACE), which re's \s, strip() and split() match.
inline bool IsPySpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}
// Bytes of the whitespace character at s[i], 0 if there is none.
inline size_t SpaceAt(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const Cp c = DecodeAt(s, i);
  return IsPySpace(c.cp) ? c.len : 0;
}

// Byte offsets of every code point of s, then s.size().
inline std::vector<size_t> CpStarts(std::string_view s) {
  std::vector<size_t> v;
  for (size_t i = 0; i < s.size(); i += DecodeAt(s, i).len) v.push_back(i);
  v.push_back(s.size());
  return v;
}

// str.strip / lstrip / rstrip: `chars` null strips whitespace, else the code points of *chars.
inline std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::vector<size_t> cps = CpStarts(s);
  const auto strip = [&](size_t k) {
    const Cp c = DecodeAt(s, cps[k]);
    if (chars == nullptr) return IsPySpace(c.cp);
    return chars->find(s.substr(cps[k], cps[k + 1] - cps[k])) != std::string::npos;
  };
  size_t a = 0, b = cps.size() - 1;
  while (left && a < b && strip(a)) ++a;
  while (right && b > a && strip(b - 1)) --b;
  return std::string(s.substr(cps[a], cps[b] - cps[a]));
}

// Python's str.upper / str.lower (full case mapping, final sigma) through ICU's root locale.
inline std::string CaseMap(std::string_view s, bool upper) {
  UErrorCode err = U_ZERO_ERROR;
  int32_t n16 = 0;
  const auto n = static_cast<int32_t>(s.size());
  u_strFromUTF8WithSub(nullptr, 0, &n16, s.data(), n, 0xFFFD, nullptr, &err);
  err = U_ZERO_ERROR;
  std::u16string in(n16, u'\0'), mapped(n16 * 3 + 8, u'\0');
  u_strFromUTF8WithSub(in.data(), n16, nullptr, s.data(), n, 0xFFFD, nullptr, &err);
  int32_t m = upper ? u_strToUpper(mapped.data(), static_cast<int32_t>(mapped.size()), in.data(),
                                   n16, "", &err)
                    : u_strToLower(mapped.data(), static_cast<int32_t>(mapped.size()), in.data(),
                                   n16, "", &err);
  if (U_FAILURE(err)) return std::string(s);
  std::string out(static_cast<size_t>(m) * 3, '\0');
  int32_t n8 = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &n8, mapped.data(), m, &err);
  out.resize(U_FAILURE(err) ? 0 : n8);
  return out;
}

// Python's backslashreplace form of a code point: \xhh, \uhhhh or \Uhhhhhhhh.
inline void AppendHexEscape(uint32_t cp, std::string* out) {
  if (cp <= 0xFF) {
    absl::StrAppendFormat(out, "\\x%02x", cp);
  } else if (cp <= 0xFFFF) {
    absl::StrAppendFormat(out, "\\u%04x", cp);
  } else {
    absl::StrAppendFormat(out, "\\U%08x", cp);
  }
}

// repr() of a str: Python's quote choice and escapes (also of what str.isprintable() rejects).
inline void ReprStr(std::string_view s, std::string* out) {
  const char q =
      s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos ? '"' : '\'';
  out->push_back(q);
  for (size_t i = 0; i < s.size();) {
    const Cp c = DecodeAt(s, i);
    const bool raw_byte = c.cp == 0xFFFD && c.len == 1 && static_cast<unsigned char>(s[i]) >= 0x80;
    if (c.cp == static_cast<uint32_t>(q) || c.cp == '\\') {
      absl::StrAppend(out, "\\", std::string(1, static_cast<char>(c.cp)));
    } else if (c.cp == '\t' || c.cp == '\n' || c.cp == '\r') {
      out->append(c.cp == '\t' ? "\\t" : c.cp == '\n' ? "\\n" : "\\r");
    } else if (raw_byte) {
      absl::StrAppendFormat(out, "\\x%02x", static_cast<unsigned char>(s[i]));
    } else if (c.cp < 0x20 || c.cp == 0x7F) {
      AppendHexEscape(c.cp, out);
    } else if (c.cp < 0x7F) {
      out->push_back(static_cast<char>(c.cp));
    } else {
      const int8_t t = u_charType(static_cast<UChar32>(c.cp));
      const bool printable = t != U_CONTROL_CHAR && t != U_FORMAT_CHAR && t != U_SURROGATE &&
                             t != U_PRIVATE_USE_CHAR && t != U_UNASSIGNED &&
                             t != U_LINE_SEPARATOR && t != U_PARAGRAPH_SEPARATOR &&
                             t != U_SPACE_SEPARATOR;
      if (printable) {
        out->append(s.substr(i, c.len));
      } else {
        AppendHexEscape(c.cp, out);
      }
    }
    i += c.len;
  }
  out->push_back(q);
}

// json.dumps(s, ensure_ascii=False).
inline void JsonStr(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

// ** values **

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's dict

enum class Kind { kUndefined, kNone, kBool, kInt, kStr, kList, kDict, kNamespace, kLoop };

struct Value {
  Kind kind = Kind::kUndefined;
  int64_t i = 0;  // bool, int; loop: index0
  std::string s;  // str; undefined: the message an error about it carries
  std::shared_ptr<const List> list;  // list; loop: the items iterated
  // dict (never changed once made) and namespace (changed by `set ns.x = ...`)
  std::shared_ptr<Dict> dict;

  static Value Undef(std::string why) {
    return {Kind::kUndefined, 0, std::move(why), nullptr, nullptr};
  }
  static Value None() { return {Kind::kNone, 0, {}, nullptr, nullptr}; }
  static Value Bool(bool b) { return {Kind::kBool, b ? 1 : 0, {}, nullptr, nullptr}; }
  static Value Int(int64_t v) { return {Kind::kInt, v, {}, nullptr, nullptr}; }
  static Value Str(std::string v) { return {Kind::kStr, 0, std::move(v), nullptr, nullptr}; }
  static Value MakeList(List v) {
    return {Kind::kList, 0, {}, std::make_shared<const List>(std::move(v)), nullptr};
  }
  static Value MakeDict(Dict v, Kind k = Kind::kDict) {
    return {k, 0, {}, nullptr, std::make_shared<Dict>(std::move(v))};
  }
  // Python's bool is an int.
  bool is_int() const { return kind == Kind::kInt || kind == Kind::kBool; }
};

inline const Value* Find(const Dict& d, std::string_view key) {
  for (const auto& [k, v] : d) {
    if (k == key) return &v;
  }
  return nullptr;
}

// type(v).__name__, as Python's TypeError messages spell it.
inline std::string TypeName(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kStr: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kLoop: return "LoopContext";
  }
  return "?";
}

inline bool Truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return v.i != 0;
    case Kind::kStr: return !v.s.empty();
    case Kind::kList: return !v.list->empty();
    case Kind::kDict: return !v.dict->empty();
    case Kind::kNamespace:
    case Kind::kLoop: return true;
  }
  return false;
}

// Python's floor division and modulo.
inline int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
inline int64_t FloorMod(int64_t a, int64_t b) { return a - FloorDiv(a, b) * b; }

// slice.indices(n) and the positions it selects.
inline std::vector<int64_t> SliceIndices(int64_t n, const Value* start, const Value* stop, int64_t step) {
  const auto clamp = [&](const Value* v, bool is_start) -> int64_t {
    if (v == nullptr) return step > 0 ? (is_start ? 0 : n) : (is_start ? n - 1 : -1);
    int64_t x = v->i;
    if (x < 0) x = std::max<int64_t>(x + n, step > 0 ? 0 : -1);
    return std::min<int64_t>(x, step > 0 ? n : n - 1);
  };
  std::vector<int64_t> idx;
  for (int64_t k = clamp(start, true), end = clamp(stop, false); step > 0 ? k < end : k > end;
       k += step) {
    idx.push_back(k);
  }
  return idx;
}

// ** syntax tree **

enum class ExprKind {
  kConst,
  kName,
  kAttr,
  kItem,
  kSlice,
  kCall,
  kFilter,
  kTest,
  kNot,
  kNeg,
  kPos,
  kBinary,
  kAnd,
  kOr,
  kCompare,
  kCond,
  kList,
  kDict,
};

struct Expr {
  ExprKind kind;
  size_t offset = 0;  // in the source as given to Parse
  std::string name;   // name, attribute, filter, test, callee method
  Value value;        // kConst
  // Operands: kAttr {obj}; kItem {obj, key}; kSlice {obj, start, stop, step} (absent parts null);
  // kCall {callee, args...}; kFilter/kTest {operand, args...}; kBinary/kAnd/kOr/kCompare {first,
  // then one per op}; kCond {then, cond, else or null}; kList items; kDict {k0, v0, k1, v1, ...}.
  std::vector<std::unique_ptr<Expr>> kids;
  std::vector<std::string> ops;      // kBinary and kCompare: one per operand after the first
  std::vector<std::string> kwnames;  // kCall/kFilter: the trailing kids passed by keyword
  // kFilter/kTest: arguments that do not fit the parameters; jinja2 raises at render time.
  std::string bind_error;
  int depth = 1;
};
using ExprPtr = std::unique_ptr<Expr>;

enum class StmtKind { kText, kPrint, kIf, kFor, kSet, kSetAttr, kSetBlock, kBreak, kContinue };

struct Stmt {
  Stmt(StmtKind kind, size_t offset, std::string text = "")
      : kind(kind), offset(offset), text(std::move(text)) {}
  StmtKind kind;
  size_t offset;
  std::string text;  // kText: the text; kFor, kSet*: the target name
  std::string attr;  // kSetAttr: set <text>.<attr> = expr
  ExprPtr expr;      // kPrint, kSet*: the value; kFor: the iterable
  ExprPtr filter;    // kFor: `if` after the iterable, or null
  std::vector<ExprPtr> conds;            // kIf: one per if/elif
  // kIf: one per cond, then else; kFor: body, else; kSetBlock: body.
  std::vector<std::vector<Stmt>> bodies;
};

inline Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

// The template's statements (chat_template_parse.cc: jinja2's lexer and parser). InvalidArgument naming the byte
// offset of what does not parse.
absl::StatusOr<std::vector<Stmt>> ParseSource(std::string_view source);

}  // namespace kiln::llm::jinja

namespace kiln::llm {

struct ChatTemplate::Program {
  std::vector<jinja::Stmt> body;
};

}  // namespace kiln::llm
