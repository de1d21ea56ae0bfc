// The chat template's lexer (chat_template_lex.h): jinja2 3.1's lexer.py with trim_blocks and lstrip_blocks.
#include "engine/llm/chat_template_lex.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/llm/chat_template_internal.h"

namespace kiln::llm::jinja {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
int HexValue(char c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string Describe(const Token& t) {
  switch (t.kind) {
    case Tok::kText:
      return "text";
    case Tok::kVarBegin:
      return "'{{'";
    case Tok::kVarEnd:
      return "'}}'";
    case Tok::kBlockBegin:
      return "'{%'";
    case Tok::kBlockEnd:
      return "'%}'";
    case Tok::kStr:
      return "string literal";
    case Tok::kInt:
      return "integer";
    case Tok::kEnd:
      return "end of template";
    default:
      return absl::StrCat("'", t.text, "'");
  }
}

absl::StatusOr<std::vector<Token>> Lexer::Run() {
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

size_t Lexer::RStripSpace(size_t begin, size_t end) const {
  const std::vector<size_t> cps = CpStarts(std::string_view(src_).substr(begin, end - begin));
  size_t k = cps.size() - 1;
  while (k > 0 && SpaceAt(src_, begin + cps[k - 1]) == cps[k] - cps[k - 1]) --k;
  return begin + cps[k];
}

std::string_view Lexer::LStripBlock(size_t begin, size_t tag) const {
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

absl::StatusOr<size_t> Lexer::SkipComment(size_t open, size_t p) const {
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

absl::StatusOr<size_t> Lexer::LexTag(char kind, size_t open, size_t p) {
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

size_t Lexer::NameCharAt(size_t p, bool start) const {
  if (p >= src_.size()) return 0;
  const char c = src_[p];
  if (static_cast<unsigned char>(c) < 0x80) return (start ? IsNameStart(c) : IsNameChar(c)) ? 1 : 0;
  const Cp cp = DecodeAt(src_, p);
  const bool ok =
      cp.cp != 0xFFFD && u_hasBinaryProperty(static_cast<UChar32>(cp.cp),
                                             start ? UCHAR_XID_START : UCHAR_XID_CONTINUE);
  return ok ? cp.len : 0;
}

absl::StatusOr<size_t> Lexer::LexInt(size_t p) {
  const std::string_view s = src_;
  size_t q = p + 1;
  while (q < s.size() && (IsDigit(s[q]) || (s[q] == '_' && q + 1 < s.size() && IsDigit(s[q + 1]))))
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

absl::StatusOr<std::string> Lexer::Unescape(std::string_view raw, size_t at) const {
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
      case '\n':
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
        hex_digits = 2;
        break;
      case 'u':
        hex_digits = 4;
        break;
      case 'U':
        hex_digits = 8;
        break;
      case 'N':
        return Error(at, "\\N{...} escapes are not supported");
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

}  // namespace kiln::llm::jinja
