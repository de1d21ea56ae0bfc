// llm_perf: decode-step timings of the Llama model on a GGUF file, one JSON line per measurement, for
// llm_compare.py. For each slot count S: the first step (trace + compile), the second (capture), then the median
// of `steps` replayed steps with every slot active; tokens/s = S / step time. Then prefill: 128 prompt tokens read
// by LlamaModel::Prefill (chunks of KvCache::kPrefillChunk) into slot 0 of a cache of `prefill_slots` slots (kilnd's
// max_batch_size), first run (compile) and the median of three more; tokens/s = 128 / that time.
//   llm_perf [--int8] MODEL.gguf [steps=16] [slots=1,4,8] [max_ctx=256] [prefill_slots=1]
// --int8: LlamaOptions::int8_activations (8-bit activations times the weights' integers, as llama.cpp computes).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backends/register_all.h"
#include "engine/llm/llama.h"
#include "engine/llm/tokenizer.h"

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  kiln::llm::LlamaOptions options;
  if (argc > 1 && std::string(argv[1]) == "--int8") {
    options.int8_activations = true;
    ++argv;
    --argc;
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: llm_perf [--int8] MODEL.gguf [steps] [slots,...] [max_ctx] [prefill_slots]\n");
    return 2;
  }
  kiln::backends::RegisterAllBackends();
  // llm_perf MODEL.gguf greedy N: each stdin line is a prompt's token ids (comma-separated); prints the Greedy ids
  // (prefill + decode, up to N new tokens, stopping at eos) per line, for llm_compare.py --check-greedy.
  if (argc > 3 && std::string(argv[2]) == "greedy") {
    auto gguf = kiln::nn::GgufModel::Open(argv[1]);
    if (!gguf.ok()) return 1;
    auto model = kiln::llm::LlamaModel::Create(**gguf, "CPU", options);
    auto tok = kiln::llm::BpeTokenizer::FromGguf((*gguf)->file());
    if (!model.ok() || !tok.ok()) return 1;
    auto cache = (*model)->NewCache(512, 1);
    if (!cache.ok()) return 1;
    char buf[1 << 16];
    while (std::fgets(buf, sizeof buf, stdin) != nullptr) {
      std::vector<int32_t> ids;
      for (absl::string_view f : absl::StrSplit(absl::StripAsciiWhitespace(buf), ',')) {
        int32_t v = 0;
        if (absl::SimpleAtoi(f, &v)) ids.push_back(v);
      }
      (*cache)->Reset();
      auto out = (*model)->Greedy(**cache, ids, std::atoi(argv[3]), (*tok)->eos_id());
      if (!out.ok()) {
        std::fprintf(stderr, "%s\n", std::string(out.status().message()).c_str());
        return 1;
      }
      std::printf("%s\n", absl::StrJoin(*out, ",").c_str());
      std::fflush(stdout);
    }
    return 0;
  }
  int steps = std::max(1, argc > 2 ? std::atoi(argv[2]) : 16);
  std::vector<int64_t> slot_counts;
  for (absl::string_view s : absl::StrSplit(argc > 3 ? argv[3] : "1,4,8", ',')) {
    int64_t v = 0;
    if (absl::SimpleAtoi(s, &v)) slot_counts.push_back(v);
  }
  const int64_t max_ctx = argc > 4 ? std::atoll(argv[4]) : 256;
  auto gguf = kiln::nn::GgufModel::Open(argv[1]);
  if (!gguf.ok()) {
    std::fprintf(stderr, "%s\n", std::string(gguf.status().message()).c_str());
    return 1;
  }
  auto model = kiln::llm::LlamaModel::Create(**gguf, "CPU", options);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  for (int64_t S : slot_counts) {
    auto cache = (*model)->NewCache(max_ctx, S);
    if (!cache.ok()) return 1;
    std::vector<kiln::llm::SlotToken> all;
    for (int64_t s = 0; s < S; ++s) all.push_back({s, static_cast<int32_t>(100 + s)});
    std::vector<double> t;
    for (int i = 0; i < steps + 2; ++i) {
      const auto t0 = Clock::now();
      auto logits = (*model)->StepBatch(**cache, all);
      if (!logits.ok()) {
        std::fprintf(stderr, "step: %s\n", std::string(logits.status().message()).c_str());
        return 1;
      }
      auto host = logits->ToVector<float>();
      if (!host.ok()) return 1;
      t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::vector<double> replay(t.begin() + 2, t.end());
    std::sort(replay.begin(), replay.end());
    const double med = replay[replay.size() / 2];
    std::printf(
        "{\"slots\": %lld, \"max_ctx\": %lld, \"first_step_s\": %.4f, \"second_step_s\": %.4f, "
        "\"step_s\": %.5f, \"tokens_per_s\": %.2f}\n",
        static_cast<long long>(S), static_cast<long long>(max_ctx), t[0], t[1], med, S / med);
    std::fflush(stdout);
  }
  {
    constexpr int64_t kPrompt = 128;
    const int64_t prefill_slots = argc > 5 ? std::max(1, std::atoi(argv[5])) : 1;
    auto cache = (*model)->NewCache(std::max<int64_t>(max_ctx, kPrompt), prefill_slots);
    if (!cache.ok()) return 1;
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < kPrompt; ++i) prompt.push_back(static_cast<int32_t>(100 + (i * 37) % 1000));
    std::vector<double> t;
    for (int i = 0; i < 4; ++i) {
      (*cache)->Reset();
      const auto t0 = Clock::now();
      if (!(*model)->Prefill(**cache, 0, prompt).ok()) return 1;
      t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::vector<double> replay(t.begin() + 1, t.end());
    std::sort(replay.begin(), replay.end());
    std::printf("{\"prefill_tokens\": %lld, \"slots\": %lld, \"first_prefill_s\": %.4f, \"prefill_s\": %.4f, "
                "\"tokens_per_s\": %.2f}\n",
                static_cast<long long>(kPrompt), static_cast<long long>(prefill_slots), t[0], replay[1],
                kPrompt / replay[1]);
  }
  return 0;
}
