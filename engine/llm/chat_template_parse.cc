// The chat template's lexer and parser (chat_template.h): jinja2 3.1's lexer.py (whitespace handling with
// trim_blocks and lstrip_blocks) and parser.py (its grammar and precedence), for the subset chat_template.h lists.
#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/llm/chat_template_internal.h"

namespace kiln::llm::jinja {
namespace {

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

}  // namespace

absl::StatusOr<std::vector<Stmt>> ParseSource(std::string_view source) {
  Lexer lexer(source);
  KILN_ASSIGN_OR_RETURN(std::vector<Token> tokens, lexer.Run());
  Parser parser(lexer, std::move(tokens));
  return parser.Run();
}

}  // namespace kiln::llm::jinja
