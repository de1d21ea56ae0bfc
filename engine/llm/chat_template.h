// ChatTemplate: the Jinja2 subset that LLM chat templates are written in (the GGUF key
// `tokenizer.chat_template`), rendered as Hugging Face `transformers.apply_chat_template` renders
// it: jinja2's ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
// loopcontrols extension, a `raise_exception(msg)` global, and `tojson` as
// json.dumps(x, ensure_ascii=False).
//
// Variables: `messages` (a list of {"role", "content"} dicts, keys in that order),
// `add_generation_prompt`, `bos_token`, `eos_token`, and `tools` and `documents` as none
// (transformers passes both, so `tools is not none` is false). Values are Python's: undefined,
// none, bool, int (64 bits; overflow is an error), str (UTF-8; length, indexing and slicing count
// code points), list, dict (str keys, insertion order) and jinja2's namespace. Printing, `~`, `==`,
// `<`, `in`, `+`, truthiness and repr() (a printed list shows its items' repr) follow Python;
// upper() and lower() are ICU's full case mappings.
//
// The subset:
//   Text, {{ expr }}, {# comment #}; `-` and `+` whitespace control on every tag; trim_blocks (the
//     newline right after %} or #} is dropped) and lstrip_blocks (whitespace between the start of a
//     line and {% or {# is dropped); \r\n and \r read as \n and one trailing newline dropped.
//   {% if %}{% elif %}{% else %}{% endif %}; {% for x in e [if cond] %}...{% else %}...{% endfor %}
//     with loop.index, index0, revindex, revindex0, first, last, length, previtem, nextitem;
//     {% break %}, {% continue %}; {% set x = e %}, {% set ns.attr = e %},
//     {% set x %}...{% endset %}.
//     As in jinja2 a loop body is a scope, fresh at every iteration (what a `set` in it assigns is
//     gone at the next iteration and after the loop); `if` is no scope.
//   Expressions: 'str' and "str" literals (Python escapes; adjacent literals concatenate),
//     decimal ints, true/false/none (and True/False/None), [lists], {dicts}, names (Python
//     identifiers), a.b, a.0, a[e], a[i:j:k], calls; + - * // % ~, unary - and +,
//     == != < > <= >= (chained), in, not in, and, or, not, `a if c else b` (without else:
//     undefined), parentheses. As in jinja2, `{% if %}` and `{% elif %}` take no `a if c else b`.
//   Tests: defined undefined none string number integer boolean mapping sequence iterable true
//     false odd even divisibleby(n), and `is not`.
//   Filters: trim([chars]) length count upper lower tojson string first last join([sep])
//     default/d(value[, boolean]) replace(old, new[, count]) list safe abs.
//   Methods: str strip lstrip rstrip([chars]) upper lower startswith endswith split([sep[, max]])
//     replace join; dict get(key[, default]).
//   Globals: raise_exception(msg), namespace(dict, k=v, ...), range(...) (a list, printed as one).
//   Undefined is jinja2's default: it prints as "", is falsy, iterates as empty, has length 0 and
//   equals only undefined; an attribute, item, call or arithmetic of it is an error. A missing dict
//   key or list index is undefined.
// Outside the subset (Parse is InvalidArgument naming it): floats, `/` and `**`, tuples, macros,
// blocks, include/import, raw, call and filter blocks, `for a, b in`, recursive loops, other
// filters and tests. Other methods, and printf-style `%` on a str, are Render errors, as is a
// slice of a literal that is no list or str (jinja2 constant-folds `none[1:]` to undefined, but
// raises for a variable's value, as kiln does for both).
//
// Errors are InvalidArgument. Parse names the construct and its byte offset in `source`
// ("unknown tag 'foo' at byte 12"). Render fails where jinja2 raises (undefined use, a type error
// such as 1 < 'a', iterating none), naming the byte offset of the expression; the message of
// raise_exception(msg) is msg itself. The limits below are named in their messages: hostile
// templates stop at one of them and never recurse without bound.
// Thread safety: a ChatTemplate is immutable; Render may run on several threads at once. Copies
// share the parsed program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::llm {

struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  static constexpr size_t kMaxSourceBytes = size_t{64} << 10;
  // Blocks, brackets, calls, unary operators and else-chains, together.
  static constexpr int kMaxNesting = 64;
  // Depth of a parsed expression tree, e.g. of a long a + b + ... chain.
  static constexpr int kMaxExpressionDepth = 256;
  static constexpr size_t kMaxOutputBytes = size_t{1} << 20;  // also of any one string
  static constexpr size_t kMaxListItems = size_t{1} << 20;
  // A step per statement, expression, loop iteration and list item made, and per 16 bytes of a
  // string made, copied, compared or searched; about 0.3 s of a CPU at most.
  static constexpr int64_t kMaxSteps = 4'000'000;

  // Parses the template once (InvalidArgument for anything outside the subset).
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source);

  // The template rendered with these variables (InvalidArgument where jinja2 would raise).
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt, const std::string& bos_token,
                                     const std::string& eos_token) const;


 private:
  struct Program;  // the parsed statements (chat_template.cc)
  explicit ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

}  // namespace kiln::llm
