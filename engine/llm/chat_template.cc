// The Jinja2 chat-template subset (chat_template.h): the tree-walking renderer over Python-like values
// (jinja2 3.1's runtime.py and sandbox.py); the lexer and parser are in chat_template_parse.cc, the values and the
// syntax tree in chat_template_internal.h.
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
#include "engine/llm/chat_template_internal.h"

namespace kiln::llm::jinja {
namespace {

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
}  // namespace kiln::llm::jinja

namespace kiln::llm {

using jinja::Invalid;
using jinja::Renderer;

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  if (source.size() > kMaxSourceBytes) {
    return Invalid(absl::StrCat("chat template: ", source.size(), " bytes, over the ",
                                kMaxSourceBytes, "-byte limit (kMaxSourceBytes)"));
  }
  auto program = std::make_shared<Program>();
  KILN_ASSIGN_OR_RETURN(program->body, jinja::ParseSource(source));
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
