// Rule statistics (TRACK_MATCH_STATS >= 1) and the rewrite trace (TRACK_MATCH_STATS >= 2).
#include <string>

#include <gtest/gtest.h>

#include "engine/base/env.h"
#include "engine/rewrite/graph_rewrite.h"
#include "engine/rewrite/pattern_matcher.h"
#include "engine/rewrite/rewrite_stats.h"
#include "engine/rewrite/trace.h"

namespace kiln {
namespace {

PatternMatcher AddZero() {
  UPat x = UPat::Var("x");
  return PatternMatcher({{x + 0, [](const Bindings& b) { return b["x"]; }, "x+0 -> x"},
                         {x * 1, [](const Bindings& b) { return b["x"]; }, "x*1 -> x"}},
                        "stats_test_pm");
}

const RuleStats* Find(const std::vector<RuleStats>& stats, const std::string& rule) {
  for (const RuleStats& s : stats) {
    if (s.matcher == "stats_test_pm" && s.rule == rule) return &s;
  }
  return nullptr;
}

TEST(MatchStatsTest, CountsAttemptsAndHitsWhenEnabled) {
  UOpPtr v = UOp::Variable("v", 0, 10);
  UOpPtr e = ((v + 0) + 3) * 1;  // x+0 hits once, tried on (v+0)+3 too; x*1 hits once
  PatternMatcher pm = AddZero();
  ResetMatchStats();
  {
    Context ctx({{Knob::kTrackMatchStats, 1}});
    auto out = GraphRewrite(e, pm);
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(*out, v + 3);
  }
  std::vector<RuleStats> stats = GetMatchStats();
  const RuleStats* add = Find(stats, "x+0 -> x");
  const RuleStats* mul = Find(stats, "x*1 -> x");
  ASSERT_NE(add, nullptr);
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(add->hits, 1);
  EXPECT_EQ(add->attempts, 2);  // v+0 and (v)+3 (rebuilt); both have a CONST source
  EXPECT_EQ(mul->hits, 1);
  EXPECT_EQ(mul->attempts, 1);
  EXPECT_GE(add->time_ns, add->hit_time_ns);
  // sorted by time, descending
  for (size_t i = 1; i < stats.size(); ++i) EXPECT_GE(stats[i - 1].time_ns, stats[i].time_ns);
  std::string table = FormatMatchStats();
  EXPECT_NE(table.find("stats_test_pm: x+0 -> x"), std::string::npos) << table;
  EXPECT_NE(table.find("TOTAL"), std::string::npos);

  ResetMatchStats();
  EXPECT_EQ(Find(GetMatchStats(), "x+0 -> x")->attempts, 0);
}

TEST(MatchStatsTest, NothingCountedWhenDisabled) {
  ResetMatchStats();
  Context ctx({{Knob::kTrackMatchStats, 0}});
  UOpPtr v = UOp::Variable("v", 0, 10);
  ASSERT_TRUE(GraphRewrite(v + 0, AddZero()).ok());
  std::vector<RuleStats> stats = GetMatchStats();
  const RuleStats* add = Find(stats, "x+0 -> x");
  ASSERT_NE(add, nullptr);  // registered at construction
  EXPECT_EQ(add->attempts, 0);
  EXPECT_EQ(add->hits, 0);
}

TEST(MatchStatsTest, ComposedMatchersShareCounters) {
  ResetMatchStats();
  Context ctx({{Knob::kTrackMatchStats, 1}});
  PatternMatcher a = AddZero();
  PatternMatcher both = a + PatternMatcher({}, "empty");
  UOpPtr v = UOp::Variable("v", 0, 10);
  EXPECT_EQ(both.Rewrite(v + 0), v);
  EXPECT_EQ(Find(GetMatchStats(), "x+0 -> x")->hits, 1);
}

TEST(RewriteTraceTest, RecordsNamedPassesAndMatches) {
  RewriteTrace& trace = RewriteTrace::Get();
  trace.Clear();
  UOpPtr v = UOp::Variable("v", 0, 10);
  UOpPtr e = (v + 0) * 1;
  {
    Context ctx({{Knob::kTrackMatchStats, 2}});
    ASSERT_TRUE(GraphRewrite(e, AddZero(), {.name = "initial symbolic"}).ok());
    ASSERT_TRUE(GraphRewrite(e, AddZero(), {.name = "second", .bottom_up = true}).ok());
  }
  std::vector<TracedPass> passes = trace.Passes();
  ASSERT_EQ(passes.size(), 2u);
  EXPECT_EQ(passes[0].name, "initial symbolic");
  EXPECT_EQ(passes[0].matcher, "stats_test_pm");
  EXPECT_EQ(passes[0].mode, "default");
  EXPECT_EQ(passes[1].mode, "bottom_up");
  EXPECT_TRUE(passes[0].ok);
  EXPECT_EQ(passes[0].input, e);
  EXPECT_EQ(passes[0].output, v);
  EXPECT_EQ(passes[0].num_matches, 2);
  std::vector<TracedMatch> m = trace.MatchesOf(passes[0].id);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].rule, "x+0 -> x");
  EXPECT_EQ(m[0].before, v + 0);
  EXPECT_EQ(m[0].after, v);
  EXPECT_EQ(m[1].rule, "x*1 -> x");
  std::string listing = trace.Format(5);
  EXPECT_NE(listing.find("initial symbolic"), std::string::npos) << listing;
  EXPECT_NE(listing.find("x+0 -> x: ADD -> DEFINE_VAR"), std::string::npos) << listing;
  trace.Clear();
}

TEST(RewriteTraceTest, FailedPassAndNesting) {
  RewriteTrace& trace = RewriteTrace::Get();
  trace.Clear();
  Context ctx({{Knob::kTrackMatchStats, 2}});
  // A rule that runs a nested named rewrite from its callback.
  PatternMatcher inner = AddZero();
  static const PatternMatcher* inner_ptr = nullptr;
  inner_ptr = &inner;
  PatternMatcher outer({{UPat(Op::MUL).Named("m"),
                         [](const Bindings& b) -> UOpPtr {
                           return GraphRewriteOrDie(b["m"]->src(0), *inner_ptr, {.name = "nested"});
                         },
                         "m -> rewrite(src0)"}},
                       "outer");
  UOpPtr v = UOp::Variable("v", 0, 10);
  ASSERT_TRUE(GraphRewrite((v + 0) * 2, outer, {.name = "outer pass"}).ok());
  std::vector<TracedPass> passes = trace.Passes();
  ASSERT_EQ(passes.size(), 2u);
  EXPECT_EQ(passes[0].name, "outer pass");
  EXPECT_EQ(passes[0].depth, 0);
  EXPECT_EQ(passes[1].name, "nested");
  EXPECT_EQ(passes[1].depth, 1);
  EXPECT_EQ(trace.MatchesOf(passes[1].id).size(), 1u);
  EXPECT_EQ(trace.MatchesOf(passes[0].id).size(), 1u);
  // a failing pass is recorded with its error
  PatternMatcher cyc({{UPat(Op::DEFINE_VAR).Named("v"), [](const Bindings& b) { return b["v"] + 1; }, "v -> v+1"}});
  EXPECT_FALSE(GraphRewrite(v * 2, cyc, {.name = "broken"}).ok());
  passes = trace.Passes();
  EXPECT_EQ(passes.back().name, "broken");
  EXPECT_FALSE(passes.back().ok);
  EXPECT_NE(passes.back().error.find("infinite loop"), std::string::npos);
  trace.Clear();
}

TEST(RewriteTraceTest, BoundedMemory) {
  RewriteTrace& trace = RewriteTrace::Get();
  trace.Clear();
  trace.SetCapacity(3, 4);
  {
    Context ctx({{Knob::kTrackMatchStats, 2}});
    UOpPtr v = UOp::Variable("v", 0, 10);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(GraphRewrite((v + 0) * 1, AddZero(), {.name = "p"}).ok());
  }
  EXPECT_EQ(trace.Passes().size(), 3u);
  EXPECT_EQ(trace.Matches().size(), 4u);
  EXPECT_EQ(trace.dropped_passes(), 2);
  EXPECT_EQ(trace.dropped_matches(), 6);
  trace.SetCapacity(4096, 65536);
  trace.Clear();
}

TEST(RewriteTraceTest, NothingRecordedBelowLevelTwo) {
  RewriteTrace& trace = RewriteTrace::Get();
  trace.Clear();
  Context ctx({{Knob::kTrackMatchStats, 1}});
  UOpPtr v = UOp::Variable("v", 0, 10);
  ASSERT_TRUE(GraphRewrite(v + 0, AddZero(), {.name = "quiet"}).ok());
  EXPECT_TRUE(trace.Passes().empty());
  EXPECT_TRUE(trace.Matches().empty());
}

// ---- RewriteStats: the caller-owned sink (RewriteOptions::stats), independent of TRACK_MATCH_STATS ----

TEST(RewriteStatsSinkTest, CountsPassAndRuleHitsWithTheKnobOff) {
  Context ctx({{Knob::kTrackMatchStats, 0}});
  UOpPtr v = UOp::Variable("v", 0, 10);
  UOpPtr e = ((v + 0) + 3) * 1;  // x+0 once, x*1 once
  RewriteStats stats;
  auto out = GraphRewrite(e, AddZero(), {.name = "fold", .stats = &stats});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, v + 3);
  EXPECT_EQ(stats.Hits("fold", "x+0 -> x"), 1);
  EXPECT_EQ(stats.Hits("fold", "x*1 -> x"), 1);
  EXPECT_EQ(stats.PassRewrites("fold"), 2);
  std::vector<RewriteStats::PassRow> passes = stats.Passes();
  ASSERT_EQ(passes.size(), 1u);
  EXPECT_EQ(passes[0].pass, "fold");
  EXPECT_EQ(passes[0].matcher, "stats_test_pm");
  EXPECT_EQ(passes[0].runs, 1);
  std::string table = stats.Format();
  EXPECT_NE(table.find("pass 'fold' [stats_test_pm]: 1 run, 2 rewrites"), std::string::npos) << table;
  EXPECT_NE(table.find("stats_test_pm: x*1 -> x"), std::string::npos) << table;
}

TEST(RewriteStatsSinkTest, PassWithoutHitsIsListedAndSinksCountApart) {
  UOpPtr v = UOp::Variable("v", 0, 10);
  RewriteStats a, b;
  ASSERT_TRUE(GraphRewrite(v + 5, AddZero(), {.name = "nothing", .stats = &a}).ok());
  ASSERT_TRUE(GraphRewrite(v + 0, AddZero(), {.name = "one", .walk = true, .stats = &b}).ok());
  ASSERT_TRUE(GraphRewrite(v + 0, AddZero(), {.name = "one", .bottom_up = true, .stats = &b}).ok());
  EXPECT_TRUE(a.Ran("nothing"));
  EXPECT_EQ(a.PassRewrites("nothing"), 0);
  EXPECT_TRUE(a.Rules().empty());
  EXPECT_FALSE(a.Ran("one"));
  EXPECT_EQ(b.Passes().size(), 1u);
  EXPECT_EQ(b.Passes()[0].runs, 2);
  EXPECT_EQ(b.Hits("one", "x+0 -> x"), 2);
  a.Merge(b);
  EXPECT_EQ(a.Hits("one", "x+0 -> x"), 2);
  EXPECT_EQ(a.Passes().size(), 2u);
  a.Clear();
  EXPECT_TRUE(a.Passes().empty());
}

TEST(RewriteStatsSinkTest, ComposedMatcherKeepsEachRulesMatcherName) {
  UOpPtr v = UOp::Variable("v", 0, 10);
  PatternMatcher other({{UPat::Var("x") * 2, [](const Bindings& b) { return b["x"] + b["x"]; }, "x*2 -> x+x"}},
                       "other_pm");
  PatternMatcher both = AddZero() + other;
  RewriteStats stats;
  ASSERT_TRUE(GraphRewrite((v + 0) * 2, both, {.name = "both", .stats = &stats}).ok());
  EXPECT_EQ(stats.Passes()[0].matcher, "stats_test_pm+other_pm");
  std::string table = stats.Format();
  EXPECT_NE(table.find("other_pm: x*2 -> x+x"), std::string::npos) << table;
  EXPECT_NE(table.find("stats_test_pm: x+0 -> x"), std::string::npos) << table;
}

}  // namespace
}  // namespace kiln
