// The Jinja2 chat-template subset (chat_template.h): the renderer's statements, expressions and values
// (chat_template_render.h; jinja2 3.1's runtime.py and sandbox.py); the lexer and parser are in
// chat_template_parse.cc, calls, filters and tests in chat_template_builtins.cc, the values and the syntax tree in
// chat_template_internal.h.
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
#include "engine/llm/chat_template_render.h"

namespace kiln::llm::jinja {

Status Renderer::Exec(const std::vector<Stmt>& body, std::string* out, Flow* flow) {
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

Status Renderer::AppendStr(const Value& v, std::string* out) {
  if (v.kind == Kind::kStr) {
    KILN_RETURN_IF_ERROR(Fits(out->size() + v.s.size()));
    KILN_RETURN_IF_ERROR(ChargeBytes(v.s.size()));
    out->append(v.s);
    return absl::OkStatus();
  }
  if (v.kind == Kind::kUndefined) return absl::OkStatus();
  return Repr(v, out, 0);
}

Status Renderer::Repr(const Value& v, std::string* out, int depth) {
  if (depth > kMaxValueDepth) return Invalid("chat template: a value nested deeper than 64 levels");
  KILN_RETURN_IF_ERROR(Fits(out->size()));
  KILN_RETURN_IF_ERROR(Charge(1));
  KILN_RETURN_IF_ERROR(ChargeBytes(v.s.size()));
  switch (v.kind) {
    case Kind::kUndefined:
      out->append("Undefined");
      break;
    case Kind::kNone:
      out->append("None");
      break;
    case Kind::kBool:
      out->append(v.i ? "True" : "False");
      break;
    case Kind::kInt:
      absl::StrAppend(out, v.i);
      break;
    case Kind::kStr:
      ReprStr(v.s, out);
      break;
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

Status Renderer::Json(const Expr& e, const Value& v, std::string* out, int depth) {
  if (depth > kMaxValueDepth) return Error(e.offset, "a value nested deeper than 64 levels");
  KILN_RETURN_IF_ERROR(Fits(out->size()));
  KILN_RETURN_IF_ERROR(Charge(1));
  KILN_RETURN_IF_ERROR(ChargeBytes(v.s.size()));
  switch (v.kind) {
    case Kind::kNone:
      out->append("null");
      break;
    case Kind::kBool:
      out->append(v.i ? "true" : "false");
      break;
    case Kind::kInt:
      absl::StrAppend(out, v.i);
      break;
    case Kind::kStr:
      JsonStr(v.s, out);
      break;
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

absl::StatusOr<bool> Renderer::Equal(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) return Invalid("chat template: a value nested deeper than 64 levels");
  KILN_RETURN_IF_ERROR(Charge(1));
  if (a.is_int() && b.is_int()) return a.i == b.i;
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
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

absl::StatusOr<bool> Renderer::Order(const Expr& e, const std::string& op, const Value& a,
                                     const Value& b, int depth) {
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

absl::StatusOr<bool> Renderer::Contains(const Expr& e, const Value& item, const Value& in) {
  switch (in.kind) {
    case Kind::kUndefined:
      return false;  // iterates as empty
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
      return Error(e.offset, absl::StrCat("argument of type '", TypeName(in), "' is not iterable"));
  }
}

absl::StatusOr<List> Renderer::Iterate(const Expr& e, const Value& v) {
  List items;
  switch (v.kind) {
    case Kind::kUndefined:
      break;
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
    default:
      return Error(e.offset, absl::StrCat("'", TypeName(v), "' object is not iterable"));
  }
  for (const Value& x : items) {
    if (x.kind == Kind::kStr) KILN_RETURN_IF_ERROR(Made(x.s.size()));
  }
  return items;
}

Status Renderer::ExecFor(const Stmt& s, std::string* out) {
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

absl::StatusOr<Value> Renderer::Eval(const Expr& e) {
  KILN_RETURN_IF_ERROR(Charge(1));
  KILN_ASSIGN_OR_RETURN(Value v, EvalNode(e));
  if (v.kind == Kind::kStr)
    KILN_RETURN_IF_ERROR(Made(v.s.size()));  // every copy of a string counts
  return v;
}

absl::StatusOr<Value> Renderer::EvalNode(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
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
    case ExprKind::kSlice:
      return EvalSlice(e);
    case ExprKind::kCall:
      return EvalCall(e);
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

absl::StatusOr<Value> Renderer::GetAttr(const Expr& e, const Value& v, const std::string& name) {
  switch (v.kind) {
    case Kind::kUndefined:
      return Error(e.offset, v.s);
    case Kind::kDict:
    case Kind::kNamespace:
      if (v.kind == Kind::kDict && In(kDictMethods, name)) {
        return Error(e.offset,
                     absl::StrCat("unsupported: dict method '", name, "' used without a call"));
      }
      if (const Value* x = Find(*v.dict, name)) return *x;
      break;
    case Kind::kLoop:
      return LoopAttr(e, v, name);
    case Kind::kStr:
    case Kind::kList:
      if (v.kind == Kind::kStr ? In(kStrMethods, name) : In(kListMethods, name)) {
        return Error(e.offset,
                     absl::StrCat("unsupported: method '", name, "' used without a call"));
      }
      break;
    default:
      break;
  }
  return Value::Undef(NoAttribute(v, name));
}

absl::StatusOr<Value> Renderer::LoopAttr(const Expr& e, const Value& loop,
                                         const std::string& name) {
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

absl::StatusOr<Value> Renderer::GetItem(const Expr& e, const Value& v, const Value& key) {
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

absl::StatusOr<Value> Renderer::EvalSlice(const Expr& e) {
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

absl::StatusOr<Value> Renderer::BinOp(const Expr& e, const std::string& op, Value a,
                                      const Value& b) {
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

absl::StatusOr<std::vector<Value>> Renderer::EvalArgs(const Expr& e, size_t first) {
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

Status Renderer::NeedStr(const Expr& e, const std::string& name, const Value& v) {
  if (v.kind == Kind::kStr) return absl::OkStatus();
  if (v.kind == Kind::kUndefined) return Error(e.offset, v.s.empty() ? "undefined argument" : v.s);
  return Error(e.offset, absl::StrCat(name, "() argument must be str, not ", TypeName(v)));
}

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
