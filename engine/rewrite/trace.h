// RewriteTrace: the process-wide record of named rewrite passes and of every successful match,
// filled when TRACK_MATCH_STATS >= 2 (implied by VIZ=1), read by DEBUG output and the VIZ viewer.
//
// Memory is bounded: at most max_passes passes and max_matches matches are kept; the oldest are
// dropped first (dropped_* count them). Entries hold references to the nodes they show, so those
// nodes stay alive until their entry is dropped or Clear() is called.
//
// Thread safety: all methods are thread-safe (one mutex). Each thread has its own stack of open
// passes, so nested GraphRewrite calls (a rewrite started inside a callback) attribute matches to
// the innermost pass of that thread.
//
// Groups: a pass started while a ScopedTraceGroup is open on its thread carries that group's id
// (the VIZ kernel log, engine/realize/kernel_log.h, opens one around each kernel's lowering, so
// the viewer lists the passes of one kernel); 0 = none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/uop/uop.h"

namespace kiln {

struct TracedPass {
  int64_t id = 0;          // > 0, increasing in start order
  std::string name;        // RewriteOptions.name ("" if unnamed)
  std::string matcher;     // the PatternMatcher's name
  std::string mode;        // "default", "bottom_up", "both" or "walk"
  int depth = 0;           // nesting depth on the starting thread (0 = top level)
  int64_t group = 0;       // the innermost ScopedTraceGroup of the starting thread (0 = none)
  UOpPtr input;            // the root given to GraphRewrite
  UOpPtr output;           // the rewritten root (null if the pass failed or is still open)
  int64_t num_matches = 0; // matches recorded for this pass (including dropped ones)
  bool ok = false;         // false while open or if the pass returned an error
  std::string error;       // the error message if the pass failed
};

struct TracedMatch {
  int64_t pass_id = 0;     // the pass it happened in (0 = a direct PatternMatcher::Rewrite call)
  std::string matcher;
  std::string rule;
  UOpPtr before;
  UOpPtr after;
};

class RewriteTrace {
 public:
  static RewriteTrace& Get();

  // Opens a pass on the calling thread; returns its id.
  int64_t BeginPass(std::string name, std::string matcher, std::string mode, UOpPtr input);
  // Closes the innermost open pass on the calling thread (must be `id`).
  void EndPass(int64_t id, UOpPtr output, bool ok, std::string error = "");
  // The innermost open pass on the calling thread, or 0.
  static int64_t CurrentPass();
  void RecordMatch(int64_t pass_id, const std::string& matcher, const std::string& rule,
                   UOpPtr before, UOpPtr after);

  std::vector<TracedPass> Passes() const;
  std::vector<TracedMatch> Matches() const;
  // Matches of one pass still held.
  std::vector<TracedMatch> MatchesOf(int64_t pass_id) const;
  // Passes of one group still held, in start order.
  std::vector<TracedPass> PassesOf(int64_t group) const;
  // The pass `id` if still held.
  bool FindPass(int64_t id, TracedPass* out) const;
  // The innermost ScopedTraceGroup of the calling thread, or 0.
  static int64_t CurrentGroup();
  int64_t dropped_passes() const;
  int64_t dropped_matches() const;

  // A listing of every held pass with its match count and, for up to `matches_per_pass` of its
  // matches, "rule: OP -> OP" lines. For DEBUG output and tests.
  std::string Format(size_t matches_per_pass = 0) const;

  void Clear();
  void SetCapacity(size_t max_passes, size_t max_matches);

 private:
  RewriteTrace() = default;
  mutable absl::Mutex mu_;
  std::deque<TracedPass> passes_;
  std::deque<TracedMatch> matches_;
  size_t max_passes_ = 4096;
  size_t max_matches_ = 65536;
  int64_t next_id_ = 1;
  int64_t dropped_passes_ = 0;
  int64_t dropped_matches_ = 0;
};

// Replays recorded matches on a pass's input: each match, in order, replaces its `before` node
// wherever it occurs in the graph so far by its `after` (not re-traversed), rebuilding the nodes
// above it. For a rule-driven pass whose matches are all held, the result is the pass's output
// node itself (interning: the same pointer). FailedPrecondition naming the step when a match's
// `before` is not in the graph at that step (a match dropped from the trace, an imperative pass
// whose changes are not matches), or the factory's error when a rebuilt node is invalid.
absl::StatusOr<UOpPtr> ReplayMatches(const UOpPtr& input, absl::Span<const TracedMatch> matches);

// Tags the passes begun on this thread while it lives with `group` (an input scope, like
// ScopedRunControl). Destroy on the creating thread, in reverse order.
class ScopedTraceGroup {
 public:
  explicit ScopedTraceGroup(int64_t group);
  ~ScopedTraceGroup();
  ScopedTraceGroup(const ScopedTraceGroup&) = delete;
  ScopedTraceGroup& operator=(const ScopedTraceGroup&) = delete;

 private:
  int64_t previous_;
};

}  // namespace kiln
