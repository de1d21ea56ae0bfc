#include "engine/uop/parser.h"

#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/dtype/dtype.h"
#include "engine/uop/arg.h"
#include "engine/uop/ops.h"

namespace kiln {

namespace {

constexpr size_t kMaxSnippet = 40;

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// A token quoted for an error message: escaped, and cut to kMaxSnippet bytes.
std::string Snippet(std::string_view s) {
  bool cut = s.size() > kMaxSnippet;
  if (cut) s = s.substr(0, kMaxSnippet);
  return absl::StrCat("'", absl::CHexEscape(absl::string_view(s.data(), s.size())),
                      cut ? "...'" : "'");
}

std::optional<AxisType> ParseAxisType(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(AxisType::kThread); ++i) {
    AxisType t = static_cast<AxisType>(i);
    if (AxisTypeName(t) == name) return t;
  }
  return std::nullopt;
}

// A cursor over one line of input. Every method that fails returns InvalidArgument "line N: ...".
class LineLexer {
 public:
  LineLexer(std::string_view line, size_t line_no) : s_(line), line_no_(line_no) {}

  absl::Status Error(std::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", line_no_, ": ", std::string(msg)));
  }

  // Skips blanks; a '#' ends the line (comment).
  void SkipWs() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        pos_ = s_.size();
      } else {
        break;
      }
    }
  }
  bool AtEnd() {
    SkipWs();
    return pos_ >= s_.size();
  }
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  std::string_view Rest() const { return s_.substr(pos_); }

  bool TryConsume(char c) {
    SkipWs();
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  absl::Status Expect(char c, std::string_view context) {
    if (TryConsume(c)) return absl::OkStatus();
    return Error(absl::StrCat("expected '", std::string(1, c), "' ", std::string(context),
                              ", found ", AtEnd() ? std::string("end of line") : Snippet(Rest())));
  }

  // [A-Za-z0-9_]* at the cursor (no blank skipping).
  std::string_view Word() {
    size_t start = pos_;
    while (pos_ < s_.size() && IsWordChar(s_[pos_])) ++pos_;
    return s_.substr(start, pos_ - start);
  }

  // "tag=" follows (after blanks).
  bool PeekTag() {
    SkipWs();
    return Rest().substr(0, 4) == "tag=";
  }

  absl::StatusOr<std::string> Ref() {
    SkipWs();
    if (Peek() != '%') {
      return Error(absl::StrCat("expected a reference '%name', found ",
                                AtEnd() ? std::string("end of line") : Snippet(Rest())));
    }
    ++pos_;
    std::string_view w = Word();
    if (w.empty()) return Error("empty reference name after '%'");
    return std::string(w);
  }

  absl::StatusOr<Op> OpTok(std::string_view context) {
    SkipWs();
    std::string_view w = Word();
    if (w.empty()) {
      return Error(absl::StrCat("expected an op name ", std::string(context), ", found ",
                                AtEnd() ? std::string("end of line") : Snippet(Rest())));
    }
    std::optional<Op> op = ParseOp(w);
    if (!op) return Error(absl::StrCat("unknown op ", Snippet(w)));
    return *op;
  }

  // A dtype as DType::Name() spells it: word ('.' word ['(' word ')'])*.
  absl::StatusOr<DType> DTypeTok() {
    SkipWs();
    size_t start = pos_;
    if (Word().empty()) {
      return Error(absl::StrCat("expected a dtype, found ",
                                AtEnd() ? std::string("end of line") : Snippet(Rest())));
    }
    while (Peek() == '.') {
      ++pos_;
      if (Word().empty()) break;  // ParseDType rejects the dangling '.'
      if (Peek() == '(') {
        ++pos_;
        Word();
        if (Peek() == ')') ++pos_;
      }
    }
    std::string_view name = s_.substr(start, pos_ - start);
    std::optional<DType> d = ParseDType(name);
    if (!d) return Error(absl::StrCat("unknown dtype ", Snippet(name)));
    return *d;
  }

  // An int64; with `allow_unsigned`, also 2^63 .. 2^64-1 as the uint64 bit pattern.
  absl::StatusOr<int64_t> Int(bool allow_unsigned) {
    SkipWs();
    std::string_view tok = NumberToken();
    return ParseIntToken(tok, allow_unsigned);
  }

  // Quoted string with \" \\ \n \t \r \xNN escapes.
  absl::StatusOr<std::string> String() {
    SkipWs();
    if (Peek() != '"') return Error("expected a string");
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return Error("unterminated string");
      char e = s_[pos_++];
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'x': {
          int v = 0;
          for (int i = 0; i < 2; ++i) {
            char h = Peek();
            int d = IsDigit(h)               ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
            if (d < 0) return Error("bad \\x escape in string: two hex digits required");
            v = v * 16 + d;
            ++pos_;
          }
          out.push_back(static_cast<char>(v));
          break;
        }
        default:
          return Error(absl::StrCat("bad escape ", Snippet(std::string_view(&s_[pos_ - 2], 2)),
                                    " in string"));
      }
    }
  }

  // "(" [int ("," int)*] ")".
  absl::StatusOr<IntVec> IntVecTok() {
    KILN_RETURN_IF_ERROR(Expect('(', "to open an int vector"));
    IntVec v;
    if (TryConsume(')')) return v;
    while (true) {
      if (v.size() >= kMaxParseIntVecLen)
        return Error(absl::StrCat("int vector longer than the limit of ", kMaxParseIntVecLen));
      KILN_ASSIGN_OR_RETURN(int64_t x, Int(false));
      v.push_back(x);
      if (TryConsume(',')) continue;
      KILN_RETURN_IF_ERROR(Expect(')', "to close the int vector"));
      return v;
    }
  }

  absl::StatusOr<Arg> ArgTok(bool allow_unsigned) {
    SkipWs();
    char c = Peek();
    if (c == '"') {
      KILN_ASSIGN_OR_RETURN(std::string s, String());
      return Arg(std::move(s));
    }
    if (c == '(') {
      KILN_ASSIGN_OR_RETURN(IntVec v, IntVecTok());
      return Arg(std::move(v));
    }
    if (c == '-' || IsDigit(c)) return NumberArg(allow_unsigned);
    size_t start = pos_;
    std::string_view w = Word();
    if (w.empty()) return Error(absl::StrCat("malformed arg ", Snippet(Rest())));
    if (w == "true") return Arg(true);
    if (w == "false") return Arg(false);
    if (w == "nan" || w == "inf") {
      pos_ = start;
      return NumberArg(false);
    }
    if (w == "axis" || w == "var" || w == "reduce") {
      KILN_RETURN_IF_ERROR(Expect('(', absl::StrCat("after '", std::string(w), "'")));
      if (w == "axis") {
        AxisArg a;
        KILN_ASSIGN_OR_RETURN(a.id, Int(false));
        KILN_RETURN_IF_ERROR(Expect(',', "in axis(id, TYPE)"));
        SkipWs();
        std::string_view t = Word();
        std::optional<AxisType> at = ParseAxisType(t);
        if (!at) return Error(absl::StrCat("unknown axis type ", Snippet(t)));
        a.type = *at;
        KILN_RETURN_IF_ERROR(Expect(')', "to close axis(...)"));
        return Arg(a);
      }
      if (w == "var") {
        VarArg v;
        KILN_ASSIGN_OR_RETURN(v.name, String());
        KILN_RETURN_IF_ERROR(Expect(',', "in var(name, min, max)"));
        KILN_ASSIGN_OR_RETURN(v.min, Int(false));
        KILN_RETURN_IF_ERROR(Expect(',', "in var(name, min, max)"));
        KILN_ASSIGN_OR_RETURN(v.max, Int(false));
        KILN_RETURN_IF_ERROR(Expect(')', "to close var(...)"));
        return Arg(std::move(v));
      }
      ReduceArg r;
      KILN_ASSIGN_OR_RETURN(r.op, OpTok("in reduce(OP, axes)"));
      KILN_RETURN_IF_ERROR(Expect(',', "in reduce(OP, axes)"));
      KILN_ASSIGN_OR_RETURN(r.axes, IntVecTok());
      KILN_RETURN_IF_ERROR(Expect(')', "to close reduce(...)"));
      return Arg(std::move(r));
    }
    std::optional<Op> op = ParseOp(w);
    if (!op) return Error(absl::StrCat("malformed arg: unknown word ", Snippet(w)));
    return Arg(*op);
  }

 private:
  // '-'? then word chars and '.', with '+'/'-' allowed right after an exponent 'e'/'E'.
  std::string_view NumberToken() {
    size_t start = pos_;
    if (Peek() == '-') ++pos_;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      char prev = pos_ > start ? s_[pos_ - 1] : '\0';
      if (IsWordChar(c) || c == '.' || ((c == '+' || c == '-') && (prev == 'e' || prev == 'E'))) {
        ++pos_;
      } else {
        break;
      }
    }
    return s_.substr(start, pos_ - start);
  }

  absl::StatusOr<int64_t> ParseIntToken(std::string_view tok, bool allow_unsigned) const {
    bool neg = !tok.empty() && tok[0] == '-';
    std::string_view body = tok.substr(neg ? 1 : 0);
    if (body.empty())
      return Error(absl::StrCat("expected an integer, found ",
                                tok.empty() ? std::string("nothing") : Snippet(tok)));
    uint64_t mag = 0;
    for (char c : body) {
      if (!IsDigit(c)) return Error(absl::StrCat("malformed integer ", Snippet(tok)));
      uint64_t d = static_cast<uint64_t>(c - '0');
      if (mag > (std::numeric_limits<uint64_t>::max() - d) / 10)
        return Error(absl::StrCat("integer overflow in ", Snippet(tok)));
      mag = mag * 10 + d;
    }
    constexpr uint64_t kMaxPos = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (neg) {
      if (mag > kMaxPos + 1) return Error(absl::StrCat("integer overflow in ", Snippet(tok)));
      return static_cast<int64_t>(0 - mag);  // two's complement; mag == 2^63 gives INT64_MIN
    }
    if (mag > kMaxPos && !allow_unsigned)
      return Error(absl::StrCat("integer overflow in ", Snippet(tok), " (int64 expected)"));
    return static_cast<int64_t>(mag);
  }

  // An int (all digits) or a float (nan, inf, or from_chars general syntax).
  absl::StatusOr<Arg> NumberArg(bool allow_unsigned) {
    std::string_view tok = NumberToken();
    bool neg = !tok.empty() && tok[0] == '-';
    std::string_view body = tok.substr(neg ? 1 : 0);
    bool all_digits = !body.empty();
    for (char c : body) all_digits = all_digits && IsDigit(c);
    if (all_digits) {
      KILN_ASSIGN_OR_RETURN(int64_t v, ParseIntToken(tok, allow_unsigned));
      return Arg(v);
    }
    if (body == "inf")
      return Arg(ConstFloat(neg ? -std::numeric_limits<double>::infinity()
                                : std::numeric_limits<double>::infinity()));
    if (body == "nan") return Arg(ConstFloat(std::numeric_limits<double>::quiet_NaN()));
    // Only decimal floats: digits first, so from_chars' own "inf"/"nan" spellings never reach it.
    if (body.empty() || !(IsDigit(body[0]) || body[0] == '.'))
      return Error(absl::StrCat("malformed number ", Snippet(tok)));
    double v = 0;
    auto [end, ec] =
        std::from_chars(tok.data(), tok.data() + tok.size(), v, std::chars_format::general);
    if (ec == std::errc::result_out_of_range)
      return Error(absl::StrCat("float out of range ", Snippet(tok)));
    if (ec != std::errc() || end != tok.data() + tok.size())
      return Error(absl::StrCat("malformed number ", Snippet(tok)));
    return Arg(ConstFloat(v));
  }

  std::string_view s_;
  size_t line_no_;
  size_t pos_ = 0;
};

// Rank limits on the args that describe dims (a shape, a permutation, per-dim pairs, axes).
absl::Status CheckArgLimits(Op op, const Arg& arg, const LineLexer& lx) {
  size_t limit = 0, n = 0;
  if (const IntVec* v = std::get_if<IntVec>(&arg)) {
    n = v->size();
    if (op == Op::RESHAPE || op == Op::EXPAND || op == Op::PERMUTE || op == Op::FLIP)
      limit = kMaxParseRank;
    if (op == Op::PAD || op == Op::SHRINK) limit = 2 * kMaxParseRank;
  } else if (const ReduceArg* r = std::get_if<ReduceArg>(&arg)) {
    n = r->axes.size();
    limit = kMaxParseRank;
  }
  if (limit != 0 && n > limit) {
    return lx.Error(absl::StrCat(std::string(OpName(op)), ": arg has ", n,
                                 " values, over the rank limit (", kMaxParseRank, " dims)"));
  }
  return absl::OkStatus();
}

struct Def {
  UOpPtr node;
  size_t line;
};

class GraphParser {
 public:
  absl::StatusOr<std::vector<UOpPtr>> Parse(std::string_view text) {
    size_t line_no = 0, start = 0;
    while (true) {
      size_t nl = text.find('\n', start);
      size_t end = nl == std::string_view::npos ? text.size() : nl;
      ++line_no;
      std::string_view line = text.substr(start, end - start);
      LineLexer lx(line, line_no);
      if (line.size() > kMaxParseLineBytes)
        return lx.Error(absl::StrCat("line too long (", line.size(), " bytes; limit ",
                                     kMaxParseLineBytes, ")"));
      if (!lx.AtEnd()) {
        if (have_roots_)
          return lx.Error(
              absl::StrCat("trailing text after the 'roots' line: ", Snippet(lx.Rest())));
        if (lx.Peek() == '%') {
          KILN_RETURN_IF_ERROR(ParseNode(lx, line_no));
        } else if (lx.Word() == "roots") {
          KILN_RETURN_IF_ERROR(ParseRoots(lx));
        } else {
          return lx.Error(
              absl::StrCat("expected '%name = OP ...' or 'roots', found ", Snippet(line)));
        }
      }
      if (nl == std::string_view::npos) break;
      start = nl + 1;
    }
    if (!have_roots_) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_no, ": missing 'roots' line at the end of the graph"));
    }
    return std::move(roots_);
  }

 private:
  absl::StatusOr<UOpPtr> Lookup(const std::string& name, const LineLexer& lx) const {
    auto it = defs_.find(name);
    if (it == defs_.end())
      return lx.Error(
          absl::StrCat("dangling reference %", name, " (not defined on an earlier line)"));
    return it->second.node;
  }

  absl::Status ParseNode(LineLexer& lx, size_t line_no) {
    KILN_ASSIGN_OR_RETURN(std::string name, lx.Ref());
    if (auto it = defs_.find(name); it != defs_.end()) {
      return lx.Error(absl::StrCat("duplicate definition of %", name, " (first defined on line ",
                                   it->second.line, ")"));
    }
    KILN_RETURN_IF_ERROR(lx.Expect('=', absl::StrCat("after %", name)));
    KILN_ASSIGN_OR_RETURN(Op op, lx.OpTok("after '='"));
    if (IsInternalOnly(op)) {
      return lx.Error(absl::StrCat("op ", std::string(OpName(op)),
                                   " is internal only and cannot be parsed from text"));
    }
    KILN_ASSIGN_OR_RETURN(DType dtype, lx.DTypeTok());
    KILN_RETURN_IF_ERROR(lx.Expect('(', "to open the source list"));
    std::vector<UOpPtr> src;
    if (!lx.TryConsume(')')) {
      while (true) {
        KILN_ASSIGN_OR_RETURN(std::string ref, lx.Ref());
        KILN_ASSIGN_OR_RETURN(UOpPtr s, Lookup(ref, lx));
        src.push_back(std::move(s));
        if (lx.TryConsume(',')) continue;
        KILN_RETURN_IF_ERROR(lx.Expect(')', "or ',' in the source list"));
        break;
      }
    }
    Arg arg;
    if (!lx.AtEnd() && !lx.PeekTag()) {
      KILN_ASSIGN_OR_RETURN(arg, lx.ArgTok(op == Op::CONST && dtype.IsUnsigned()));
    }
    int64_t tag = 0;
    if (lx.PeekTag()) {
      lx.Word();
      KILN_RETURN_IF_ERROR(lx.Expect('=', "after 'tag'"));
      KILN_ASSIGN_OR_RETURN(tag, lx.Int(false));
    }
    if (!lx.AtEnd()) return lx.Error(absl::StrCat("unexpected trailing text ", Snippet(lx.Rest())));
    KILN_RETURN_IF_ERROR(CheckArgLimits(op, arg, lx));
    absl::StatusOr<UOpPtr> node = UOp::Create(op, dtype, src, std::move(arg), tag);
    if (!node.ok()) return lx.Error(std::string(node.status().message()));
    defs_.emplace(std::move(name), Def{*std::move(node), line_no});
    return absl::OkStatus();
  }

  absl::Status ParseRoots(LineLexer& lx) {
    have_roots_ = true;
    if (lx.AtEnd()) return absl::OkStatus();
    while (true) {
      KILN_ASSIGN_OR_RETURN(std::string ref, lx.Ref());
      KILN_ASSIGN_OR_RETURN(UOpPtr r, Lookup(ref, lx));
      roots_.push_back(std::move(r));
      if (lx.TryConsume(',')) continue;
      if (lx.AtEnd()) return absl::OkStatus();
      return lx.Error(
          absl::StrCat("unexpected trailing text ", Snippet(lx.Rest()), " in the roots line"));
    }
  }

  absl::flat_hash_map<std::string, Def> defs_;
  std::vector<UOpPtr> roots_;
  bool have_roots_ = false;
};

}  // namespace

absl::StatusOr<std::vector<UOpPtr>> ParseGraph(std::string_view text) {
  return GraphParser().Parse(text);
}

absl::StatusOr<UOpPtr> ParseGraphSingle(std::string_view text) {
  KILN_ASSIGN_OR_RETURN(std::vector<UOpPtr> roots, ParseGraph(text));
  if (roots.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected exactly one root, got ", roots.size()));
  }
  return std::move(roots[0]);
}

}  // namespace kiln
