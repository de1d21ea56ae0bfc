// The chat-template renderer's calls, str methods, filters and tests (chat_template_render.h): jinja2's globals
// (range, namespace, raise_exception), the str, dict and list methods templates call, and the filters and tests of
// the subset, each with jinja2's sandbox limits.
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

Status Renderer::Arity(const Expr& e, const std::string& name, const std::vector<Value>& args,
                       size_t lo, size_t hi) {
  if (!e.kwnames.empty())
    return Error(e.offset, absl::StrCat("unsupported: keyword arguments to ", name));
  if (args.size() < lo || args.size() > hi) {
    return Error(e.offset,
                 absl::StrCat(name, "() takes ", lo, lo == hi ? "" : absl::StrCat(" to ", hi),
                              " arguments (", args.size(), " given)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Renderer::EvalCall(const Expr& e) {
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

absl::StatusOr<Value> Renderer::CallGlobal(const Expr& e, const std::string& name,
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

absl::StatusOr<Value> Renderer::CallStrMethod(const Expr& e, const std::string& s,
                                              const std::string& m,
                                              const std::vector<Value>& args) {
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    KILN_RETURN_IF_ERROR(Arity(e, m, args, 0, 1));
    if (!args.empty() && args[0].kind != Kind::kNone) KILN_RETURN_IF_ERROR(NeedStr(e, m, args[0]));
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
    if (!args.empty() && args[0].kind != Kind::kNone) KILN_RETURN_IF_ERROR(NeedStr(e, m, args[0]));
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

absl::StatusOr<Value> Renderer::Split(const std::string& s, const std::string* sep,
                                      int64_t maxsplit) {
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

absl::StatusOr<Value> Renderer::Replace(const std::string& s, const std::string& old,
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

absl::StatusOr<Value> Renderer::EvalFilter(const Expr& e) {
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
    if (given(0) && args[0].kind != Kind::kNone) KILN_RETURN_IF_ERROR(NeedStr(e, "strip", args[0]));
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
      case Kind::kUndefined:
        return Value::Int(0);
      case Kind::kStr:
        return Value::Int(static_cast<int64_t>(CpStarts(v.s).size() - 1));
      case Kind::kList:
      case Kind::kLoop:
        return Value::Int(static_cast<int64_t>(v.list->size()));
      case Kind::kDict:
        return Value::Int(static_cast<int64_t>(v.dict->size()));
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

absl::StatusOr<Value> Renderer::EvalTest(const Expr& e) {
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
    return Error(e.offset, absl::StrCat("unsupported operand type(s) for %: '", TypeName(v), "'"));
  if (n == 0) return Error(e.offset, "integer division or modulo by zero");
  const int64_t r = n == -1 ? 0 : FloorMod(v.i, n);
  return Value::Bool(t == "odd" ? r == 1 : r == 0);
}

}  // namespace kiln::llm::jinja
