// The chat-template renderer (chat_template.h): a tree walk over the syntax tree of chat_template_internal.h with
// Python-like values, as jinja2 3.1's runtime.py and sandbox.py. Statements, expressions and values are in
// chat_template.cc; calls, str methods, filters and tests in chat_template_builtins.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/llm/chat_template.h"
#include "engine/llm/chat_template_internal.h"

namespace kiln::llm::jinja {

inline constexpr std::string_view kStrMethods[] = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};
inline constexpr std::string_view kDictMethods[] = {"clear",      "copy",   "fromkeys", "get",
                                                    "items",      "keys",   "pop",      "popitem",
                                                    "setdefault", "update", "values"};
inline constexpr std::string_view kListMethods[] = {"append", "clear",   "copy",   "count",
                                                    "extend", "index",   "insert", "pop",
                                                    "remove", "reverse", "sort"};
template <size_t N>
bool In(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

// jinja2's message for a missing attribute or item of v (Undefined._undefined_message).
inline std::string NoAttribute(const Value& v, const std::string& name) {
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

  Status Exec(const std::vector<Stmt>& body, std::string* out, Flow* flow);

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

  Status AppendStr(const Value& v, std::string* out);

  Status Repr(const Value& v, std::string* out, int depth);

  // json.dumps(v, ensure_ascii=False): transformers' tojson.
  Status Json(const Expr& e, const Value& v, std::string* out, int depth);

  absl::StatusOr<bool> Equal(const Value& a, const Value& b, int depth);

  // a <op> b for < > <= >=: ints, strs (code point order) and lists (lexicographic), as Python.
  absl::StatusOr<bool> Order(const Expr& e, const std::string& op, const Value& a, const Value& b,
                             int depth);

  absl::StatusOr<bool> Contains(const Expr& e, const Value& item, const Value& in);

  // The items `for` visits: a list's items, a str's characters, a dict's keys; none for undefined.
  absl::StatusOr<List> Iterate(const Expr& e, const Value& v);

  Status ExecFor(const Stmt& s, std::string* out);

  // ** expressions **

  absl::StatusOr<Value> Eval(const Expr& e);

  absl::StatusOr<Value> EvalNode(const Expr& e);

  absl::StatusOr<Value> GetAttr(const Expr& e, const Value& v, const std::string& name);

  absl::StatusOr<Value> LoopAttr(const Expr& e, const Value& loop, const std::string& name);

  // obj[key] as jinja2's sandbox getitem: a missing key, an index out of range or a key of the
  // wrong type is undefined; a str key falls back to the attribute.
  absl::StatusOr<Value> GetItem(const Expr& e, const Value& v, const Value& key);

  absl::StatusOr<Value> EvalSlice(const Expr& e);

  absl::StatusOr<Value> BinOp(const Expr& e, const std::string& op, Value a, const Value& b);

  // ** calls, filters, tests **

  absl::StatusOr<std::vector<Value>> EvalArgs(const Expr& e, size_t first);

  // Checks a call's argument count; a str argument is required where `need_str`.
  Status Arity(const Expr& e, const std::string& name, const std::vector<Value>& args, size_t lo,
               size_t hi);
  Status NeedStr(const Expr& e, const std::string& name, const Value& v);

  absl::StatusOr<Value> EvalCall(const Expr& e);

  absl::StatusOr<Value> CallGlobal(const Expr& e, const std::string& name, std::vector<Value> args);

  absl::StatusOr<Value> CallStrMethod(const Expr& e, const std::string& s, const std::string& m,
                                      const std::vector<Value>& args);

  // str.split(sep, maxsplit) (CPython's split_whitespace when sep is null).
  absl::StatusOr<Value> Split(const std::string& s, const std::string* sep, int64_t maxsplit);

  // str.replace(old, new, count); an empty `old` matches before every character and at the end.
  absl::StatusOr<Value> Replace(const std::string& s, const std::string& old,
                                const std::string& with, int64_t count);

  absl::StatusOr<Value> EvalFilter(const Expr& e);

  absl::StatusOr<Value> EvalTest(const Expr& e);

  std::vector<absl::flat_hash_map<std::string, Value>> scopes_;
  std::vector<std::shared_ptr<Dict>> namespaces_;
  int64_t steps_ = 0;
};

}  // namespace kiln::llm::jinja
