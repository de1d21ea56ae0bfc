// RewriteStats: a caller-owned sink of per-pass, per-rule hit counters (a value, not process state).
//
// GraphRewrite adds to it when RewriteOptions::stats points at one: every pass run adds a pass row
// (its name, the matcher's name, the number of runs and of rewrites), every rule that fired adds a
// rule row keyed by (pass, matcher, rule) with its hit count. A pass that ran and matched nothing
// still appears, so the table names every pass that ran. Rows keep first-seen order, which is
// pipeline order for one lowering.
//
// Unlike the TRACK_MATCH_STATS counters (pattern_matcher.h: process-wide, attempts and time, off by
// default), a RewriteStats belongs to whoever passes it in (a lowering call, an engine context), so
// two engines count apart. Counting costs one hash-map increment per hit and only when a sink is given.
//
// Thread safety: every method may be called from several threads at once (one mutex).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace kiln {

class RewriteStats {
 public:
  struct PassRow {
    std::string pass;     // RewriteOptions::name ("" = unnamed)
    std::string matcher;  // PatternMatcher::name()
    int64_t runs = 0;     // GraphRewrite calls under this (pass, matcher)
    int64_t rewrites = 0; // rule hits in those calls, all rules together; -1: an imperative stage (not counted)
  };
  struct RuleRow {
    std::string pass;
    std::string matcher;  // the matcher the rule was built in (a rule keeps it through operator+)
    std::string rule;     // Rule::name
    int64_t hits = 0;
  };

  RewriteStats() = default;
  RewriteStats(const RewriteStats&) = delete;
  RewriteStats& operator=(const RewriteStats&) = delete;

  // One GraphRewrite run of `pass` with `matcher`, which rewrote `rewrites` nodes (-1: a stage that is
  // not a rule table, listed so the table shows the whole pipeline).
  void AddPass(std::string_view pass, std::string_view matcher, int64_t rewrites);
  // `n` more hits of `rule` (built in `rule_matcher`) during `pass`.
  void AddHits(std::string_view pass, std::string_view rule_matcher, std::string_view rule, int64_t n = 1);

  // Hits of the rule named `rule` during passes named `pass`, over all matchers (0 if none).
  int64_t Hits(std::string_view pass, std::string_view rule) const;
  // Rewrites in the passes named `pass` (0 if it never ran; imperative stages count 0).
  int64_t PassRewrites(std::string_view pass) const;
  // Whether a pass named `pass` ran at least once.
  bool Ran(std::string_view pass) const;

  // Adds every row of `other` (same keys add up). `other` must not be this object.
  void Merge(const RewriteStats& other);

  std::vector<PassRow> Passes() const;
  std::vector<RuleRow> Rules() const;
  // One line per pass, in first-seen order, then its rules' hits indented below it:
  //   pass 'lower index dtype' [lower_index_dtype]: 1 run, 42 rewrites
  //          42  lower_index_dtype: index -> int32/int64
  std::string Format() const;
  void Clear();

 private:
  mutable absl::Mutex mu_;
  std::vector<PassRow> passes_ ABSL_GUARDED_BY(mu_);
  std::vector<RuleRow> rules_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, size_t> pass_index_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, size_t> rule_index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln
