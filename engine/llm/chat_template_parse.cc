// The chat template's parser (chat_template.h): jinja2 3.1's parser.py (its grammar and precedence) over the
// tokens of chat_template_lex.h, for the subset chat_template.h lists.
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
#include "engine/llm/chat_template_lex.h"

namespace kiln::llm::jinja {
namespace {

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
