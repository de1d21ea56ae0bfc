// The chat template's lexer (chat_template.h): jinja2 3.1's lexer.py with trim_blocks and lstrip_blocks, over a
// source normalized as jinja2 reads it (\r\n and \r as \n, one trailing newline dropped). Its tokens feed the parser
// in chat_template_parse.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/llm/chat_template_internal.h"

namespace kiln::llm::jinja {

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kStr, kInt, kOp, kEnd };

struct Token {
  Tok kind;
  size_t offset;     // in the normalized source
  std::string text;  // text, name, decoded string literal, operator
  int64_t ival = 0;
};

// How an error message names a token.
std::string Describe(const Token& t);

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

  absl::StatusOr<std::vector<Token>> Run();

 private:
  void Push(Tok kind, size_t offset, std::string text, int64_t ival = 0) {
    toks_.push_back({kind, offset, std::move(text), ival});
  }

  // End of s[begin, end) without its trailing whitespace (str.rstrip).
  size_t RStripSpace(size_t begin, size_t end) const;

  // lstrip_blocks: whitespace between the start of a line and a {% or {# tag is dropped. The text
  // starts at `begin`; it starts a line when the tag or text before it ended with a newline
  // (jinja2's line_starting).
  std::string_view LStripBlock(size_t begin, size_t tag) const;

  // {# ... #}: up to the first #}; -#} drops the whitespace after it, #} one newline (trim_blocks).
  absl::StatusOr<size_t> SkipComment(size_t open, size_t p) const;

  // The tokens of a {{ }} or {% %} tag from p, then its end; returns the offset after the end.
  // Inside brackets an end marker is read as operators, as in jinja2.
  absl::StatusOr<size_t> LexTag(char kind, size_t open, size_t p);

  // Bytes of the identifier character at src_[p] (0 if none): jinja2's names are Python's
  // identifiers, XID_Start then XID_Continue characters.
  size_t NameCharAt(size_t p, bool start) const;

  // jinja2's integer_re (decimal, `_` separators); a float literal is outside the subset.
  absl::StatusOr<size_t> LexInt(size_t p);

  // A string literal's body as Python's "unicode-escape" codec reads it (what jinja2 does): \n \t
  // \\ \' \" \a \b \f \r \v, octal \ooo, \xhh, \uhhhh, \Uhhhhhhhh, backslash-newline; other escapes
  // stay as written.
  absl::StatusOr<std::string> Unescape(std::string_view raw, size_t at) const;

  std::string src_;
  std::vector<size_t> joined_;  // normalized offsets whose \n was a \r\n
  std::vector<Token> toks_;
};

}  // namespace kiln::llm::jinja
