// GraphRewrite: apply a PatternMatcher over a whole UOp DAG (tinygrad's graph_rewrite).
//
// Modes (tinygrad §2.3 semantics):
//   default    post-order: a node's sources are rewritten first, the node is rebuilt if any source
//              changed, then `pm` is applied; a rewritten result is itself fully rewritten, so each
//              node reaches a fixed point.
//   bottom_up  (tinygrad's inverted name) `pm` is applied to a node *before* its children,
//              repeatedly until it no longer matches, then the result's sources are visited; a
//              node rebuilt from changed sources is offered to `pm` again.
//   both       opts.bpm top-down (as bottom_up) + pm post-order (as default). Visit order for
//              SINK(a, b): bpm(SINK) bpm(a) pm(a) bpm(b) pm(b) pm(SINK).
//   walk       single pass: each node visited once (bpm/bottom_up pm once before its children,
//              default pm once after them), replacements are never re-traversed.
// Every mode is iterative (explicit work stack, no recursion: million-node chains work) and
// memoized: each distinct node is processed once per call, so a node shared in a diamond is
// rewritten once and every user sees the same replacement.
//
// Memo: per call, an index of known nodes (hinted by UOp::rewrite_mark, verified, with a hash-map
// fallback when another live rewrite owns a node's mark), so concurrent and nested rewrites over
// shared nodes are safe. The memo holds a reference to every node it has seen until the call ends.
//
// Limits (fixed-point modes): a node rewritten more than `step_limit` times in a row (a rule that
// never converges, e.g. ADD(x,c) -> ADD(x,c+1)), more than 16*step_limit rewrites in total, or a
// replacement that depends on a node still waiting for it (a cycle) returns
// InternalError "infinite loop in graph_rewrite '<name>' (<why>)". Raise step_limit for very large
// graphs that legitimately need more than 16*step_limit rewrites.
//
// Counters: with opts.stats set, the pass (opts.name, pm's name) and every rule hit are added to
// that caller-owned RewriteStats (rewrite_stats.h), whatever TRACK_MATCH_STATS says.
//
// Tracing: opts.name names the pass; with TRACK_MATCH_STATS >= 2 the pass and all its matches are
// recorded in the rewrite trace (trace.h).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/rewrite/pattern_matcher.h"
#include "engine/rewrite/rewrite_stats.h"
#include "engine/uop/uop.h"

namespace kiln {

struct RewriteOptions {
  // (Initialized, so designated initializers that omit it stay complete for -Wmissing-field-initializers.)
  std::string name = "";                // pass name, recorded for DEBUG/VIZ ("initial symbolic")
  bool bottom_up = false;               // tinygrad bottom_up=True: pm applied before children, to a fixed point
  const PatternMatcher* bpm = nullptr;  // both modes: bpm top-down + pm bottom-up (tinygrad's pm+bpm)
  bool walk = false;                    // single pass, no fixed point, no re-traversal of replacements
  void* ctx = nullptr;                  // passed to every callback (Bindings::ctx<T>())
  int64_t step_limit = 250000;          // exceeded -> error Status "infinite loop in graph_rewrite"
  RewriteStats* stats = nullptr;        // caller-owned per-pass, per-rule hit counters (null = none)
  // false: no pass of its own in the RewriteTrace (TRACK_MATCH_STATS >= 2); its matches go to the thread's open
  // pass. For helpers called per node inside a pass (Simplify): a Winograd transform's kernel lowered thousands,
  // which pushed whole kernels' passes out of the bounded trace (VIZ showed them with none).
  bool traced = true;
};

// Returns the rewritten root. InvalidArgument if both bottom_up and bpm are set.
absl::StatusOr<UOpPtr> GraphRewrite(const UOpPtr& root, const PatternMatcher& pm,
                                    const RewriteOptions& opts = {});
// Convenience for trusted internal passes: KILN_CHECKs ok().
UOpPtr GraphRewriteOrDie(const UOpPtr& root, const PatternMatcher& pm,
                         const RewriteOptions& opts = {});

}  // namespace kiln
