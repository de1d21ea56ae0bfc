#include "engine/base/env.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"

namespace kiln {
namespace {

constexpr int kNumKnobs = static_cast<int>(Knob::kCount);
constexpr std::string_view kNames[kNumKnobs] = {"DEBUG",      "JIT", "BEAM",
                                                "NOOPT",      "CACHELEVEL", "VIZ",
                                                "TRACK_MATCH_STATS", "TC", "BEAM_BUDGET", "WINO"};

struct EnvValues {
  std::atomic<int64_t> value[kNumKnobs];
  bool set[kNumKnobs] = {};
  EnvValues() {
    const int64_t defaults[kNumKnobs] = {0, 1, 0, 0, 2, 0, -1, 1, 20, 1};
    for (int i = 0; i < kNumKnobs; ++i) {
      value[i] = defaults[i];
      const char* s = std::getenv(std::string(kNames[i]).c_str());
      int64_t v = 0;
      if (s != nullptr && absl::SimpleAtoi(s, &v)) {
        value[i] = v;
        set[i] = true;
      }
    }
    int track = static_cast<int>(Knob::kTrackMatchStats);
    if (value[track] < 0) value[track] = value[static_cast<int>(Knob::kViz)].load() > 0 ? 2 : 0;
  }
};

EnvValues& Env() {
  static EnvValues env;
  return env;
}

thread_local int64_t tl_override[kNumKnobs];
thread_local bool tl_set[kNumKnobs];

}  // namespace

std::string_view KnobName(Knob k) { return kNames[static_cast<int>(k)]; }

int64_t GetKnob(Knob k) {
  int i = static_cast<int>(k);
  return tl_set[i] ? tl_override[i] : Env().value[i].load(std::memory_order_relaxed);
}

void SetProcessKnob(Knob k, int64_t value) {
  int i = static_cast<int>(k);
  Env().value[i].store(value, std::memory_order_relaxed);
}

bool KnobIsSet(Knob k) {
  int i = static_cast<int>(k);
  return tl_set[i] || Env().set[i];
}

Context::Context(std::initializer_list<std::pair<Knob, int64_t>> overrides) {
  for (int i = 0; i < kNumKnobs; ++i) {
    saved_[i] = tl_override[i];
    saved_set_[i] = tl_set[i];
  }
  for (const auto& [k, v] : overrides) {
    tl_override[static_cast<int>(k)] = v;
    tl_set[static_cast<int>(k)] = true;
  }
}

Context::~Context() {
  for (int i = 0; i < kNumKnobs; ++i) {
    tl_override[i] = saved_[i];
    tl_set[i] = saved_set_[i];
  }
}

}  // namespace kiln
