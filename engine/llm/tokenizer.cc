// BpeTokenizer (tokenizer.h).
#include "engine/llm/tokenizer.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::llm {
namespace {

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", what)); }

// GPT-2's byte alphabet: printable bytes stand for themselves, the others (controls, space, DEL, 0x80-0xA0, 0xAD)
// for U+0100 upwards, in byte order.
struct ByteAlphabet {
  std::array<std::string, 256> to_text;            // byte -> its UTF-8 character
  absl::flat_hash_map<uint32_t, uint8_t> to_byte;  // code point -> byte
  ByteAlphabet() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
      std::string s;
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
      to_text[b] = s;
      to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};
const ByteAlphabet& Alphabet() {
  static const ByteAlphabet* a = new ByteAlphabet();
  return *a;
}

// One decoded code point and where its bytes are.
struct Cp {
  uint32_t c;
  size_t at, len;
};

// Decodes UTF-8 strictly (no overlongs, surrogates or values past U+10FFFF); false on invalid input.
bool DecodeUtf8(std::string_view s, std::vector<Cp>* out) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    uint32_t c;
    size_t n;
    if (b < 0x80) {
      c = b, n = 1;
    } else if ((b & 0xE0) == 0xC0) {
      c = b & 0x1F, n = 2;
    } else if ((b & 0xF0) == 0xE0) {
      c = b & 0x0F, n = 3;
    } else if ((b & 0xF8) == 0xF0) {
      c = b & 0x07, n = 4;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const uint8_t cb = static_cast<uint8_t>(s[i + k]);
      if ((cb & 0xC0) != 0x80) return false;
      c = (c << 6) | (cb & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < kMin[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
    out->push_back({c, i, n});
    i += n;
  }
  return true;
}

bool IsLetter(uint32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_L_MASK) != 0; }
bool IsNumber(uint32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0; }
bool IsSpace(uint32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE) != 0; }

// GPT-2's pattern over cps[begin, end): appends [first, last) code point index pairs.
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void Gpt2Split(const std::vector<Cp>& cps, size_t begin, size_t end, std::vector<std::pair<size_t, size_t>>* out) {
  auto at = [&](size_t k) { return k < end ? cps[k].c : 0xFFFFFFFFu; };
  size_t i = begin;
  while (i < end) {
    // Contractions (ASCII apostrophe, lower case as written).
    if (at(i) == '\'') {
      const uint32_t a = at(i + 1), b = at(i + 2);
      size_t n = 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        n = 2;
      } else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
        n = 3;
      }
      if (n > 0 && i + n <= end) {
        out->push_back({i, i + n});
        i += n;
        continue;
      }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`, in that order.
    const size_t j = at(i) == ' ' ? i + 1 : i;
    if (j < end) {
      bool (*classes[3])(uint32_t) = {
          IsLetter, IsNumber, [](uint32_t c) { return !IsSpace(c) && !IsLetter(c) && !IsNumber(c); }};
      bool matched = false;
      for (auto in_class : classes) {
        if (!in_class(at(j))) continue;
        size_t k = j + 1;
        while (k < end && in_class(at(k))) ++k;
        out->push_back({i, k});
        i = k;
        matched = true;
        break;
      }
      if (matched) continue;
    }
    // `\s+(?!\S)`, then `\s+`.
    if (IsSpace(at(i))) {
      size_t k = i + 1;
      while (k < end && IsSpace(at(k))) ++k;
      if (k < end && k - i >= 2) --k;  // leave the last space to the word that follows
      out->push_back({i, k});
      i = k;
      continue;
    }
    // Unreachable: every code point is a space, a letter, a number or none of them. Kept total.
    out->push_back({i, i + 1});
    ++i;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromGguf(const nn::GgufFile& f) {
  absl::StatusOr<std::string> model = f.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (*model != "gpt2") return Bad(absl::StrCat("tokenizer.ggml.model \"", *model, "\" is not supported (gpt2 is)"));
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  absl::StatusOr<std::string> pre = f.GetString("tokenizer.ggml.pre");
  if (!pre.ok() && pre.status().code() != absl::StatusCode::kNotFound) return pre.status();
  const std::string pre_name = pre.ok() ? *pre : "gpt2";
  if (pre_name == "smollm") {
    t->pre_ = PreTokenizer::kSmolLm;
  } else if (pre_name == "gpt2" || pre_name == "default") {
    t->pre_ = PreTokenizer::kGpt2;
  } else {
    return Bad(absl::StrCat("tokenizer.ggml.pre \"", pre_name, "\" is not supported (gpt2, smollm are)"));
  }
  absl::StatusOr<std::vector<std::string>> tokens = f.GetStrings("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  if (tokens->empty() || tokens->size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return Bad(absl::StrCat("tokenizer.ggml.tokens holds ", tokens->size(), " tokens"));
  t->tokens_ = *std::move(tokens);
  t->is_special_.assign(t->tokens_.size(), false);
  for (size_t k = 0; k < t->tokens_.size(); ++k) t->ids_.emplace(t->tokens_[k], static_cast<int32_t>(k));
  if (const nn::GgufValue* types = f.Find("tokenizer.ggml.token_type"); types != nullptr) {
    if (types->type != nn::GgufType::kArray || types->array.size() != t->tokens_.size())
      return Bad("tokenizer.ggml.token_type: not an array as long as tokenizer.ggml.tokens");
    for (size_t k = 0; k < types->array.size(); ++k) {
      const int64_t kind = types->array[k].i;
      if ((kind == 3 || kind == 4) && !t->tokens_[k].empty()) {  // control, user-defined
        t->is_special_[k] = true;
        t->specials_.push_back({t->tokens_[k], static_cast<int32_t>(k)});
      }
    }
  }
  std::stable_sort(t->specials_.begin(), t->specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  absl::StatusOr<std::vector<std::string>> merges = f.GetStrings("tokenizer.ggml.merges");
  if (!merges.ok()) return merges.status();
  for (size_t k = 0; k < merges->size(); ++k) {
    const std::string& m = (*merges)[k];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos || space + 1 >= m.size())
      return Bad(absl::StrCat("merge ", k, " \"", m, "\" is not two tokens"));
    if (!t->ids_.contains(m.substr(0, space) + m.substr(space + 1)))
      return Bad(absl::StrCat("merge ", k, " \"", m, "\" makes a token the vocabulary lacks"));
    t->merge_rank_.emplace(m, static_cast<int32_t>(k));
  }
  auto id_of = [&](const char* key, int32_t* out) -> absl::Status {
    absl::StatusOr<int64_t> v = f.GetInt(key);
    if (!v.ok()) return v.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : v.status();
    if (*v < 0 || *v >= t->vocab_size()) return Bad(absl::StrCat(key, " ", *v, " is outside the vocabulary"));
    *out = static_cast<int32_t>(*v);
    return absl::OkStatus();
  };
  if (absl::Status st = id_of("tokenizer.ggml.bos_token_id", &t->bos_); !st.ok()) return st;
  if (absl::Status st = id_of("tokenizer.ggml.eos_token_id", &t->eos_); !st.ok()) return st;
  if (absl::StatusOr<bool> add = f.GetBool("tokenizer.ggml.add_bos_token"); add.ok()) t->add_bos_ = *add;
  return t;
}

absl::StatusOr<std::vector<std::string>> BpeTokenizer::PreTokenize(std::string_view text) const {
  std::vector<Cp> cps;
  if (!DecodeUtf8(text, &cps)) return Bad("the text is not valid UTF-8");
  std::vector<std::pair<size_t, size_t>> spans;
  if (pre_ == PreTokenizer::kSmolLm) {  // every number character on its own, GPT-2's pattern between them
    size_t run = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (k < cps.size() && !IsNumber(cps[k].c)) continue;
      Gpt2Split(cps, run, k, &spans);
      if (k < cps.size()) spans.push_back({k, k + 1});
      run = k + 1;
    }
  } else {
    Gpt2Split(cps, 0, cps.size(), &spans);
  }
  std::vector<std::string> out;
  out.reserve(spans.size());
  for (const auto& [a, b] : spans) {
    const size_t from = cps[a].at, to = cps[b - 1].at + cps[b - 1].len;
    out.emplace_back(text.substr(from, to - from));
  }
  return out;
}

void BpeTokenizer::EncodePiece(std::string_view piece, std::vector<int32_t>* out) const {
  {
    absl::MutexLock l(&cache_mu_);
    if (auto it = cache_.find(absl::string_view(piece.data(), piece.size())); it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const ByteAlphabet& alpha = Alphabet();
  std::vector<std::string> parts;
  parts.reserve(piece.size());
  for (char ch : piece) parts.push_back(alpha.to_text[static_cast<uint8_t>(ch)]);
  // Merge the lowest-ranked adjacent pair until none has a rank (a piece is a word: quadratic is fine).
  std::string key;
  while (parts.size() > 1) {
    int32_t best = std::numeric_limits<int32_t>::max();
    size_t best_at = 0;
    for (size_t k = 0; k + 1 < parts.size(); ++k) {
      key.assign(parts[k]).append(" ").append(parts[k + 1]);
      if (auto it = merge_rank_.find(key); it != merge_rank_.end() && it->second < best) {
        best = it->second;
        best_at = k;
      }
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    parts[best_at] += parts[best_at + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  std::vector<int32_t> ids;
  for (const std::string& p : parts) {
    if (auto it = ids_.find(p); it != ids_.end()) {
      ids.push_back(it->second);
    } else {
      // A part the vocabulary lacks (a vocabulary without some single bytes): its bytes one by one, as llama.cpp.
      for (size_t k = 0; k < p.size();) {
        const size_t n = (static_cast<uint8_t>(p[k]) < 0x80) ? 1 : 2;  // the alphabet's characters are 1-2 bytes
        if (auto b = ids_.find(p.substr(k, n)); b != ids_.end()) ids.push_back(b->second);
        k += n;
      }
    }
  }
  out->insert(out->end(), ids.begin(), ids.end());
  absl::MutexLock l(&cache_mu_);
  if (cache_.size() < (size_t{1} << 16)) cache_.emplace(std::string(piece), std::move(ids));
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= text.size()) {
    // The next special token's text (leftmost, then longest).
    size_t next = text.size(), len = 0;
    int32_t special = -1;
    if (parse_special) {
      for (const auto& [s, id] : specials_) {
        const size_t at = text.find(s, i);
        if (at < next || (at == next && at != text.size() && s.size() > len)) {
          next = at, len = s.size(), special = id;
        }
      }
    }
    absl::StatusOr<std::vector<std::string>> pieces = PreTokenize(text.substr(i, next - i));
    if (!pieces.ok()) return pieces.status();
    for (const std::string& p : *pieces) EncodePiece(p, &ids);
    if (special < 0) break;
    ids.push_back(special);
    i = next + len;
  }
  return ids;
}

absl::StatusOr<std::string> BpeTokenizer::Decode(const std::vector<int32_t>& ids) const {
  const ByteAlphabet& alpha = Alphabet();
  std::string out;
  std::vector<Cp> cps;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) return Bad(absl::StrCat("id ", id, " is outside the vocabulary"));
    const std::string& t = tokens_[id];
    if (is_special_[id]) {
      out += t;
      continue;
    }
    cps.clear();
    if (!DecodeUtf8(t, &cps)) return Bad(absl::StrCat("token ", id, " is not valid UTF-8"));
    for (const Cp& c : cps) {
      auto it = alpha.to_byte.find(c.c);
      if (it == alpha.to_byte.end()) {
        out.append(t, c.at, c.len);  // not in the byte alphabet: as written
      } else {
        out.push_back(static_cast<char>(it->second));
      }
    }
  }
  return out;
}

}  // namespace kiln::llm
