// Environment knobs, read once, with tinygrad's names and meanings.
//
//   DEBUG       0..7   verbosity (1 schedule lines, 2 per-kernel lines, 3 opts, 4 source)
//   JIT         0..2   0 disables TinyJit, 1 captures and replays, 2 also batches into device graphs
//                      (unset: graphs only where the device has them on by default, CUDA; KnobIsSet tells)
//   BEAM        0..n   beam width for kernel search (0 = hand-coded heuristic)
//   NOOPT       0/1    no kernel optimisations
//   CACHELEVEL  0..2   0 disables every disk cache
//   VIZ         0/1    record rewrite traces for the viewer
//   TRACK_MATCH_STATS 0..2  per-rule counters (implied 2 by VIZ)
//   TC          0/1    tensor cores (the TC opt) where the renderer declares them (default 1)
//   WINO        0/1    Winograd convolutions where they pay (default 1; tinygrad's default is 0)
//   BEAM_BUDGET seconds one kernel's BEAM search may take before it stops at the end of a round (default 20)
//
// Each knob is read from the environment on first use and kept. `Context` overrides knobs for the
// current thread within a scope (tinygrad's `with Context(DEBUG=2):`), which is how tests set them.
// Reads are lock-free; Context nesting is per thread and restores on destruction.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string_view>
#include <utility>

namespace kiln {

enum class Knob : uint8_t { kDebug, kJit, kBeam, kNoOpt, kCacheLevel, kViz, kTrackMatchStats, kTc, kBeamBudget, kWino, kCount };

// Name of a knob as spelled in the environment ("DEBUG", ...).
std::string_view KnobName(Knob k);

// The knob's value: the innermost Context override on this thread, else the environment (read
// once per process), else its default (JIT 1, CACHELEVEL 2, TC 1, BEAM_BUDGET 20, WINO 1, others 0; TRACK_MATCH_STATS 2 if VIZ).
int64_t GetKnob(Knob k);
// Whether the knob was given (a Context override on this thread, or the environment) rather than defaulted.
bool KnobIsSet(Knob k);

// Replaces the process-wide value (the environment's, or the default) for every thread without a Context override,
// e.g. kilnd --beam. Meant for start-up; a kernel already compiled keeps what it was compiled with.
void SetProcessKnob(Knob k, int64_t value);

inline int64_t DebugLevel() { return GetKnob(Knob::kDebug); }

// Kiln's own on/off environment switches (KILN_ONNX_TRACE, KILN_PERF_MAP): on when set, non-empty and not "0...".
// Read at each call; callers keep the answer.
inline bool EnvFlagOn(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && v[0] != '0';
}

// Scoped override: `Context ctx({{Knob::kDebug, 2}, {Knob::kNoOpt, 1}});`. Not copyable; must be
// destroyed on the thread that created it, in reverse order of creation.
class Context {
 public:
  Context(std::initializer_list<std::pair<Knob, int64_t>> overrides);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

 private:
  int64_t saved_[static_cast<int>(Knob::kCount)];
  bool saved_set_[static_cast<int>(Knob::kCount)];
};

}  // namespace kiln
