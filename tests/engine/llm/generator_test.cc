// Generator (engine/llm/generator.h): continuous batching on SmolLM2-135M-Instruct. Greedy generations run
// concurrently in a 2-slot cache (one waits for a slot, one joins while another is mid-way) give, token for token,
// what LlamaModel::Greedy gives for each prompt alone (itself checked against a NumPy Llama in llama_test); stop
// strings cut the text; cancellation frees the slot; the queue limit and request checks give their errors.
#include "engine/llm/generator.h"

#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/register_all.h"
#include "engine/base/status.h"
#include "gtest/gtest.h"

namespace kiln::llm {
namespace {

struct SmolLM2 {
  std::unique_ptr<nn::GgufModel> gguf;
  std::unique_ptr<BpeTokenizer> tok;
  std::unique_ptr<LlamaModel> model;
};
SmolLM2* Smol() {
  static SmolLM2* m = [] {
    backends::RegisterAllBackends();
    auto* s = new SmolLM2();
    absl::StatusOr<std::unique_ptr<nn::GgufModel>> g = nn::GgufModel::Open(KILN_SMOLLM2_GGUF);
    if (!g.ok()) return s;
    s->gguf = std::move(*g);
    s->tok = std::move(BpeTokenizer::FromGguf(s->gguf->file())).value();
    s->model = std::move(LlamaModel::Create(*s->gguf)).value();
    return s;
  }();
  return m;
}

std::vector<int32_t> Chat(const std::string& user) {
  return Smol()
      ->tok->Encode(absl::StrCat("<|im_start|>user\n", user, "<|im_end|>\n<|im_start|>assistant\n"))
      .value();
}

// Everything one generation reported.
struct Outcome {
  std::mutex mu;
  std::vector<int32_t> tokens;
  std::string text;
  int events = 0;
  FinishReason finish = FinishReason::kNone;
  absl::Status status;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::promise<void> done;
  GenerationCallback Callback() {
    return [this](const GenerationEvent& ev) {
      std::lock_guard<std::mutex> l(mu);
      ++events;
      tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
      text += ev.text;
      prompt_tokens = ev.prompt_tokens;
      completion_tokens = ev.completion_tokens;
      if (ev.done) {
        finish = ev.finish;
        status = ev.status;
        done.set_value();
      }
    };
  }
  void Wait() { done.get_future().wait(); }
};

class GeneratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(KILN_SMOLLM2_GGUF))
      GTEST_FAIL() << KILN_SMOLLM2_GGUF << " is missing";
    ASSERT_NE(Smol()->model, nullptr);
  }
};

TEST_F(GeneratorTest, ConcurrentGreedyGenerationsEqualEachAlone) {
  const LlamaModel& model = *Smol()->model;
  const BpeTokenizer& tok = *Smol()->tok;
  const std::vector<std::vector<int32_t>> prompts = {Chat("What is the capital of France?"),
                                                     Chat("2 + 2 ="), Chat("Name a color.")};
  const int64_t kMax = 10;
  std::vector<std::vector<int32_t>> want;
  {
    std::unique_ptr<KvCache> alone = model.NewCache(96).value();
    for (const auto& p : prompts) {
      alone->Reset();
      want.push_back(model.Greedy(*alone, p, kMax, tok.eos_id()).value());
    }
  }
  std::unique_ptr<Generator> gen =
      Generator::Create(&model, &tok, {.slots = 2, .max_ctx = 96}).value();
  std::vector<std::unique_ptr<Outcome>> runs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    runs.push_back(std::make_unique<Outcome>());
    GenerationRequest req{
        .prompt = prompts[i], .max_tokens = kMax, .sampling = {.temperature = 0.0}};
    ASSERT_TRUE(gen->Submit(req, runs.back()->Callback()).ok());
    if (i == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the others join mid-way
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    Outcome& r = *runs[i];
    r.Wait();
    EXPECT_EQ(r.tokens, want[i]) << "prompt " << i;
    std::vector<int32_t> text_ids = want[i];
    if (!text_ids.empty() && text_ids.back() == tok.eos_id()) text_ids.pop_back();
    EXPECT_EQ(r.text, tok.Decode(text_ids).value()) << "prompt " << i;
    EXPECT_EQ(r.finish,
              want[i].back() == tok.eos_id() ? FinishReason::kStop : FinishReason::kLength);
    EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(prompts[i].size()));
    EXPECT_EQ(r.completion_tokens, static_cast<int64_t>(want[i].size()));
  }
  const GeneratorStats st = gen->stats();
  EXPECT_EQ(st.active, 0);
  EXPECT_EQ(st.finished, 3u);
  // One span (64 rows), and up to two step widths: slot 0 alone, and both slots (LlamaModel::StepWidth).
  EXPECT_GE(st.captures, 1);
  EXPECT_LE(st.captures, 2);
  // Two generations shared most steps: fewer steps than tokens stepped.
  EXPECT_LT(st.steps, st.slot_steps);
  EXPECT_GT(st.slot_steps, 0u);
  std::printf("steps %llu, slot steps %llu (mean batch %.2f)\n",
              static_cast<unsigned long long>(st.steps),
              static_cast<unsigned long long>(st.slot_steps),
              static_cast<double>(st.slot_steps) / st.steps);
}

TEST_F(GeneratorTest, StopStringsCancellationAndLimits) {
  const LlamaModel& model = *Smol()->model;
  const BpeTokenizer& tok = *Smol()->tok;
  std::unique_ptr<Generator> gen =
      Generator::Create(&model, &tok, {.slots = 1, .max_ctx = 80, .max_queue = 1}).value();
  const std::vector<int32_t> prompt = Chat("What is the capital of France?");

  // The whole greedy text first, then a stop string from its middle: the output ends just before it.
  Outcome full;
  ASSERT_TRUE(gen->Submit({.prompt = prompt, .max_tokens = 12, .sampling = {.temperature = 0.0}},
                          full.Callback())
                  .ok());
  full.Wait();
  ASSERT_GE(full.text.size(), 12u) << full.text;
  const std::string stop = full.text.substr(6, 3);
  const size_t at = full.text.find(stop);
  Outcome cut;
  ASSERT_TRUE(gen->Submit({.prompt = prompt,
                           .max_tokens = 12,
                           .sampling = {.temperature = 0.0},
                           .stop = {stop, "zzzz"}},
                          cut.Callback())
                  .ok());
  cut.Wait();
  EXPECT_EQ(cut.text, full.text.substr(0, at)) << "stop \"" << stop << "\"";
  EXPECT_EQ(cut.finish, FinishReason::kStop);

  // Cancelled after its first token: ends kCancelled, and the slot serves the next generation. Past eos and polled
  // every millisecond: a decode step takes a few ms now, and with 50 ms polls the generation could reach eos first.
  Outcome cancelled;
  absl::StatusOr<uint64_t> id = gen->Submit(
      {.prompt = prompt, .max_tokens = 60, .sampling = {.temperature = 0.0}, .ignore_eos = true},
      cancelled.Callback());
  ASSERT_TRUE(id.ok());
  for (int i = 0; i < 30000; ++i) {
    {
      std::lock_guard<std::mutex> l(cancelled.mu);
      if (!cancelled.tokens.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  gen->Cancel(*id);
  cancelled.Wait();
  EXPECT_EQ(cancelled.finish, FinishReason::kCancelled);
  EXPECT_LT(cancelled.completion_tokens, 60);
  EXPECT_EQ(gen->stats().active, 0);

  // One slot and a queue of one: of three generations submitted at once, the third is refused.
  Outcome a, b;
  ASSERT_TRUE(gen->Submit({.prompt = prompt, .max_tokens = 2}, a.Callback()).ok());
  absl::StatusOr<uint64_t> second = gen->Submit({.prompt = prompt, .max_tokens = 2}, b.Callback());
  Outcome c;
  absl::StatusOr<uint64_t> third = gen->Submit({.prompt = prompt, .max_tokens = 2}, c.Callback());
  EXPECT_TRUE(!second.ok() || !third.ok());
  const absl::Status refused = second.ok() ? third.status() : second.status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("the limit is 1"), std::string::npos) << refused;
  a.Wait();  // every accepted generation ends before its Outcome goes out of scope
  if (second.ok()) b.Wait();
  if (third.ok()) c.Wait();

  // Request checks name the field.
  auto message = [&](GenerationRequest r) {
    return std::string(gen->Submit(std::move(r), [](auto&) {}).status().message());
  };
  EXPECT_NE(message({.prompt = {}}).find("prompt: empty"), std::string::npos);
  EXPECT_NE(message({.prompt = std::vector<int32_t>(80, 1)}).find("leave no room"),
            std::string::npos);
  EXPECT_NE(message({.prompt = {tok.vocab_size()}}).find("outside the vocabulary"),
            std::string::npos);
  EXPECT_NE(message({.prompt = prompt, .max_tokens = 0}).find("max_tokens"), std::string::npos);
  EXPECT_NE(message({.prompt = prompt, .sampling = {.top_p = 2.0}}).find("top_p"),
            std::string::npos);
  EXPECT_NE(message({.prompt = prompt, .stop = {""}}).find("stop"), std::string::npos);
}

}  // namespace
}  // namespace kiln::llm
