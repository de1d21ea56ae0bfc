// The Jinja2 chat-template subset (chat_template.h): a lexer that reproduces jinja2's whitespace
// handling, a recursive-descent parser with jinja2's grammar and precedence, and a tree-walking
// renderer over Python-like values. Each part follows the jinja2 3.1 source it mirrors (lexer.py,
// parser.py, runtime.py, sandbox.py).
#include "engine/llm/chat_template.h"

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status.h"

namespace kiln::llm {
namespace {

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
Cp DecodeAt(std::string_view s, size_t i) {
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

void AppendUtf8(uint32_t cp, std::string* out) {
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
bool IsPySpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}
// Bytes of the whitespace character at s[i], 0 if there is none.
size_t SpaceAt(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const Cp c = DecodeAt(s, i);
  return IsPySpace(c.cp) ? c.len : 0;
}

// Byte offsets of every code point of s, then s.size().
std::vector<size_t> CpStarts(std::string_view s) {
  std::vector<size_t> v;
  for (size_t i = 0; i < s.size(); i += DecodeAt(s, i).len) v.push_back(i);
  v.push_back(s.size());
  return v;
}

// str.strip / lstrip / rstrip: `chars` null strips whitespace, else the code points of *chars.
std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
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
std::string CaseMap(std::string_view s, bool upper) {
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
void AppendHexEscape(uint32_t cp, std::string* out) {
  if (cp <= 0xFF) {
    absl::StrAppendFormat(out, "\\x%02x", cp);
  } else if (cp <= 0xFFFF) {
    absl::StrAppendFormat(out, "\\u%04x", cp);
  } else {
    absl::StrAppendFormat(out, "\\U%08x", cp);
  }
}

// repr() of a str: Python's quote choice and escapes (also of what str.isprintable() rejects).
void ReprStr(std::string_view s, std::string* out) {
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
void JsonStr(std::string_view s, std::string* out) {
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

const Value* Find(const Dict& d, std::string_view key) {
  for (const auto& [k, v] : d) {
    if (k == key) return &v;
  }
  return nullptr;
}

// type(v).__name__, as Python's TypeError messages spell it.
std::string TypeName(const Value& v) {
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

bool Truthy(const Value& v) {
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
int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
int64_t FloorMod(int64_t a, int64_t b) { return a - FloorDiv(a, b) * b; }

// slice.indices(n) and the positions it selects.
std::vector<int64_t> SliceIndices(int64_t n, const Value* start, const Value* stop, int64_t step) {
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

}  // namespace

struct ChatTemplate::Program {
  std::vector<Stmt> body;
};

namespace {

Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

// ** lexer: jinja2's lexer.py with trim_blocks and lstrip_blocks **

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kStr, kInt, kOp, kEnd };

struct Token {
  Tok kind;
  size_t offset;     // in the normalized source
  std::string text;  // text, name, decoded string literal, operator
  int64_t ival = 0;
};

std::string Describe(const Token& t) {
  switch (t.kind) {
    case Tok::kText: return "text";
    case Tok::kVarBegin: return "'{{'";
    case Tok::kVarEnd: return "'}}'";
    case Tok::kBlockBegin: return "'{%'";
    case Tok::kBlockEnd: return "'%}'";
    case Tok::kStr: return "string literal";
    case Tok::kInt: return "integer";
    case Tok::kEnd: return "end of template";
    default: return absl::StrCat("'", t.text, "'");
  }
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
int HexValue(char c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  // As jinja2, first reads \r\n and \r as \n and drops one trailing newline.
  explicit Lexer(std::string_view source) {
    for (size_t j = 0; j < source.size(); ++j) {
      if (source[j] != '\r') {
        src_.push_back(source[j]);
        continue;
      }
      if (j + 1 < source.size() && source[j + 1] == '\n') {
        joined_.push_back(src_.size());
        ++j;
      }
      src_.push_back('\n');
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  // A normalized offset as a byte offset into the source given to Parse.
  size_t Original(size_t offset) const {
    return offset + (std::lower_bound(joined_.begin(), joined_.end(), offset) - joined_.begin());
  }
  Status Error(size_t offset, std::string_view what) const {
    return Invalid(
        absl::StrCat("chat template: ", std::string(what), " at byte ", Original(offset)));
  }

  absl::StatusOr<std::vector<Token>> Run() {
    const std::string_view s = src_;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t open = s.find('{', pos);
      while (open != std::string_view::npos &&
             (open + 1 >= s.size() ||
              (s[open + 1] != '{' && s[open + 1] != '%' && s[open + 1] != '#'))) {
        open = s.find('{', open + 1);
      }
      if (open == std::string_view::npos) {
        Push(Tok::kText, pos, std::string(s.substr(pos)));
        break;
      }
      const char kind = s[open + 1];
      size_t p = open + 2;
      const char sign = p < s.size() && (s[p] == '-' || s[p] == '+') ? s[p++] : 0;
      std::string_view text = s.substr(pos, open - pos);
      if (sign == '-') {
        text = s.substr(pos, RStripSpace(pos, open) - pos);
      } else if (sign != '+' && kind != '{') {
        text = LStripBlock(pos, open);
      }
      if (!text.empty()) Push(Tok::kText, pos, std::string(text));
      if (kind == '#') {
        KILN_ASSIGN_OR_RETURN(pos, SkipComment(open, p));
        continue;
      }
      Push(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, open, "");
      KILN_ASSIGN_OR_RETURN(pos, LexTag(kind, open, p));
    }
    Push(Tok::kEnd, s.size(), "");
    return std::move(toks_);
  }

 private:
  void Push(Tok kind, size_t offset, std::string text, int64_t ival = 0) {
    toks_.push_back({kind, offset, std::move(text), ival});
  }

  // End of s[begin, end) without its trailing whitespace (str.rstrip).
  size_t RStripSpace(size_t begin, size_t end) const {
    const std::vector<size_t> cps = CpStarts(std::string_view(src_).substr(begin, end - begin));
    size_t k = cps.size() - 1;
    while (k > 0 && SpaceAt(src_, begin + cps[k - 1]) == cps[k] - cps[k - 1]) --k;
    return begin + cps[k];
  }

  // lstrip_blocks: whitespace between the start of a line and a {% or {# tag is dropped. The text
  // starts at `begin`; it starts a line when the tag or text before it ended with a newline
  // (jinja2's line_starting).
  std::string_view LStripBlock(size_t begin, size_t tag) const {
    const std::string_view text = std::string_view(src_).substr(begin, tag - begin);
    const size_t nl = text.rfind('\n');
    const size_t line = nl == std::string_view::npos ? 0 : nl + 1;
    if (line == 0 && begin != 0 && src_[begin - 1] != '\n') return text;
    size_t p = begin + line;
    while (p < tag) {
      const size_t w = SpaceAt(src_, p);
      if (w == 0) return text;
      p += w;
    }
    return text.substr(0, line);
  }

  // {# ... #}: up to the first #}; -#} drops the whitespace after it, #} one newline (trim_blocks).
  absl::StatusOr<size_t> SkipComment(size_t open, size_t p) const {
    const size_t close = src_.find("#}", p);
    if (close == std::string::npos) return Error(open, "unclosed comment '{#'");
    size_t end = close + 2;
    const char sign = close > p ? src_[close - 1] : 0;
    if (sign == '-') {
      while (size_t w = SpaceAt(src_, end)) end += w;
    } else if (sign != '+' && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    return end;
  }

  // The tokens of a {{ }} or {% %} tag from p, then its end; returns the offset after the end.
  // Inside brackets an end marker is read as operators, as in jinja2.
  absl::StatusOr<size_t> LexTag(char kind, size_t open, size_t p) {
    const std::string_view s = src_;
    std::vector<std::pair<char, size_t>> brackets;
    while (true) {
      if (p >= s.size()) return Error(open, kind == '{' ? "unclosed '{{'" : "unclosed '{%'");
      if (brackets.empty()) {
        const std::string_view end2 = kind == '{' ? "}}" : "%}";
        if ((s.substr(p, 1) == "-" || (kind == '%' && s.substr(p, 1) == "+")) &&
            s.substr(p + 1, 2) == end2) {
          Push(kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd, p, "");
          const bool minus = s[p] == '-';
          p += 3;
          while (minus && SpaceAt(s, p) > 0) p += SpaceAt(s, p);
          return p;
        }
        if (s.substr(p, 2) == end2) {
          Push(kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd, p, "");
          p += 2;
          if (kind == '%' && p < s.size() && s[p] == '\n') ++p;  // trim_blocks
          return p;
        }
      }
      if (const size_t w = SpaceAt(s, p)) {
        p += w;
        continue;
      }
      const char c = s[p];
      if (IsDigit(c)) {
        KILN_ASSIGN_OR_RETURN(p, LexInt(p));
      } else if (NameCharAt(p, /*start=*/true) > 0) {
        size_t q = p;
        while (size_t n = NameCharAt(q, /*start=*/false)) q += n;
        Push(Tok::kName, p, std::string(s.substr(p, q - p)));
        p = q;
      } else if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < s.size() && s[q] != c) q += s[q] == '\\' ? 2 : 1;
        if (q >= s.size()) return Error(p, "unterminated string literal");
        KILN_ASSIGN_OR_RETURN(std::string value, Unescape(s.substr(p + 1, q - p - 1), p));
        Push(Tok::kStr, p, std::move(value));
        p = q + 1;
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (std::string_view two : kTwo) {
          if (s.substr(p, 2) == two) op = two;
        }
        if (op.empty() &&
            std::string_view("+-/*%~[](){}><=.:|,;").find(c) != std::string_view::npos) {
          op = std::string(1, c);
        }
        if (op.empty()) {
          return Error(p, absl::StrCat("unexpected character '",
                                       std::string(s.substr(p, DecodeAt(s, p).len)), "'"));
        }
        if (op == "(" || op == "[" || op == "{") {
          brackets.emplace_back(op == "(" ? ')' : op == "[" ? ']' : '}', p);
        } else if (op == ")" || op == "]" || op == "}") {
          if (brackets.empty()) return Error(p, absl::StrCat("unbalanced '", op, "'"));
          if (brackets.back().first != op[0]) {
            return Error(p, absl::StrCat("unbalanced '", op, "', expected '",
                                         std::string(1, brackets.back().first), "'"));
          }
          brackets.pop_back();
        }
        Push(Tok::kOp, p, op);
        p += op.size();
      }
    }
  }

  // Bytes of the identifier character at src_[p] (0 if none): jinja2's names are Python's
  // identifiers, XID_Start then XID_Continue characters.
  size_t NameCharAt(size_t p, bool start) const {
    if (p >= src_.size()) return 0;
    const char c = src_[p];
    if (static_cast<unsigned char>(c) < 0x80)
      return (start ? IsNameStart(c) : IsNameChar(c)) ? 1 : 0;
    const Cp cp = DecodeAt(src_, p);
    const bool ok =
        cp.cp != 0xFFFD && u_hasBinaryProperty(static_cast<UChar32>(cp.cp),
                                               start ? UCHAR_XID_START : UCHAR_XID_CONTINUE);
    return ok ? cp.len : 0;
  }

  // jinja2's integer_re (decimal, `_` separators); a float literal is outside the subset.
  absl::StatusOr<size_t> LexInt(size_t p) {
    const std::string_view s = src_;
    size_t q = p + 1;
    while (q < s.size() &&
           (IsDigit(s[q]) || (s[q] == '_' && q + 1 < s.size() && IsDigit(s[q + 1]))))
      ++q;
    const bool after_dot = p > 0 && s[p - 1] == '.';
    const auto digit_at = [&](size_t k) { return k < s.size() && IsDigit(s[k]); };
    if (!after_dot && q < s.size() &&
        ((s[q] == '.' && digit_at(q + 1)) ||
         ((s[q] == 'e' || s[q] == 'E') &&
          (digit_at(q + 1) ||
           ((s.substr(q + 1, 1) == "+" || s.substr(q + 1, 1) == "-") && digit_at(q + 2)))))) {
      return Error(p, "float literals are not supported");
    }
    if (s[p] == '0' && q < s.size() && IsNameStart(s[q])) {
      return Error(p, "non-decimal integer literals are not supported");
    }
    int64_t v = 0;
    for (size_t k = p; k < q; ++k) {
      if (s[k] == '_') continue;
      if (s[p] == '0' && s[k] != '0') return Error(p, "integer literal with a leading zero");
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[k] - '0', &v)) {
        return Error(p, "integer literal over 64 bits");
      }
    }
    Push(Tok::kInt, p, std::string(s.substr(p, q - p)), v);
    return q;
  }

  // A string literal's body as Python's "unicode-escape" codec reads it (what jinja2 does): \n \t
  // \\ \' \" \a \b \f \r \v, octal \ooo, \xhh, \uhhhh, \Uhhhhhhhh, backslash-newline; other escapes
  // stay as written.
  absl::StatusOr<std::string> Unescape(std::string_view raw, size_t at) const {
    std::string out;
    for (size_t i = 0; i < raw.size();) {
      if (raw[i] != '\\') {
        out.push_back(raw[i++]);
        continue;
      }
      const char d = raw[i + 1];
      i += 2;
      int hex_digits = 0;
      switch (d) {
        case '\n': break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': hex_digits = 2; break;
        case 'u': hex_digits = 4; break;
        case 'U': hex_digits = 8; break;
        case 'N': return Error(at, "\\N{...} escapes are not supported");
        default:
          if (d >= '0' && d <= '7') {
            uint32_t cp = d - '0';
            for (int k = 0; k < 2 && i < raw.size() && raw[i] >= '0' && raw[i] <= '7'; ++k)
              cp = cp * 8 + (raw[i++] - '0');
            AppendUtf8(cp, &out);
          } else if (static_cast<unsigned char>(d) >= 0x80) {
            // Non-ASCII is first written as backslashreplace: "\é" reads as "\" + "xe9".
            const Cp c = DecodeAt(raw, i - 1);
            AppendHexEscape(c.cp, &out);
            i += c.len - 1;
          } else {
            out.push_back('\\');
            out.push_back(d);
          }
      }
      if (hex_digits == 0) continue;
      uint32_t cp = 0;
      for (int k = 0; k < hex_digits; ++k, ++i) {
        if (i >= raw.size() || HexValue(raw[i]) < 0)
          return Error(at, "truncated \\x, \\u or \\U escape");
        cp = cp * 16 + HexValue(raw[i]);
      }
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return Error(at, "an escape that is no Unicode scalar value");
      }
      AppendUtf8(cp, &out);
    }
    return out;
  }

  std::string src_;
  std::vector<size_t> joined_;  // normalized offsets whose \n was a \r\n
  std::vector<Token> toks_;
};

// ** parser: jinja2's parser.py, the subset of chat_template.h **

// Filters and tests: their parameter names (a call binds arguments by position or by these names).
struct Signature {
  std::string_view name;
  std::vector<std::string_view> params;
  size_t required;
};
const Signature* FindSignature(const std::vector<Signature>& table, std::string_view name) {
  for (const Signature& s : table) {
    if (s.name == name) return &s;
  }
  return nullptr;
}
const std::vector<Signature>& Filters() {
  static const auto* table = new std::vector<Signature>{
      {"abs", {}, 0},        {"count", {}, 0},      {"d", {"default_value", "boolean"}, 0},
      {"default", {"default_value", "boolean"}, 0}, {"first", {}, 0}, {"join", {"d"}, 0},
      {"last", {}, 0},       {"length", {}, 0},     {"list", {}, 0},     {"lower", {}, 0},
      {"replace", {"old", "new", "count"}, 2},      {"safe", {}, 0},     {"string", {}, 0},
      {"tojson", {}, 0},     {"trim", {"chars"}, 0}, {"upper", {}, 0},
  };
  return *table;
}
const std::vector<Signature>& Tests() {
  static const auto* table = new std::vector<Signature>{
      {"boolean", {}, 0},  {"defined", {}, 0}, {"divisibleby", {"num"}, 1}, {"even", {}, 0},
      {"false", {}, 0},    {"integer", {}, 0}, {"iterable", {}, 0},        {"mapping", {}, 0},
      {"none", {}, 0},     {"number", {}, 0},  {"odd", {}, 0},             {"sequence", {}, 0},
      {"string", {}, 0},   {"true", {}, 0},    {"undefined", {}, 0},
  };
  return *table;
}

class Parser {
 public:
  Parser(const Lexer& lexer, std::vector<Token> tokens) : lx_(lexer), t_(std::move(tokens)) {}

  absl::StatusOr<std::vector<Stmt>> Run() {
    std::vector<Stmt> body;
    std::string end;
    KILN_RETURN_IF_ERROR(ParseBody({}, "", 0, &body, &end));
    return body;
  }

 private:
  // Counts nesting (blocks, brackets, calls, unary operators, else-chains) while alive.
  struct Nest {
    explicit Nest(Parser* p) : p(p) {
      if (++p->nesting_ > ChatTemplate::kMaxNesting) {
        status = p->Fail(
            absl::StrCat("nesting deeper than ", ChatTemplate::kMaxNesting, " (kMaxNesting)"));
      }
    }
    ~Nest() { --p->nesting_; }
    Parser* p;
    Status status;
  };

  const Token& Cur() const { return t_[i_]; }
  const Token& Next() const { return t_[std::min(i_ + 1, t_.size() - 1)]; }
  bool IsOp(std::string_view op) const { return Cur().kind == Tok::kOp && Cur().text == op; }
  bool IsName(std::string_view n) const { return Cur().kind == Tok::kName && Cur().text == n; }
  size_t At() const { return lx_.Original(Cur().offset); }
  Status Fail(std::string_view what) const { return lx_.Error(Cur().offset, what); }
  Status Unexpected(std::string_view wanted) const {
    return Fail(absl::StrCat("unexpected ", Describe(Cur()), ", expected ", std::string(wanted)));
  }
  Status Expect(std::string_view op) {
    if (!IsOp(op)) return Unexpected(absl::StrCat("'", std::string(op), "'"));
    ++i_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().kind != Tok::kName) return Unexpected("a name");
    return t_[i_++].text;
  }
  Status ExpectBlockEnd() {
    if (Cur().kind != Tok::kBlockEnd) return Unexpected("'%}'");
    ++i_;
    return absl::OkStatus();
  }

  ExprPtr New(ExprKind kind, size_t offset) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    return e;
  }
  // Sets e's depth from its operands; a tree deeper than kMaxExpressionDepth is an error, since
  // evaluation recurses.
  absl::StatusOr<ExprPtr> Seal(ExprPtr e) {
    for (const ExprPtr& k : e->kids) {
      if (k != nullptr) e->depth = std::max(e->depth, k->depth + 1);
    }
    if (e->depth > ChatTemplate::kMaxExpressionDepth) {
      return Fail(absl::StrCat("expression deeper than ", ChatTemplate::kMaxExpressionDepth,
                               " (kMaxExpressionDepth)"));
    }
    return e;
  }

  // ** statements **

  // Statements up to a {% tag %} named in `ends` (its name is consumed and put in *end) or the
  // template's end, which is an error when `closer` is set: "endif" closes the if at `opener_at`.
  Status ParseBody(std::initializer_list<std::string_view> ends, std::string_view closer,
                   size_t opener_at, std::vector<Stmt>* out, std::string* end) {
    while (true) {
      const Token& t = Cur();
      if (t.kind == Tok::kEnd) {
        if (closer.empty()) return absl::OkStatus();
        return Invalid(absl::StrCat("chat template: '{% ", std::string(closer.substr(3)),
                                    " %}' at byte ", opener_at, " has no '{% ",
                                    std::string(closer), " %}'"));
      }
      if (t.kind == Tok::kText) {
        out->emplace_back(StmtKind::kText, At(), t.text);
        ++i_;
        continue;
      }
      if (t.kind == Tok::kVarBegin) {
        Stmt s{StmtKind::kPrint, At()};
        ++i_;
        KILN_ASSIGN_OR_RETURN(s.expr, ParseExpression());
        if (Cur().kind != Tok::kVarEnd) return Unexpected("'}}'");
        ++i_;
        out->push_back(std::move(s));
        continue;
      }
      if (t.kind != Tok::kBlockBegin) return Unexpected("text or a tag");
      const size_t at = At();
      ++i_;
      if (Cur().kind != Tok::kName) return Unexpected("a tag name");
      const std::string name = Cur().text;
      ++i_;
      if (std::find(ends.begin(), ends.end(), name) != ends.end()) {
        *end = name;
        return absl::OkStatus();
      }
      if (name == "if") {
        KILN_RETURN_IF_ERROR(ParseIf(at, out));
      } else if (name == "for") {
        KILN_RETURN_IF_ERROR(ParseFor(at, out));
      } else if (name == "set") {
        KILN_RETURN_IF_ERROR(ParseSet(at, out));
      } else if (name == "break" || name == "continue") {
        if (loops_ == 0) return lx_.Error(t.offset, absl::StrCat("'", name, "' outside a loop"));
        KILN_RETURN_IF_ERROR(ExpectBlockEnd());
        out->emplace_back(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, at);
      } else {
        static constexpr std::string_view kEnds[] = {"elif", "else", "endif", "endfor", "endset"};
        static constexpr std::string_view kJinja[] = {
            "autoescape", "block",  "call",    "do",    "extends", "filter", "from",
            "generation", "import", "include", "macro", "print",   "raw",    "with"};
        std::string what = absl::StrCat("unknown tag '", name, "'");
        if (std::find(std::begin(kEnds), std::end(kEnds), name) != std::end(kEnds)) {
          what = absl::StrCat("unexpected '{% ", name, " %}'");
        } else if (std::find(std::begin(kJinja), std::end(kJinja), name) != std::end(kJinja)) {
          what = absl::StrCat("unsupported tag '", name, "'");
        }
        return lx_.Error(t.offset, what);
      }
    }
  }

  Status ParseIf(size_t at, std::vector<Stmt>* out) {
    Nest nest(this);
    KILN_RETURN_IF_ERROR(nest.status);
    Stmt s{StmtKind::kIf, at};
    std::string end = "elif";
    while (end == "elif") {
      // As jinja2's parse_if: `{% if a if b else c %}` is a syntax error.
      KILN_ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression(/*with_condexpr=*/false));
      KILN_RETURN_IF_ERROR(ExpectBlockEnd());
      s.conds.push_back(std::move(cond));
      s.bodies.emplace_back();
      KILN_RETURN_IF_ERROR(
          ParseBody({"elif", "else", "endif"}, "endif", at, &s.bodies.back(), &end));
    }
    if (end == "else") {
      KILN_RETURN_IF_ERROR(ExpectBlockEnd());
      s.bodies.emplace_back();
      KILN_RETURN_IF_ERROR(ParseBody({"endif"}, "endif", at, &s.bodies.back(), &end));
    }
    KILN_RETURN_IF_ERROR(ExpectBlockEnd());
    out->push_back(std::move(s));
    return absl::OkStatus();
  }

  Status ParseFor(size_t at, std::vector<Stmt>* out) {
    Nest nest(this);
    KILN_RETURN_IF_ERROR(nest.status);
    Stmt s{StmtKind::kFor, at};
    KILN_ASSIGN_OR_RETURN(s.text, ExpectName());
    if (IsOp(",")) return Fail("unsupported: more than one loop variable");
    if (s.text == "loop") return Fail("can't assign to the special loop variable");
    if (!IsName("in")) return Unexpected("'in'");
    ++i_;
    KILN_ASSIGN_OR_RETURN(s.expr, ParseExpression(/*with_condexpr=*/false));
    if (IsName("if")) {
      ++i_;
      KILN_ASSIGN_OR_RETURN(s.filter, ParseExpression());
    }
    if (IsName("recursive")) return Fail("unsupported: recursive loops");
    KILN_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    s.bodies.resize(1);
    ++loops_;
    Status st = ParseBody({"else", "endfor"}, "endfor", at, &s.bodies[0], &end);
    --loops_;
    KILN_RETURN_IF_ERROR(st);
    if (end == "else") {
      KILN_RETURN_IF_ERROR(ExpectBlockEnd());
      s.bodies.emplace_back();
      KILN_RETURN_IF_ERROR(ParseBody({"endfor"}, "endfor", at, &s.bodies.back(), &end));
    }
    KILN_RETURN_IF_ERROR(ExpectBlockEnd());
    out->push_back(std::move(s));
    return absl::OkStatus();
  }

  Status ParseSet(size_t at, std::vector<Stmt>* out) {
    Stmt s{StmtKind::kSet, at};
    KILN_ASSIGN_OR_RETURN(s.text, ExpectName());
    if (IsOp(".")) {
      ++i_;
      s.kind = StmtKind::kSetAttr;
      KILN_ASSIGN_OR_RETURN(s.attr, ExpectName());
      if (!IsOp("=")) return Unexpected("'='");
    }
    if (IsOp("=")) {
      ++i_;
      KILN_ASSIGN_OR_RETURN(s.expr, ParseExpression());
      if (IsOp(",")) return Fail("unsupported: tuples");
      KILN_RETURN_IF_ERROR(ExpectBlockEnd());
    } else if (Cur().kind == Tok::kBlockEnd) {
      ++i_;
      Nest nest(this);
      KILN_RETURN_IF_ERROR(nest.status);
      s.kind = StmtKind::kSetBlock;
      s.bodies.resize(1);
      std::string end;
      const int loops = std::exchange(loops_, 0);  // break in a set block would leave it
      Status st = ParseBody({"endset"}, "endset", at, &s.bodies[0], &end);
      loops_ = loops;
      KILN_RETURN_IF_ERROR(st);
      KILN_RETURN_IF_ERROR(ExpectBlockEnd());
    } else {
      return IsOp(",") ? Fail("unsupported: assignment to more than one name") : Unexpected("'='");
    }
    out->push_back(std::move(s));
    return absl::OkStatus();
  }

  // ** expressions, by precedence from loosest: jinja2's parse_condexpr ... parse_primary **

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true) {
    Nest nest(this);
    KILN_RETURN_IF_ERROR(nest.status);
    return with_condexpr ? ParseCondExpr() : ParseOr();
  }

  absl::StatusOr<ExprPtr> ParseCondExpr() {
    KILN_ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    while (IsName("if")) {
      ExprPtr c = New(ExprKind::kCond, At());
      ++i_;
      KILN_ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr other;
      if (IsName("else")) {
        ++i_;
        Nest nest(this);
        KILN_RETURN_IF_ERROR(nest.status);
        KILN_ASSIGN_OR_RETURN(other, ParseCondExpr());
      }
      c->kids.push_back(std::move(e));
      c->kids.push_back(std::move(cond));
      c->kids.push_back(std::move(other));
      KILN_ASSIGN_OR_RETURN(e, Seal(std::move(c)));
    }
    return e;
  }

  // One n-ary node for a chain `a op b op c` (evaluated left to right without recursion).
  template <typename Operand, typename IsOperator>
  absl::StatusOr<ExprPtr> Chain(ExprKind kind, Operand operand, IsOperator is_operator) {
    const size_t at = At();
    KILN_ASSIGN_OR_RETURN(ExprPtr first, (this->*operand)());
    std::string op = is_operator();
    if (op.empty()) return first;
    ExprPtr e = New(kind, at);
    e->kids.push_back(std::move(first));
    while (!op.empty()) {
      e->ops.push_back(op);
      KILN_ASSIGN_OR_RETURN(ExprPtr next, (this->*operand)());
      e->kids.push_back(std::move(next));
      op = is_operator();
    }
    return Seal(std::move(e));
  }
  std::string TakeName(std::string_view name) {
    if (!IsName(name)) return "";
    ++i_;
    return std::string(name);
  }
  std::string TakeOp(std::initializer_list<std::string_view> ops) {
    for (std::string_view op : ops) {
      if (IsOp(op)) {
        ++i_;
        return std::string(op);
      }
    }
    return "";
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    return Chain(ExprKind::kOr, &Parser::ParseAnd, [&] { return TakeName("or"); });
  }
  absl::StatusOr<ExprPtr> ParseAnd() {
    return Chain(ExprKind::kAnd, &Parser::ParseNot, [&] { return TakeName("and"); });
  }
  absl::StatusOr<ExprPtr> ParseNot() {
    if (!IsName("not")) return ParseCompare();
    ExprPtr e = New(ExprKind::kNot, At());
    ++i_;
    Nest nest(this);
    KILN_RETURN_IF_ERROR(nest.status);
    KILN_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    e->kids.push_back(std::move(operand));
    return Seal(std::move(e));
  }
  absl::StatusOr<ExprPtr> ParseCompare() {
    return Chain(ExprKind::kCompare, &Parser::ParseMath1, [&]() -> std::string {
      if (std::string op = TakeOp({"==", "!=", "<=", ">=", "<", ">"}); !op.empty()) return op;
      if (!TakeName("in").empty()) return "in";
      if (IsName("not") && Next().kind == Tok::kName && Next().text == "in") {
        i_ += 2;
        return "not in";
      }
      return "";
    });
  }
  absl::StatusOr<ExprPtr> ParseMath1() {
    return Chain(ExprKind::kBinary, &Parser::ParseConcat, [&] { return TakeOp({"+", "-"}); });
  }
  absl::StatusOr<ExprPtr> ParseConcat() {
    return Chain(ExprKind::kBinary, &Parser::ParseMath2, [&] { return TakeOp({"~"}); });
  }
  absl::StatusOr<ExprPtr> ParseMath2() {
    return Chain(ExprKind::kBinary, &Parser::ParsePow, [&] { return TakeOp({"*", "//", "%"}); });
  }
  absl::StatusOr<ExprPtr> ParsePow() {
    KILN_ASSIGN_OR_RETURN(ExprPtr e, ParseUnary());
    if (IsOp("/") || IsOp("**"))
      return Fail(absl::StrCat("unsupported operator '", Cur().text, "'"));
    return e;
  }
  absl::StatusOr<ExprPtr> ParseUnary() { return ParseUnaryWith(true); }

  absl::StatusOr<ExprPtr> ParseUnaryWith(bool with_filter) {
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      e = New(IsOp("-") ? ExprKind::kNeg : ExprKind::kPos, At());
      ++i_;
      Nest nest(this);
      KILN_RETURN_IF_ERROR(nest.status);
      KILN_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnaryWith(false));
      e->kids.push_back(std::move(operand));
      KILN_ASSIGN_OR_RETURN(e, Seal(std::move(e)));
    } else {
      KILN_ASSIGN_OR_RETURN(e, ParsePrimary());
    }
    KILN_ASSIGN_OR_RETURN(e, ParsePostfix(std::move(e)));
    if (with_filter) {
      KILN_ASSIGN_OR_RETURN(e, ParseFilterExpr(std::move(e)));
    }
    return e;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    ExprPtr e = New(ExprKind::kConst, At());
    if (t.kind == Tok::kName) {
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        e->value = Value::Bool(t.text[0] == 't' || t.text[0] == 'T');
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::None();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.text;
      }
      ++i_;
    } else if (t.kind == Tok::kStr) {
      std::string s;
      while (Cur().kind == Tok::kStr) s += t_[i_++].text;  // 'a' 'b' is 'ab'
      e->value = Value::Str(std::move(s));
    } else if (t.kind == Tok::kInt) {
      e->value = Value::Int(t.ival);
      ++i_;
    } else if (IsOp("(")) {
      ++i_;
      if (IsOp(")")) return Fail("unsupported: tuples");
      KILN_ASSIGN_OR_RETURN(e, ParseExpression());
      if (IsOp(",")) return Fail("unsupported: tuples");
      KILN_RETURN_IF_ERROR(Expect(")"));
    } else if (IsOp("[") || IsOp("{")) {
      const bool dict = IsOp("{");
      e->kind = dict ? ExprKind::kDict : ExprKind::kList;
      ++i_;
      while (!IsOp(dict ? "}" : "]")) {
        if (!e->kids.empty()) KILN_RETURN_IF_ERROR(Expect(","));
        if (IsOp(dict ? "}" : "]")) break;
        KILN_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
        e->kids.push_back(std::move(item));
        if (dict) {
          KILN_RETURN_IF_ERROR(Expect(":"));
          KILN_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
          e->kids.push_back(std::move(value));
        }
      }
      ++i_;
      return Seal(std::move(e));
    } else {
      return Unexpected("an expression");
    }
    return e;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr e) {
    while (true) {
      if (IsOp(".")) {
        const size_t at = At();
        ++i_;
        ExprPtr a = New(Cur().kind == Tok::kName ? ExprKind::kAttr : ExprKind::kItem, at);
        a->kids.push_back(std::move(e));
        if (Cur().kind == Tok::kName) {
          a->name = Cur().text;
        } else if (Cur().kind == Tok::kInt) {
          ExprPtr k = New(ExprKind::kConst, At());  // a.0 is a[0]
          k->value = Value::Int(Cur().ival);
          a->kids.push_back(std::move(k));
        } else {
          return Unexpected("a name or number");
        }
        ++i_;
        KILN_ASSIGN_OR_RETURN(e, Seal(std::move(a)));
      } else if (IsOp("[")) {
        KILN_ASSIGN_OR_RETURN(e, ParseSubscript(std::move(e)));
      } else if (IsOp("(")) {
        KILN_ASSIGN_OR_RETURN(e, ParseCall(std::move(e)));
      } else {
        return e;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr obj) {
    ExprPtr e = New(ExprKind::kItem, At());
    ++i_;
    Nest nest(this);
    KILN_RETURN_IF_ERROR(nest.status);
    e->kids.push_back(std::move(obj));
    if (IsOp("]")) return Fail("empty subscript");
    ExprPtr start;
    if (!IsOp(":")) {
      KILN_ASSIGN_OR_RETURN(start, ParseExpression());
    }
    if (IsOp(":")) {  // a[start:stop:step], each part optional
      ++i_;
      e->kind = ExprKind::kSlice;
      ExprPtr stop, step;
      if (!IsOp(":") && !IsOp("]") && !IsOp(",")) {
        KILN_ASSIGN_OR_RETURN(stop, ParseExpression());
      }
      if (IsOp(":")) {
        ++i_;
        if (!IsOp("]") && !IsOp(",")) {
          KILN_ASSIGN_OR_RETURN(step, ParseExpression());
        }
      }
      e->kids.push_back(std::move(start));
      e->kids.push_back(std::move(stop));
      e->kids.push_back(std::move(step));
    } else {
      e->kids.push_back(std::move(start));
    }
    // a[i, j]: Python indexes with a tuple, which no list, str or dict of a chat template accepts;
    // jinja2's getitem makes that undefined (kItem with more than one key).
    while (e->kind == ExprKind::kItem && IsOp(",")) {
      ++i_;
      if (IsOp("]")) break;
      KILN_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
      if (IsOp(":")) return Fail("unsupported: slices in a tuple subscript");
      e->kids.push_back(std::move(key));
    }
    if (IsOp(",")) return Fail("unsupported: slices in a tuple subscript");
    KILN_RETURN_IF_ERROR(Expect("]"));
    return Seal(std::move(e));
  }

  // (args, name=kwargs) appended to e->kids and e->kwnames.
  Status ParseArgs(Expr* e) {
    ++i_;
    Nest nest(this);
    KILN_RETURN_IF_ERROR(nest.status);
    bool first = true;
    while (!IsOp(")")) {
      if (!first) {
        KILN_RETURN_IF_ERROR(Expect(","));
        if (IsOp(")")) break;
      }
      first = false;
      if (IsOp("*") || IsOp("**")) return Fail("unsupported: *args and **kwargs");
      if (Cur().kind == Tok::kName && Next().kind == Tok::kOp && Next().text == "=") {
        e->kwnames.push_back(Cur().text);
        i_ += 2;
      } else if (!e->kwnames.empty()) {
        return Fail("a positional argument after a keyword argument");
      }
      KILN_ASSIGN_OR_RETURN(ExprPtr arg, ParseExpression());
      e->kids.push_back(std::move(arg));
    }
    ++i_;
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    ExprPtr e = New(ExprKind::kCall, At());
    e->kids.push_back(std::move(callee));
    KILN_RETURN_IF_ERROR(ParseArgs(e.get()));
    return Seal(std::move(e));
  }

  // Binds a filter's or test's arguments to its parameters: kids become {operand, p0, p1, ...},
  // null where a parameter is not given; arguments that do not fit set bind_error.
  void Bind(Expr* e, const Signature& sig) {
    const size_t positional = e->kids.size() - 1 - e->kwnames.size();
    std::vector<ExprPtr> bound(sig.params.size());
    if (positional > sig.params.size()) {
      e->bind_error = absl::StrCat("too many arguments for '", e->name, "'");
      return;
    }
    for (size_t k = 0; k < positional; ++k) bound[k] = std::move(e->kids[1 + k]);
    for (size_t k = 0; k < e->kwnames.size(); ++k) {
      const auto p = std::find(sig.params.begin(), sig.params.end(), e->kwnames[k]);
      if (p == sig.params.end() || bound[p - sig.params.begin()] != nullptr) {
        e->bind_error =
            absl::StrCat("unsupported argument '", e->kwnames[k], "' for '", e->name, "'");
        return;
      }
      bound[p - sig.params.begin()] = std::move(e->kids[1 + positional + k]);
    }
    for (size_t k = 0; k < sig.required; ++k) {
      if (bound[k] == nullptr) {
        e->bind_error = absl::StrCat("missing arguments for '", e->name, "'");
        return;
      }
    }
    e->kids.resize(1);
    e->kwnames.clear();
    for (ExprPtr& b : bound) e->kids.push_back(std::move(b));
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr e) {
    while (true) {
      if (IsOp("|")) {
        ++i_;
        ExprPtr f = New(ExprKind::kFilter, At());
        const size_t at = Cur().offset;
        KILN_ASSIGN_OR_RETURN(f->name, ExpectName());
        while (IsOp(".")) {
          ++i_;
          KILN_ASSIGN_OR_RETURN(std::string part, ExpectName());
          absl::StrAppend(&f->name, ".", part);
        }
        f->kids.push_back(std::move(e));
        if (IsOp("(")) KILN_RETURN_IF_ERROR(ParseArgs(f.get()));
        const Signature* sig = FindSignature(Filters(), f->name);
        if (sig == nullptr)
          return lx_.Error(at, absl::StrCat("unsupported filter '", f->name, "'"));
        Bind(f.get(), *sig);
        KILN_ASSIGN_OR_RETURN(e, Seal(std::move(f)));
      } else if (IsName("is")) {
        ExprPtr test = New(ExprKind::kTest, At());
        ++i_;
        const bool negated = !TakeName("not").empty();
        const size_t at = Cur().offset;
        KILN_ASSIGN_OR_RETURN(test->name, ExpectName());
        while (IsOp(".")) {
          ++i_;
          KILN_ASSIGN_OR_RETURN(std::string part, ExpectName());
          absl::StrAppend(&test->name, ".", part);
        }
        test->kids.push_back(std::move(e));
        const Tok k = Cur().kind;
        if (IsOp("(")) {
          KILN_RETURN_IF_ERROR(ParseArgs(test.get()));
        } else if ((k == Tok::kName || k == Tok::kStr || k == Tok::kInt || IsOp("[") ||
                    IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          // `x is divisibleby 3`: one argument without parentheses, as jinja2 reads it.
          if (IsName("is")) return Fail("tests cannot be chained with 'is'");
          Nest nest(this);
          KILN_RETURN_IF_ERROR(nest.status);
          KILN_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          KILN_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          test->kids.push_back(std::move(arg));
        }
        const Signature* sig = FindSignature(Tests(), test->name);
        if (sig == nullptr)
          return lx_.Error(at, absl::StrCat("unsupported test '", test->name, "'"));
        Bind(test.get(), *sig);
        KILN_ASSIGN_OR_RETURN(e, Seal(std::move(test)));
        if (negated) {
          ExprPtr n = New(ExprKind::kNot, e->offset);
          n->kids.push_back(std::move(e));
          KILN_ASSIGN_OR_RETURN(e, Seal(std::move(n)));
        }
      } else if (IsOp("(")) {
        KILN_ASSIGN_OR_RETURN(e, ParseCall(std::move(e)));
      } else {
        return e;
      }
    }
  }

  const Lexer& lx_;
  std::vector<Token> t_;
  size_t i_ = 0;
  int nesting_ = 0;
  int loops_ = 0;  // enclosing for bodies, for break and continue
};

// ** renderer **

constexpr std::string_view kStrMethods[] = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};
constexpr std::string_view kDictMethods[] = {"clear", "copy", "fromkeys", "get", "items", "keys",
                                             "pop", "popitem", "setdefault", "update", "values"};
constexpr std::string_view kListMethods[] = {"append", "clear", "copy", "count", "extend", "index",
                                             "insert", "pop", "remove", "reverse", "sort"};
template <size_t N>
bool In(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

// jinja2's message for a missing attribute or item of v (Undefined._undefined_message).
std::string NoAttribute(const Value& v, const std::string& name) {
  const std::string type = v.kind == Kind::kNone ? "None" : absl::StrCat(TypeName(v), " object");
  return absl::StrCat("'", type, "' has no attribute '", name, "'");
}

class Renderer {
 public:
  enum class Flow { kNormal, kBreak, kContinue };

  Renderer(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
           const std::string& bos_token, const std::string& eos_token) {
    List list;
    for (const ChatMessage& m : messages) {
      list.push_back(
          Value::MakeDict({{"role", Value::Str(m.role)}, {"content", Value::Str(m.content)}}));
    }
    scopes_.resize(2);  // the variables given to the template, then its top level
    scopes_[0]["messages"] = Value::MakeList(std::move(list));
    scopes_[0]["add_generation_prompt"] = Value::Bool(add_generation_prompt);
    scopes_[0]["bos_token"] = Value::Str(bos_token);
    scopes_[0]["eos_token"] = Value::Str(eos_token);
    scopes_[0]["tools"] = Value::None();
    scopes_[0]["documents"] = Value::None();
  }
  // Namespaces may hold themselves (set ns.x = ns); emptying them frees such cycles.
  ~Renderer() {
    for (const std::shared_ptr<Dict>& ns : namespaces_) ns->clear();
  }

  Status Exec(const std::vector<Stmt>& body, std::string* out, Flow* flow) {
    for (const Stmt& s : body) {
      KILN_RETURN_IF_ERROR(Charge(1));
      switch (s.kind) {
        case StmtKind::kText:
          KILN_RETURN_IF_ERROR(Emit(s.text, out));
          break;
        case StmtKind::kPrint: {
          KILN_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
          if (v.kind == Kind::kStr) {
            KILN_RETURN_IF_ERROR(Emit(v.s, out));
          } else {
            std::string text;
            KILN_RETURN_IF_ERROR(AppendStr(v, &text));
            KILN_RETURN_IF_ERROR(Emit(text, out));
          }
          break;
        }
        case StmtKind::kIf:
          for (size_t k = 0; k < s.bodies.size(); ++k) {
            bool take = k == s.conds.size();  // else
            if (!take) {
              KILN_ASSIGN_OR_RETURN(Value c, Eval(*s.conds[k]));
              take = Truthy(c);
            }
            if (take) {
              KILN_RETURN_IF_ERROR(Exec(s.bodies[k], out, flow));
              break;
            }
          }
          if (*flow != Flow::kNormal) return absl::OkStatus();
          break;
        case StmtKind::kFor:
          KILN_RETURN_IF_ERROR(ExecFor(s, out));
          break;
        case StmtKind::kSet: {
          KILN_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
          scopes_.back()[s.text] = std::move(v);
          break;
        }
        case StmtKind::kSetAttr: {
          const Value* ns = Lookup(s.text);
          if (ns == nullptr || ns->kind != Kind::kNamespace) {
            return Error(s.offset, "cannot assign an attribute of a non-namespace object");
          }
          std::shared_ptr<Dict> attrs = ns->dict;
          KILN_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
          auto it = std::find_if(attrs->begin(), attrs->end(),
                                 [&](const auto& kv) { return kv.first == s.attr; });
          if (it != attrs->end()) {
            it->second = std::move(v);
          } else {
            attrs->emplace_back(s.attr, std::move(v));
          }
          break;
        }
        case StmtKind::kSetBlock: {
          std::string text;
          scopes_.emplace_back();
          Flow inner = Flow::kNormal;
          Status st = Exec(s.bodies[0], &text, &inner);
          scopes_.pop_back();
          KILN_RETURN_IF_ERROR(st);
          scopes_.back()[s.text] = Value::Str(std::move(text));
          break;
        }
        case StmtKind::kBreak:
        case StmtKind::kContinue:
          *flow = s.kind == StmtKind::kBreak ? Flow::kBreak : Flow::kContinue;
          return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

 private:
  Status Error(size_t offset, std::string_view what) const {
    return Invalid(absl::StrCat("chat template: ", std::string(what), " at byte ", offset));
  }
  Status Charge(int64_t n) {
    steps_ += n;
    if (steps_ <= ChatTemplate::kMaxSteps) return absl::OkStatus();
    return Invalid(absl::StrCat("chat template: rendering took more than ", ChatTemplate::kMaxSteps,
                                " steps (kMaxSteps)"));
  }
  // No string, and not the output, is over kMaxOutputBytes.
  Status Fits(size_t bytes) const {
    if (bytes <= ChatTemplate::kMaxOutputBytes) return absl::OkStatus();
    return Invalid(absl::StrCat("chat template: a string or the output over ",
                                ChatTemplate::kMaxOutputBytes, " bytes (kMaxOutputBytes)"));
  }
  Status ChargeBytes(size_t bytes) { return Charge(static_cast<int64_t>(bytes / kBytesPerStep)); }
  // A string of `bytes` made or copied.
  Status Made(size_t bytes) {
    KILN_RETURN_IF_ERROR(Fits(bytes));
    return ChargeBytes(bytes);
  }
  // A search for an m-byte needle in n bytes: std::string::find is O(n * m) at worst.
  Status Search(size_t n, size_t m) {
    return Charge(static_cast<int64_t>(n / kBytesPerStep + n / 1024 * m));
  }
  // Appends copies of src's items to *dst.
  Status CopyItems(const List& src, List* dst) {
    if (dst->size() + src.size() > ChatTemplate::kMaxListItems)
      return CheckItems(dst->size() + src.size());
    for (const Value& x : src) {
      KILN_RETURN_IF_ERROR(Charge(1));
      if (x.kind == Kind::kStr) KILN_RETURN_IF_ERROR(ChargeBytes(x.s.size()));
      dst->push_back(x);
    }
    return absl::OkStatus();
  }
  Status CheckItems(size_t items) {
    if (items > ChatTemplate::kMaxListItems) {
      return Invalid(absl::StrCat("chat template: a list over ", ChatTemplate::kMaxListItems,
                                  " items (kMaxListItems)"));
    }
    return Charge(static_cast<int64_t>(items));
  }
  Status Emit(std::string_view text, std::string* out) {
    KILN_RETURN_IF_ERROR(Fits(out->size() + text.size()));
    KILN_RETURN_IF_ERROR(ChargeBytes(text.size()));
    out->append(text);
    return absl::OkStatus();
  }

  const Value* Lookup(const std::string& name) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      if (auto it = s->find(name); it != s->end()) return &it->second;
    }
    return nullptr;
  }

  // ** str(), repr(), json.dumps(), ==, < **

  Status AppendStr(const Value& v, std::string* out) {
    if (v.kind == Kind::kStr) {
      KILN_RETURN_IF_ERROR(Fits(out->size() + v.s.size()));
      KILN_RETURN_IF_ERROR(ChargeBytes(v.s.size()));
      out->append(v.s);
      return absl::OkStatus();
    }
    if (v.kind == Kind::kUndefined) return absl::OkStatus();
    return Repr(v, out, 0);
  }

  Status Repr(const Value& v, std::string* out, int depth) {
    if (depth > kMaxValueDepth)
      return Invalid("chat template: a value nested deeper than 64 levels");
    KILN_RETURN_IF_ERROR(Fits(out->size()));
    KILN_RETURN_IF_ERROR(Charge(1));
    KILN_RETURN_IF_ERROR(ChargeBytes(v.s.size()));
    switch (v.kind) {
      case Kind::kUndefined: out->append("Undefined"); break;
      case Kind::kNone: out->append("None"); break;
      case Kind::kBool: out->append(v.i ? "True" : "False"); break;
      case Kind::kInt: absl::StrAppend(out, v.i); break;
      case Kind::kStr: ReprStr(v.s, out); break;
      case Kind::kList:
        out->push_back('[');
        for (size_t k = 0; k < v.list->size(); ++k) {
          if (k > 0) out->append(", ");
          KILN_RETURN_IF_ERROR(Repr((*v.list)[k], out, depth + 1));
        }
        out->push_back(']');
        break;
      case Kind::kDict:
      case Kind::kNamespace:
        out->append(v.kind == Kind::kDict ? "{" : "<Namespace {");
        for (size_t k = 0; k < v.dict->size(); ++k) {
          if (k > 0) out->append(", ");
          ReprStr((*v.dict)[k].first, out);
          out->append(": ");
          KILN_RETURN_IF_ERROR(Repr((*v.dict)[k].second, out, depth + 1));
        }
        out->append(v.kind == Kind::kDict ? "}" : "}>");
        break;
      case Kind::kLoop:
        absl::StrAppend(out, "<LoopContext ", v.i + 1, "/", v.list->size(), ">");
        break;
    }
    return Fits(out->size());
  }

  // json.dumps(v, ensure_ascii=False): transformers' tojson.
  Status Json(const Expr& e, const Value& v, std::string* out, int depth) {
    if (depth > kMaxValueDepth) return Error(e.offset, "a value nested deeper than 64 levels");
    KILN_RETURN_IF_ERROR(Fits(out->size()));
    KILN_RETURN_IF_ERROR(Charge(1));
    KILN_RETURN_IF_ERROR(ChargeBytes(v.s.size()));
    switch (v.kind) {
      case Kind::kNone: out->append("null"); break;
      case Kind::kBool: out->append(v.i ? "true" : "false"); break;
      case Kind::kInt: absl::StrAppend(out, v.i); break;
      case Kind::kStr: JsonStr(v.s, out); break;
      case Kind::kList:
        out->push_back('[');
        for (size_t k = 0; k < v.list->size(); ++k) {
          if (k > 0) out->append(", ");
          KILN_RETURN_IF_ERROR(Json(e, (*v.list)[k], out, depth + 1));
        }
        out->push_back(']');
        break;
      case Kind::kDict:
        out->push_back('{');
        for (size_t k = 0; k < v.dict->size(); ++k) {
          if (k > 0) out->append(", ");
          JsonStr((*v.dict)[k].first, out);
          out->append(": ");
          KILN_RETURN_IF_ERROR(Json(e, (*v.dict)[k].second, out, depth + 1));
        }
        out->push_back('}');
        break;
      default:
        return Error(e.offset,
                     absl::StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
    }
    return Fits(out->size());
  }

  absl::StatusOr<bool> Equal(const Value& a, const Value& b, int depth) {
    if (depth > kMaxValueDepth)
      return Invalid("chat template: a value nested deeper than 64 levels");
    KILN_RETURN_IF_ERROR(Charge(1));
    if (a.is_int() && b.is_int()) return a.i == b.i;
    if (a.kind != b.kind) return false;
    switch (a.kind) {
      case Kind::kUndefined:
      case Kind::kNone: return true;
      case Kind::kStr:
        KILN_RETURN_IF_ERROR(ChargeBytes(std::min(a.s.size(), b.s.size())));
        return a.s == b.s;
      case Kind::kList:
        if (a.list->size() != b.list->size()) return false;
        for (size_t k = 0; k < a.list->size(); ++k) {
          KILN_ASSIGN_OR_RETURN(bool eq, Equal((*a.list)[k], (*b.list)[k], depth + 1));
          if (!eq) return false;
        }
        return true;
      case Kind::kDict:  // order does not matter
        if (a.dict->size() != b.dict->size()) return false;
        for (const auto& [k, v] : *a.dict) {
          const Value* w = Find(*b.dict, k);
          if (w == nullptr) return false;
          KILN_ASSIGN_OR_RETURN(bool eq, Equal(v, *w, depth + 1));
          if (!eq) return false;
        }
        return true;
      default:
        return a.dict == b.dict && a.list == b.list && a.i == b.i;  // namespace, loop: identity
    }
  }

  // a <op> b for < > <= >=: ints, strs (code point order) and lists (lexicographic), as Python.
  absl::StatusOr<bool> Order(const Expr& e, const std::string& op, const Value& a, const Value& b,
                             int depth) {
    if (depth > kMaxValueDepth) return Error(e.offset, "a value nested deeper than 64 levels");
    if (a.kind == Kind::kUndefined) return Error(e.offset, a.s);
    if (b.kind == Kind::kUndefined) return Error(e.offset, b.s);
    int cmp = 0;
    if (a.is_int() && b.is_int()) {
      cmp = a.i < b.i ? -1 : a.i > b.i ? 1 : 0;
    } else if (a.kind == Kind::kStr && b.kind == Kind::kStr) {
      KILN_RETURN_IF_ERROR(ChargeBytes(std::min(a.s.size(), b.s.size())));
      cmp = a.s.compare(b.s);
    } else if (a.kind == Kind::kList && b.kind == Kind::kList) {
      for (size_t k = 0; k < std::min(a.list->size(), b.list->size()); ++k) {
        KILN_ASSIGN_OR_RETURN(bool eq, Equal((*a.list)[k], (*b.list)[k], depth + 1));
        if (!eq) return Order(e, op, (*a.list)[k], (*b.list)[k], depth + 1);
      }
      cmp = a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
    } else {
      return Error(e.offset, absl::StrCat("'", op, "' not supported between instances of '",
                                          TypeName(a), "' and '", TypeName(b), "'"));
    }
    return op == "<" ? cmp < 0 : op == ">" ? cmp > 0 : op == "<=" ? cmp <= 0 : cmp >= 0;
  }

  absl::StatusOr<bool> Contains(const Expr& e, const Value& item, const Value& in) {
    switch (in.kind) {
      case Kind::kUndefined: return false;  // iterates as empty
      case Kind::kStr:
        if (item.kind != Kind::kStr) {
          return Error(e.offset, absl::StrCat("'in <string>' requires string as left operand, not ",
                                              TypeName(item)));
        }
        KILN_RETURN_IF_ERROR(Search(in.s.size(), item.s.size()));
        return in.s.find(item.s) != std::string::npos;
      case Kind::kList:
        for (const Value& x : *in.list) {
          KILN_ASSIGN_OR_RETURN(bool eq, Equal(item, x, 0));
          if (eq) return true;
        }
        return false;
      case Kind::kDict:
        if (item.kind == Kind::kList || item.kind == Kind::kDict) {
          return Error(e.offset, absl::StrCat("unhashable type: '", TypeName(item), "'"));
        }
        return item.kind == Kind::kStr && Find(*in.dict, item.s) != nullptr;
      default:
        return Error(e.offset,
                     absl::StrCat("argument of type '", TypeName(in), "' is not iterable"));
    }
  }

  // The items `for` visits: a list's items, a str's characters, a dict's keys; none for undefined.
  absl::StatusOr<List> Iterate(const Expr& e, const Value& v) {
    List items;
    switch (v.kind) {
      case Kind::kUndefined: break;
      case Kind::kList:
        KILN_RETURN_IF_ERROR(CheckItems(v.list->size()));
        items = *v.list;  // its strings are charged below
        break;
      case Kind::kStr:
        KILN_RETURN_IF_ERROR(CheckItems(v.s.size()));
        for (size_t i = 0; i < v.s.size(); i += DecodeAt(v.s, i).len) {
          items.push_back(Value::Str(v.s.substr(i, DecodeAt(v.s, i).len)));
        }
        break;
      case Kind::kDict:
        KILN_RETURN_IF_ERROR(CheckItems(v.dict->size()));
        for (const auto& kv : *v.dict) items.push_back(Value::Str(kv.first));
        break;
      default: return Error(e.offset, absl::StrCat("'", TypeName(v), "' object is not iterable"));
    }
    for (const Value& x : items) {
      if (x.kind == Kind::kStr) KILN_RETURN_IF_ERROR(Made(x.s.size()));
    }
    return items;
  }

  Status ExecFor(const Stmt& s, std::string* out) {
    KILN_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
    KILN_ASSIGN_OR_RETURN(List all, Iterate(*s.expr, iterable));
    List items;
    for (Value& x : all) {
      bool keep = true;
      if (s.filter != nullptr) {
        scopes_.emplace_back();
        scopes_.back()[s.text] = x;
        absl::StatusOr<Value> c = Eval(*s.filter);
        scopes_.pop_back();
        KILN_RETURN_IF_ERROR(c.status());
        keep = Truthy(*c);
      }
      if (keep) items.push_back(std::move(x));
    }
    if (items.empty()) {
      if (s.bodies.size() < 2) return absl::OkStatus();
      Flow flow = Flow::kNormal;
      scopes_.emplace_back();
      Status st = Exec(s.bodies[1], out, &flow);
      scopes_.pop_back();
      return st;
    }
    auto shared = std::make_shared<const List>(std::move(items));
    for (size_t k = 0; k < shared->size(); ++k) {
      KILN_RETURN_IF_ERROR(Charge(1));
      KILN_RETURN_IF_ERROR(ChargeBytes((*shared)[k].s.size()));
      // As in jinja2, each iteration has a fresh scope: what the body sets is gone at the next.
      scopes_.emplace_back();
      scopes_.back()[s.text] = (*shared)[k];
      scopes_.back()["loop"] = Value{Kind::kLoop, static_cast<int64_t>(k), {}, shared, nullptr};
      Flow flow = Flow::kNormal;
      Status st = Exec(s.bodies[0], out, &flow);
      scopes_.pop_back();
      KILN_RETURN_IF_ERROR(st);
      if (flow == Flow::kBreak) break;
    }
    return absl::OkStatus();
  }

  // ** expressions **

  absl::StatusOr<Value> Eval(const Expr& e) {
    KILN_RETURN_IF_ERROR(Charge(1));
    KILN_ASSIGN_OR_RETURN(Value v, EvalNode(e));
    if (v.kind == Kind::kStr)
      KILN_RETURN_IF_ERROR(Made(v.s.size()));  // every copy of a string counts
    return v;
  }

  absl::StatusOr<Value> EvalNode(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kConst: return e.value;
      case ExprKind::kName: {
        const Value* v = Lookup(e.name);
        return v != nullptr ? *v : Value::Undef(absl::StrCat("'", e.name, "' is undefined"));
      }
      case ExprKind::kAttr: {
        KILN_ASSIGN_OR_RETURN(Value obj, Eval(*e.kids[0]));
        return GetAttr(e, obj, e.name);
      }
      case ExprKind::kItem: {
        KILN_ASSIGN_OR_RETURN(Value obj, Eval(*e.kids[0]));
        KILN_ASSIGN_OR_RETURN(Value key, Eval(*e.kids[1]));
        for (size_t k = 2; k < e.kids.size(); ++k) KILN_RETURN_IF_ERROR(Eval(*e.kids[k]).status());
        if (e.kids.size() > 2) {  // a tuple key
          if (obj.kind == Kind::kUndefined) return Error(e.offset, obj.s);
          return Value::Undef(absl::StrCat("'", TypeName(obj), " object' has no element"));
        }
        return GetItem(e, obj, key);
      }
      case ExprKind::kSlice: return EvalSlice(e);
      case ExprKind::kCall: return EvalCall(e);
      case ExprKind::kFilter:
      case ExprKind::kTest:
        if (!e.bind_error.empty()) return Error(e.offset, e.bind_error);
        return e.kind == ExprKind::kFilter ? EvalFilter(e) : EvalTest(e);
      case ExprKind::kNot: {
        KILN_ASSIGN_OR_RETURN(Value v, Eval(*e.kids[0]));
        return Value::Bool(!Truthy(v));
      }
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        KILN_ASSIGN_OR_RETURN(Value v, Eval(*e.kids[0]));
        if (v.kind == Kind::kUndefined) return Error(e.offset, v.s);
        if (!v.is_int()) {
          return Error(e.offset,
                       absl::StrCat("bad operand type for unary ",
                                    e.kind == ExprKind::kNeg ? "-" : "+", ": '", TypeName(v), "'"));
        }
        if (e.kind == ExprKind::kPos) return Value::Int(v.i);
        if (v.i == std::numeric_limits<int64_t>::min())
          return Error(e.offset, "integer overflow (64 bits)");
        return Value::Int(-v.i);
      }
      case ExprKind::kBinary: {
        KILN_ASSIGN_OR_RETURN(Value acc, Eval(*e.kids[0]));
        for (size_t k = 0; k < e.ops.size(); ++k) {
          KILN_ASSIGN_OR_RETURN(Value rhs, Eval(*e.kids[k + 1]));
          KILN_ASSIGN_OR_RETURN(acc, BinOp(e, e.ops[k], std::move(acc), rhs));
        }
        return acc;
      }
      case ExprKind::kAnd:
      case ExprKind::kOr: {  // Python's: the operand that decides
        Value v;
        for (const ExprPtr& k : e.kids) {
          KILN_ASSIGN_OR_RETURN(v, Eval(*k));
          if (Truthy(v) == (e.kind == ExprKind::kOr)) break;
        }
        return v;
      }
      case ExprKind::kCompare: {
        KILN_ASSIGN_OR_RETURN(Value left, Eval(*e.kids[0]));
        for (size_t k = 0; k < e.ops.size(); ++k) {
          KILN_ASSIGN_OR_RETURN(Value right, Eval(*e.kids[k + 1]));
          const std::string& op = e.ops[k];
          bool r;
          if (op == "==" || op == "!=") {
            KILN_ASSIGN_OR_RETURN(r, Equal(left, right, 0));
            r = r == (op == "==");
          } else if (op == "in" || op == "not in") {
            KILN_ASSIGN_OR_RETURN(r, Contains(e, left, right));
            r = r == (op == "in");
          } else {
            KILN_ASSIGN_OR_RETURN(r, Order(e, op, left, right, 0));
          }
          if (!r) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case ExprKind::kCond: {
        KILN_ASSIGN_OR_RETURN(Value c, Eval(*e.kids[1]));
        if (Truthy(c)) return Eval(*e.kids[0]);
        if (e.kids[2] != nullptr) return Eval(*e.kids[2]);
        return Value::Undef(
            "the inline if-expression evaluated to false and no else section was defined");
      }
      case ExprKind::kList: {
        List items;
        for (const ExprPtr& k : e.kids) {
          KILN_ASSIGN_OR_RETURN(Value v, Eval(*k));
          items.push_back(std::move(v));
        }
        return Value::MakeList(std::move(items));
      }
      case ExprKind::kDict: {
        Dict d;
        for (size_t k = 0; k < e.kids.size(); k += 2) {
          KILN_ASSIGN_OR_RETURN(Value key, Eval(*e.kids[k]));
          KILN_ASSIGN_OR_RETURN(Value v, Eval(*e.kids[k + 1]));
          if (key.kind != Kind::kStr)
            return Error(e.kids[k]->offset, "unsupported: a dict key that is not a str");
          auto it =
              std::find_if(d.begin(), d.end(), [&](const auto& kv) { return kv.first == key.s; });
          if (it != d.end()) {
            it->second = std::move(v);
          } else {
            d.emplace_back(std::move(key.s), std::move(v));
          }
        }
        return Value::MakeDict(std::move(d));
      }
    }
    return Error(e.offset, "unknown expression");
  }

  absl::StatusOr<Value> GetAttr(const Expr& e, const Value& v, const std::string& name) {
    switch (v.kind) {
      case Kind::kUndefined: return Error(e.offset, v.s);
      case Kind::kDict:
      case Kind::kNamespace:
        if (v.kind == Kind::kDict && In(kDictMethods, name)) {
          return Error(e.offset,
                       absl::StrCat("unsupported: dict method '", name, "' used without a call"));
        }
        if (const Value* x = Find(*v.dict, name)) return *x;
        break;
      case Kind::kLoop: return LoopAttr(e, v, name);
      case Kind::kStr:
      case Kind::kList:
        if (v.kind == Kind::kStr ? In(kStrMethods, name) : In(kListMethods, name)) {
          return Error(e.offset,
                       absl::StrCat("unsupported: method '", name, "' used without a call"));
        }
        break;
      default: break;
    }
    return Value::Undef(NoAttribute(v, name));
  }

  absl::StatusOr<Value> LoopAttr(const Expr& e, const Value& loop, const std::string& name) {
    const int64_t i = loop.i, n = static_cast<int64_t>(loop.list->size());
    if (name == "index") return Value::Int(i + 1);
    if (name == "index0") return Value::Int(i);
    if (name == "revindex") return Value::Int(n - i);
    if (name == "revindex0") return Value::Int(n - i - 1);
    if (name == "first") return Value::Bool(i == 0);
    if (name == "last") return Value::Bool(i == n - 1);
    if (name == "length") return Value::Int(n);
    if (name == "depth") return Value::Int(1);
    if (name == "depth0") return Value::Int(0);
    if (name == "previtem")
      return i > 0 ? (*loop.list)[i - 1] : Value::Undef("there is no previous item");
    if (name == "nextitem")
      return i + 1 < n ? (*loop.list)[i + 1] : Value::Undef("there is no next item");
    if (name == "cycle" || name == "changed")
      return Error(e.offset, absl::StrCat("unsupported: loop.", name));
    return Value::Undef(NoAttribute(loop, name));
  }

  // obj[key] as jinja2's sandbox getitem: a missing key, an index out of range or a key of the
  // wrong type is undefined; a str key falls back to the attribute.
  absl::StatusOr<Value> GetItem(const Expr& e, const Value& v, const Value& key) {
    if (v.kind == Kind::kUndefined) return Error(e.offset, v.s);
    if ((v.kind == Kind::kList || v.kind == Kind::kStr) && key.is_int()) {
      std::vector<size_t> cps;
      if (v.kind == Kind::kStr) cps = CpStarts(v.s);
      const auto n = static_cast<int64_t>(v.kind == Kind::kList ? v.list->size() : cps.size() - 1);
      const int64_t k = key.i < 0 ? key.i + n : key.i;
      if (k < 0 || k >= n)
        return Value::Undef(absl::StrCat("'", TypeName(v), " object' has no element ", key.i));
      if (v.kind == Kind::kList) return (*v.list)[k];
      return Value::Str(v.s.substr(cps[k], cps[k + 1] - cps[k]));
    }
    if (key.kind == Kind::kStr) {
      if (v.kind == Kind::kDict) {
        if (const Value* x = Find(*v.dict, key.s)) return *x;
      }
      return GetAttr(e, v, key.s);
    }
    return Value::Undef(absl::StrCat("'", TypeName(v), " object' has no element"));
  }

  absl::StatusOr<Value> EvalSlice(const Expr& e) {
    KILN_ASSIGN_OR_RETURN(Value obj, Eval(*e.kids[0]));
    Value bounds[3];
    for (int k = 0; k < 3; ++k) {
      bounds[k] = Value::None();
      if (e.kids[k + 1] != nullptr) {
        KILN_ASSIGN_OR_RETURN(bounds[k], Eval(*e.kids[k + 1]));
      }
    }
    // jinja2 slices with Python's obj[a:b:c], not its lenient getitem: errors are raised.
    if (obj.kind == Kind::kUndefined) return Error(e.offset, obj.s);
    if (obj.kind == Kind::kDict) return Error(e.offset, "unhashable type: 'slice'");
    if (obj.kind != Kind::kList && obj.kind != Kind::kStr) {
      return Error(e.offset, absl::StrCat("'", TypeName(obj), "' object is not subscriptable"));
    }
    for (const Value& b : bounds) {
      if (!b.is_int() && b.kind != Kind::kNone) {
        return Error(e.offset, "slice indices must be integers or None");
      }
    }
    const int64_t step = bounds[2].kind == Kind::kNone ? 1 : bounds[2].i;
    if (step == 0) return Error(e.offset, "slice step cannot be zero");
    const auto part = [&](int k) { return bounds[k].kind == Kind::kNone ? nullptr : &bounds[k]; };
    if (obj.kind == Kind::kList) {
      const std::vector<int64_t> idx =
          SliceIndices(static_cast<int64_t>(obj.list->size()), part(0), part(1), step);
      KILN_RETURN_IF_ERROR(CheckItems(idx.size()));
      List out;
      for (int64_t k : idx) {
        KILN_RETURN_IF_ERROR(ChargeBytes((*obj.list)[k].s.size()));
        out.push_back((*obj.list)[k]);
      }
      return Value::MakeList(std::move(out));
    }
    const std::vector<size_t> cps = CpStarts(obj.s);
    std::string out;
    for (int64_t k : SliceIndices(static_cast<int64_t>(cps.size() - 1), part(0), part(1), step)) {
      out.append(obj.s, cps[k], cps[k + 1] - cps[k]);
    }
    return Value::Str(std::move(out));
  }

  absl::StatusOr<Value> BinOp(const Expr& e, const std::string& op, Value a, const Value& b) {
    if (op == "~") {
      std::string s = a.kind == Kind::kStr ? std::move(a.s) : "";
      if (a.kind != Kind::kStr) KILN_RETURN_IF_ERROR(AppendStr(a, &s));
      KILN_RETURN_IF_ERROR(AppendStr(b, &s));
      return Value::Str(std::move(s));
    }
    if (a.kind == Kind::kUndefined) return Error(e.offset, a.s);
    if (b.kind == Kind::kUndefined) return Error(e.offset, b.s);
    int64_t r = 0;
    if (a.is_int() && b.is_int()) {
      bool overflow = false;
      if (op == "+") overflow = __builtin_add_overflow(a.i, b.i, &r);
      if (op == "-") overflow = __builtin_sub_overflow(a.i, b.i, &r);
      if (op == "*") overflow = __builtin_mul_overflow(a.i, b.i, &r);
      if (op == "//" || op == "%") {
        if (b.i == 0) return Error(e.offset, "integer division or modulo by zero");
        if (a.i == std::numeric_limits<int64_t>::min() && b.i == -1) {
          overflow = op == "//";
        } else {
          r = op == "//" ? FloorDiv(a.i, b.i) : FloorMod(a.i, b.i);
        }
      }
      if (overflow) return Error(e.offset, "integer overflow (64 bits)");
      return Value::Int(r);
    }
    if (op == "+" && a.kind == b.kind && (a.kind == Kind::kStr || a.kind == Kind::kList)) {
      if (a.kind == Kind::kStr) {
        KILN_RETURN_IF_ERROR(Made(a.s.size() + b.s.size()));
        return Value::Str(std::move(a.s) + b.s);
      }
      List out;
      KILN_RETURN_IF_ERROR(CopyItems(*a.list, &out));
      KILN_RETURN_IF_ERROR(CopyItems(*b.list, &out));
      return Value::MakeList(std::move(out));
    }
    if (op == "*" && (a.is_int() || b.is_int()) &&
        (a.kind == Kind::kStr || a.kind == Kind::kList || b.kind == Kind::kStr ||
         b.kind == Kind::kList)) {
      const Value& seq = a.is_int() ? b : a;
      const size_t unit = seq.kind == Kind::kStr ? seq.s.size() : seq.list->size();
      const int64_t n = unit == 0 ? 0 : std::max<int64_t>(0, a.is_int() ? a.i : b.i);
      const size_t total = std::min<uint64_t>(n, ChatTemplate::kMaxOutputBytes + 1) * unit;
      if (seq.kind == Kind::kStr) {
        KILN_RETURN_IF_ERROR(Made(total));
        std::string out;
        for (int64_t k = 0; k < n; ++k) out += seq.s;
        return Value::Str(std::move(out));
      }
      if (total > ChatTemplate::kMaxListItems) return CheckItems(total);
      List out;
      for (int64_t k = 0; k < n; ++k) KILN_RETURN_IF_ERROR(CopyItems(*seq.list, &out));
      return Value::MakeList(std::move(out));
    }
    if (op == "%" && a.kind == Kind::kStr)
      return Error(e.offset, "unsupported: printf-style '%' formatting");
    return Error(e.offset, absl::StrCat("unsupported operand type(s) for ", op, ": '", TypeName(a),
                                        "' and '", TypeName(b), "'"));
  }

  // ** calls, filters, tests **

  absl::StatusOr<std::vector<Value>> EvalArgs(const Expr& e, size_t first) {
    std::vector<Value> args;
    for (size_t k = first; k < e.kids.size(); ++k) {
      if (e.kids[k] == nullptr) {
        args.push_back(Value::Undef(""));  // a parameter not given
        continue;
      }
      KILN_ASSIGN_OR_RETURN(Value v, Eval(*e.kids[k]));
      args.push_back(std::move(v));
    }
    return args;
  }

  // Checks a call's argument count; a str argument is required where `need_str`.
  Status Arity(const Expr& e, const std::string& name, const std::vector<Value>& args, size_t lo,
               size_t hi) {
    if (!e.kwnames.empty())
      return Error(e.offset, absl::StrCat("unsupported: keyword arguments to ", name));
    if (args.size() < lo || args.size() > hi) {
      return Error(e.offset,
                   absl::StrCat(name, "() takes ", lo, lo == hi ? "" : absl::StrCat(" to ", hi),
                                " arguments (", args.size(), " given)"));
    }
    return absl::OkStatus();
  }
  Status NeedStr(const Expr& e, const std::string& name, const Value& v) {
    if (v.kind == Kind::kStr) return absl::OkStatus();
    if (v.kind == Kind::kUndefined)
      return Error(e.offset, v.s.empty() ? "undefined argument" : v.s);
    return Error(e.offset, absl::StrCat(name, "() argument must be str, not ", TypeName(v)));
  }

  absl::StatusOr<Value> EvalCall(const Expr& e) {
    const Expr& callee = *e.kids[0];
    KILN_ASSIGN_OR_RETURN(std::vector<Value> args, EvalArgs(e, 1));
    if (callee.kind == ExprKind::kName && Lookup(callee.name) == nullptr) {
      return CallGlobal(e, callee.name, std::move(args));
    }
    if (callee.kind != ExprKind::kAttr) {
      KILN_ASSIGN_OR_RETURN(Value v, Eval(callee));
      if (v.kind == Kind::kUndefined) return Error(e.offset, v.s);
      return Error(e.offset, absl::StrCat("'", TypeName(v), "' object is not callable"));
    }
    KILN_ASSIGN_OR_RETURN(Value obj, Eval(*callee.kids[0]));
    const std::string& m = callee.name;
    if (obj.kind == Kind::kStr && In(kStrMethods, m)) return CallStrMethod(e, obj.s, m, args);
    if (obj.kind == Kind::kDict && m == "get") {
      KILN_RETURN_IF_ERROR(Arity(e, m, args, 1, 2));
      const Value* x = args[0].kind == Kind::kStr ? Find(*obj.dict, args[0].s) : nullptr;
      return x != nullptr ? *x : args.size() == 2 ? args[1] : Value::None();
    }
    if ((obj.kind == Kind::kDict && In(kDictMethods, m)) ||
        (obj.kind == Kind::kList && In(kListMethods, m)) || obj.kind == Kind::kStr) {
      return Error(e.offset, absl::StrCat("unsupported: method ", TypeName(obj), ".", m, "()"));
    }
    KILN_ASSIGN_OR_RETURN(Value f, GetAttr(callee, obj, m));
    if (f.kind == Kind::kUndefined) return Error(e.offset, f.s);
    return Error(e.offset, absl::StrCat("'", TypeName(f), "' object is not callable"));
  }

  absl::StatusOr<Value> CallGlobal(const Expr& e, const std::string& name,
                                   std::vector<Value> args) {
    if (name == "raise_exception") {
      KILN_RETURN_IF_ERROR(Arity(e, name, args, 1, 1));
      std::string message;
      KILN_RETURN_IF_ERROR(AppendStr(args[0], &message));
      return Invalid(message);  // the template's own message, as transformers raises it
    }
    if (name == "namespace") {
      Dict attrs;
      const size_t positional = args.size() - e.kwnames.size();
      if (positional > 1 || (positional == 1 && args[0].kind != Kind::kDict)) {
        return Error(e.offset, "unsupported: namespace() takes a dict and keyword arguments");
      }
      if (positional == 1) attrs = *args[0].dict;
      for (size_t k = 0; k < e.kwnames.size(); ++k)
        attrs.emplace_back(e.kwnames[k], args[positional + k]);
      Value ns = Value::MakeDict(std::move(attrs), Kind::kNamespace);
      namespaces_.push_back(ns.dict);
      return ns;
    }
    if (name == "range") {
      KILN_RETURN_IF_ERROR(Arity(e, name, args, 1, 3));
      for (const Value& a : args) {
        if (!a.is_int())
          return Error(e.offset, absl::StrCat("range() takes ints, not ", TypeName(a)));
      }
      const int64_t start = args.size() == 1 ? 0 : args[0].i,
                    stop = args.size() == 1 ? args[0].i : args[1].i;
      const int64_t step = args.size() == 3 ? args[2].i : 1;
      if (step == 0) return Error(e.offset, "range() arg 3 must not be zero");
      const Value bound[2] = {Value::Int(start), Value::Int(stop)};
      const std::vector<int64_t> idx =
          SliceIndices(std::numeric_limits<int32_t>::max(), &bound[0], &bound[1], step);
      if (start < 0 || stop < 0 || idx.size() > 100000) {
        return Error(e.offset, "unsupported: a range() with negative bounds or over 100000 items");
      }
      List out;
      for (int64_t k : idx) out.push_back(Value::Int(k));
      KILN_RETURN_IF_ERROR(CheckItems(out.size()));
      return Value::MakeList(std::move(out));
    }
    return Error(e.offset, absl::StrCat("'", name, "' is undefined"));
  }

  absl::StatusOr<Value> CallStrMethod(const Expr& e, const std::string& s, const std::string& m,
                                      const std::vector<Value>& args) {
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
      KILN_RETURN_IF_ERROR(Arity(e, m, args, 0, 1));
      if (!args.empty() && args[0].kind != Kind::kNone)
        KILN_RETURN_IF_ERROR(NeedStr(e, m, args[0]));
      const std::string* chars = args.empty() || args[0].kind == Kind::kNone ? nullptr : &args[0].s;
      KILN_RETURN_IF_ERROR(Search(s.size(), chars == nullptr ? 1 : chars->size()));
      return Value::Str(PyStrip(s, chars, m != "rstrip", m != "lstrip"));
    }
    if (m == "upper" || m == "lower") {
      KILN_RETURN_IF_ERROR(Arity(e, m, args, 0, 0));
      return Value::Str(CaseMap(s, m == "upper"));
    }
    if (m == "startswith" || m == "endswith") {
      KILN_RETURN_IF_ERROR(Arity(e, m, args, 1, 1));
      KILN_RETURN_IF_ERROR(NeedStr(e, m, args[0]));
      const std::string& x = args[0].s;
      return Value::Bool(x.size() <= s.size() &&
                         s.compare(m == "startswith" ? 0 : s.size() - x.size(), x.size(), x) == 0);
    }
    if (m == "split") {
      KILN_RETURN_IF_ERROR(Arity(e, m, args, 0, 2));
      if (!args.empty() && args[0].kind != Kind::kNone)
        KILN_RETURN_IF_ERROR(NeedStr(e, m, args[0]));
      if (args.size() == 2 && !args[1].is_int())
        return Error(e.offset, "split() maxsplit must be an int");
      if (!args.empty() && args[0].kind == Kind::kStr && args[0].s.empty()) {
        return Error(e.offset, "empty separator");
      }
      return Split(s, args.empty() || args[0].kind == Kind::kNone ? nullptr : &args[0].s,
                   args.size() == 2 ? args[1].i : -1);
    }
    if (m == "replace") {
      KILN_RETURN_IF_ERROR(Arity(e, m, args, 2, 3));
      KILN_RETURN_IF_ERROR(NeedStr(e, m, args[0]));
      KILN_RETURN_IF_ERROR(NeedStr(e, m, args[1]));
      if (args.size() == 3 && !args[2].is_int())
        return Error(e.offset, "replace() count must be an int");
      return Replace(s, args[0].s, args[1].s, args.size() == 3 ? args[2].i : -1);
    }
    if (m == "join") {
      KILN_RETURN_IF_ERROR(Arity(e, m, args, 1, 1));
      KILN_ASSIGN_OR_RETURN(List items, Iterate(e, args[0]));
      std::string out;
      for (size_t k = 0; k < items.size(); ++k) {
        if (items[k].kind != Kind::kStr) {
          return Error(e.offset, absl::StrCat("sequence item ", k, ": expected str instance, ",
                                              TypeName(items[k]), " found"));
        }
        if (k > 0) out += s;
        out += items[k].s;
        KILN_RETURN_IF_ERROR(Fits(out.size()));
      }
      return Value::Str(std::move(out));
    }
    return Error(e.offset, absl::StrCat("unsupported: method str.", m, "()"));
  }

  // str.split(sep, maxsplit) (CPython's split_whitespace when sep is null).
  absl::StatusOr<Value> Split(const std::string& s, const std::string* sep, int64_t maxsplit) {
    KILN_RETURN_IF_ERROR(Search(s.size(), sep == nullptr ? 1 : sep->size()));
    KILN_RETURN_IF_ERROR(ChargeBytes(s.size()));  // the parts
    List out;
    if (maxsplit < 0) maxsplit = std::numeric_limits<int64_t>::max();
    if (sep != nullptr) {
      size_t i = 0;
      for (size_t j; maxsplit > 0 && (j = s.find(*sep, i)) != std::string::npos; --maxsplit) {
        out.push_back(Value::Str(s.substr(i, j - i)));
        i = j + sep->size();
      }
      out.push_back(Value::Str(s.substr(i)));
    } else {
      size_t i = 0;
      for (; maxsplit > 0; --maxsplit) {
        while (SpaceAt(s, i) > 0) i += SpaceAt(s, i);
        if (i >= s.size()) break;
        const size_t j = i;
        while (i < s.size() && SpaceAt(s, i) == 0) i += DecodeAt(s, i).len;
        out.push_back(Value::Str(s.substr(j, i - j)));
      }
      while (SpaceAt(s, i) > 0) i += SpaceAt(s, i);
      if (i < s.size()) out.push_back(Value::Str(s.substr(i)));
    }
    KILN_RETURN_IF_ERROR(CheckItems(out.size()));
    return Value::MakeList(std::move(out));
  }

  // str.replace(old, new, count); an empty `old` matches before every character and at the end.
  absl::StatusOr<Value> Replace(const std::string& s, const std::string& old,
                                const std::string& with, int64_t count) {
    if (count < 0) count = std::numeric_limits<int64_t>::max();
    KILN_RETURN_IF_ERROR(Search(s.size(), old.size()));
    std::string out;
    size_t i = 0;
    if (old.empty()) {
      for (; i <= s.size() && count > 0; --count) {
        out += with;
        if (i == s.size()) {
          ++i;
          break;
        }
        const size_t len = DecodeAt(s, i).len;
        out.append(s, i, len);
        i += len;
        KILN_RETURN_IF_ERROR(Fits(out.size()));
      }
      if (i < s.size()) out.append(s, i);
    } else {
      for (size_t j; count > 0 && (j = s.find(old, i)) != std::string::npos; --count) {
        out.append(s, i, j - i);
        out += with;
        i = j + old.size();
        KILN_RETURN_IF_ERROR(Fits(out.size()));
      }
      out.append(s, i);
    }
    KILN_RETURN_IF_ERROR(Made(out.size()));
    return Value::Str(std::move(out));
  }

  absl::StatusOr<Value> EvalFilter(const Expr& e) {
    KILN_ASSIGN_OR_RETURN(Value v, Eval(*e.kids[0]));
    KILN_ASSIGN_OR_RETURN(std::vector<Value> args, EvalArgs(e, 1));
    const auto given = [&](size_t k) {
      return !(args[k].kind == Kind::kUndefined && args[k].s.empty());
    };
    const std::string& f = e.name;
    std::string str;
    if (f == "trim" || f == "upper" || f == "lower" || f == "string" || f == "replace") {
      KILN_RETURN_IF_ERROR(AppendStr(v, &str));  // jinja2's soft_str
    }
    if (f == "trim") {
      if (given(0) && args[0].kind != Kind::kNone)
        KILN_RETURN_IF_ERROR(NeedStr(e, "strip", args[0]));
      KILN_RETURN_IF_ERROR(
          Search(str.size(), given(0) && args[0].kind == Kind::kStr ? args[0].s.size() : 1));
      return Value::Str(
          PyStrip(str, given(0) && args[0].kind == Kind::kStr ? &args[0].s : nullptr, true, true));
    }
    if (f == "upper" || f == "lower") return Value::Str(CaseMap(str, f == "upper"));
    if (f == "string") return Value::Str(std::move(str));
    if (f == "safe") return v;
    if (f == "replace") {
      std::string old, with;
      KILN_RETURN_IF_ERROR(AppendStr(args[0], &old));
      KILN_RETURN_IF_ERROR(AppendStr(args[1], &with));
      if (given(2) && args[2].kind != Kind::kNone && !args[2].is_int()) {
        return Error(e.offset, "replace count must be an int");
      }
      return Replace(str, old, with, given(2) && args[2].is_int() ? args[2].i : -1);
    }
    if (f == "length" || f == "count") {
      switch (v.kind) {
        case Kind::kUndefined: return Value::Int(0);
        case Kind::kStr: return Value::Int(static_cast<int64_t>(CpStarts(v.s).size() - 1));
        case Kind::kList:
        case Kind::kLoop: return Value::Int(static_cast<int64_t>(v.list->size()));
        case Kind::kDict: return Value::Int(static_cast<int64_t>(v.dict->size()));
        default:
          return Error(e.offset, absl::StrCat("object of type '", TypeName(v), "' has no len()"));
      }
    }
    if (f == "tojson") {
      std::string out;
      KILN_RETURN_IF_ERROR(Json(e, v, &out, 0));
      return Value::Str(std::move(out));
    }
    if (f == "default" || f == "d") {
      const bool boolean = given(1) && Truthy(args[1]);
      if (v.kind == Kind::kUndefined || (boolean && !Truthy(v)))
        return given(0) ? args[0] : Value::Str("");
      return v;
    }
    if (f == "abs") {
      if (!v.is_int())
        return Error(e.offset, absl::StrCat("bad operand type for abs(): '", TypeName(v), "'"));
      if (v.i == std::numeric_limits<int64_t>::min())
        return Error(e.offset, "integer overflow (64 bits)");
      return Value::Int(v.i < 0 ? -v.i : v.i);
    }
    if (f == "last" && v.kind != Kind::kList && v.kind != Kind::kStr && v.kind != Kind::kDict &&
        v.kind != Kind::kUndefined) {
      return Error(e.offset, absl::StrCat("'", TypeName(v), "' object is not reversible"));
    }
    KILN_ASSIGN_OR_RETURN(List items, Iterate(e, v));  // first, last, join, list
    if (f == "first" || f == "last") {
      if (items.empty()) return Value::Undef(absl::StrCat("No ", f, " item, sequence was empty."));
      return f == "first" ? items.front() : items.back();
    }
    if (f == "list") return Value::MakeList(std::move(items));
    // join
    std::string sep, out;
    if (given(0)) KILN_RETURN_IF_ERROR(AppendStr(args[0], &sep));
    for (size_t k = 0; k < items.size(); ++k) {
      if (k > 0) out += sep;
      KILN_RETURN_IF_ERROR(AppendStr(items[k], &out));
    }
    return Value::Str(std::move(out));
  }

  absl::StatusOr<Value> EvalTest(const Expr& e) {
    KILN_ASSIGN_OR_RETURN(Value v, Eval(*e.kids[0]));
    const std::string& t = e.name;
    const Kind k = v.kind;
    if (t == "defined" || t == "undefined")
      return Value::Bool((k != Kind::kUndefined) == (t == "defined"));
    if (t == "none") return Value::Bool(k == Kind::kNone);
    if (t == "string") return Value::Bool(k == Kind::kStr);
    if (t == "number") return Value::Bool(v.is_int());
    if (t == "integer") return Value::Bool(k == Kind::kInt);
    if (t == "boolean") return Value::Bool(k == Kind::kBool);
    if (t == "true" || t == "false") return Value::Bool(k == Kind::kBool && v.i == (t == "true"));
    if (t == "mapping") return Value::Bool(k == Kind::kDict);
    if (t == "sequence") {
      return Value::Bool(k == Kind::kStr || k == Kind::kList || k == Kind::kDict ||
                         k == Kind::kUndefined);
    }
    if (t == "iterable") {
      return Value::Bool(k == Kind::kStr || k == Kind::kList || k == Kind::kDict ||
                         k == Kind::kUndefined || k == Kind::kLoop);
    }
    // odd, even, divisibleby: value % n
    int64_t n = 2;
    if (t == "divisibleby") {
      KILN_ASSIGN_OR_RETURN(Value d, Eval(*e.kids[1]));
      if (d.kind == Kind::kUndefined) return Error(e.offset, d.s);
      if (!d.is_int()) return Error(e.offset, "divisibleby takes an int");
      n = d.i;
    }
    if (k == Kind::kUndefined) return Error(e.offset, v.s);
    if (!v.is_int())
      return Error(e.offset,
                   absl::StrCat("unsupported operand type(s) for %: '", TypeName(v), "'"));
    if (n == 0) return Error(e.offset, "integer division or modulo by zero");
    const int64_t r = n == -1 ? 0 : FloorMod(v.i, n);
    return Value::Bool(t == "odd" ? r == 1 : r == 0);
  }

  std::vector<absl::flat_hash_map<std::string, Value>> scopes_;
  std::vector<std::shared_ptr<Dict>> namespaces_;
  int64_t steps_ = 0;
};

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  if (source.size() > kMaxSourceBytes) {
    return Invalid(absl::StrCat("chat template: ", source.size(), " bytes, over the ",
                                kMaxSourceBytes, "-byte limit (kMaxSourceBytes)"));
  }
  Lexer lexer(source);
  KILN_ASSIGN_OR_RETURN(std::vector<Token> tokens, lexer.Run());
  Parser parser(lexer, std::move(tokens));
  auto program = std::make_shared<Program>();
  KILN_ASSIGN_OR_RETURN(program->body, parser.Run());
  return ChatTemplate(std::move(program));
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt,
                                                 const std::string& bos_token,
                                                 const std::string& eos_token) const {
  Renderer r(messages, add_generation_prompt, bos_token, eos_token);
  std::string out;
  Renderer::Flow flow = Renderer::Flow::kNormal;
  KILN_RETURN_IF_ERROR(r.Exec(program_->body, &out, &flow));
  return out;
}

}  // namespace kiln::llm
