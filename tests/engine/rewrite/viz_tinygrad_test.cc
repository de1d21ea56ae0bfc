// The rewrite trace (VIZ, engine/rewrite/trace.h) against tinygrad's own VIZ record (issue #22):
// viz_tinygrad_ref.py builds small graphs with tinygrad, rewrites them with tinygrad's
// symbolic_simple under TRACK_MATCH_STATS=2 and prints, in kiln's UOp text form, each input graph
// and tinygrad's result, and the rules tinygrad's trace lists for the rewrite. Here kiln rewrites
// the same graph with its SymbolicSimple and its trace must list the same rules the same number of
// times, end at the same graph, and replay (ReplayMatches) to exactly that node. (The order of the
// matches is not compared: both rewrite a node's sources before the node, but kiln's worklist takes
// independent subtrees in another order than tinygrad's stack -- the first case shows it.)
// tinygrad's rules are named by their source line; kTinygradRules maps them to kiln's names.
// Every expected number comes from tinygrad, at test time.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/base/env.h"
#include "engine/rewrite/graph_rewrite.h"
#include "engine/rewrite/trace.h"
#include "engine/symbolic/symbolic.h"
#include "engine/uop/parser.h"
#include "engine/uop/printer.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

// tinygrad symbolic_simple rule (a piece of its source line) -> the kiln SymbolicSimple rule.
struct RuleName {
  const char* tinygrad;
  const char* kiln;
};
constexpr RuleName kTinygradRules[] = {
    {"UPat({Ops.ADD, Ops.XOR, Ops.OR}, src=[UPat.var(\"x\"), UPat.const(0)])", "x+0 -> x"},
    {"(UPat.var(\"x\") * 1, ", "x*1 -> x"},
    {"((UPat.var(\"x\") ^ UPat.var(\"y\")) ^ UPat.var(\"y\"), ", "(x^y)^y -> x"},
    {"(UPat.var(\"x\") // 1, ", "x//1 -> x"},
    {"(UPat.var(\"x\") // UPat.var(\"x\"), ", "x//x -> 1"},
    {"(UPat(GroupOp.Idempotent, src=(UPat.var(\"x\"), UPat.var(\"x\")))", "max(x,x) -> x"},
    {"(UPat.var(\"x\") < UPat.var(\"x\"), ", "x<x -> false"},
    {"(UPat.var(\"x\") ^ UPat.var(\"x\"), ", "x^x -> 0"},
    {"(UPat.var(\"x\") & 0, ", "x&0 -> 0"},
    {"(UPat(GroupOp.Binary-{Ops.THREEFRY}, src=(const_folding_pat,)*2, name=\"a\"), "
     "fold_const_alu)",
     "c1 op c2 -> c3"},
    {"(UPat.cvar(\"gate\").where(UPat.var(\"c0\"), UPat.var(\"c1\")).named(\"w\"), "
     "fold_const_where)",
     "where(const g,x,y) -> x or y"},
};

struct Case {
  std::string name;
  std::string input;   // UOp text
  std::string output;  // UOp text of tinygrad's result
  std::vector<std::string> matches;  // "symbolic.py:111 <source line>"
};

// Runs the reference script; its cases, or a failure message in `error`.
std::vector<Case> TinygradCases(std::string* error) {
  const std::string cmd = absl::StrCat(KILN_TEST_PYTHON, " ", KILN_VIZ_TINYGRAD_REF, " 2>&1");
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *error = "cannot run " + cmd;
    return {};
  }
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) text.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0 || !absl::EndsWith(text, "done\n")) {
    *error = absl::StrCat(cmd, " failed (", rc, "):\n", text);
    return {};
  }
  std::vector<Case> cases;
  std::string* block = nullptr;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (block != nullptr) {
      if (line == "end") {
        block = nullptr;
      } else {
        absl::StrAppend(block, line, "\n");
      }
    } else if (absl::StartsWith(line, "case ")) {
      cases.push_back({std::string(line.substr(5)), "", "", {}});
    } else if (line == "input" && !cases.empty()) {
      block = &cases.back().input;
    } else if (line == "output" && !cases.empty()) {
      block = &cases.back().output;
    } else if (absl::StartsWith(line, "match ") && !cases.empty()) {
      cases.back().matches.emplace_back(line.substr(6));
    }
  }
  return cases;
}

// kiln's name for a rule tinygrad's trace lists; "" (and a failure) when the table has none.
std::string KilnName(const std::string& tinygrad_match) {
  std::string found;
  for (const RuleName& r : kTinygradRules) {
    if (!absl::StrContains(tinygrad_match, r.tinygrad)) continue;
    EXPECT_TRUE(found.empty()) << "two kTinygradRules rows match " << tinygrad_match;
    found = r.kiln;
  }
  EXPECT_FALSE(found.empty()) << "no kTinygradRules row for tinygrad's rule " << tinygrad_match;
  return found;
}

TEST(VizTinygradTest, TraceListsTinygradsRewritesAndReplaysToTheResult) {
  std::string error;
  const std::vector<Case> cases = TinygradCases(&error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_EQ(cases.size(), 2u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<UOpPtr> input = ParseGraphSingle(c.input);
    ASSERT_TRUE(input.ok()) << input.status() << "\n" << c.input;
    absl::StatusOr<UOpPtr> tinygrad_result = ParseGraphSingle(c.output);
    ASSERT_TRUE(tinygrad_result.ok()) << tinygrad_result.status() << "\n" << c.output;
    ASSERT_FALSE(c.matches.empty());

    RewriteTrace& trace = RewriteTrace::Get();
    trace.Clear();
    const std::string pass_name = absl::StrCat("viz parity ", c.name);
    absl::StatusOr<UOpPtr> out;
    {
      Context viz({{Knob::kTrackMatchStats, 2}});  // what VIZ=1 turns on
      out = GraphRewrite(*input, SymbolicSimple(), {.name = pass_name});
    }
    ASSERT_TRUE(out.ok()) << out.status();
    const std::vector<TracedPass> passes = trace.Passes();
    ASSERT_EQ(passes.size(), 1u) << trace.Format();
    EXPECT_EQ(passes[0].name, pass_name);
    EXPECT_EQ(passes[0].input, *input);
    EXPECT_EQ(passes[0].output, *out);
    const std::vector<TracedMatch> matches = trace.MatchesOf(passes[0].id);

    // The same rules, each the same number of times.
    std::vector<std::string> want, got;
    std::map<std::string, int> want_counts, got_counts;
    for (const std::string& m : c.matches) ++want_counts[want.emplace_back(KilnName(m))];
    for (const TracedMatch& m : matches) ++got_counts[got.emplace_back(m.rule)];
    EXPECT_EQ(got_counts, want_counts) << "kiln:     " << absl::StrJoin(got, " | ")
                                       << "\ntinygrad: " << absl::StrJoin(want, " | ");
    EXPECT_EQ(passes[0].num_matches, static_cast<int64_t>(c.matches.size()));

    // The same final graph (interned: the same node), and the recorded steps lead there.
    EXPECT_EQ(*out, *tinygrad_result) << "kiln:\n" << PrintGraph(*out) << "tinygrad:\n" << c.output;
    absl::StatusOr<UOpPtr> replayed = ReplayMatches(passes[0].input, matches);
    ASSERT_TRUE(replayed.ok()) << replayed.status();
    EXPECT_EQ(*replayed, passes[0].output) << PrintGraph(*replayed);
    // Every prefix of the steps replays too (what stepping through the pass shows).
    for (size_t n = 0; n < matches.size(); ++n) {
      const absl::Span<const TracedMatch> prefix(matches.data(), n);
      EXPECT_TRUE(ReplayMatches(passes[0].input, prefix).ok()) << n;
    }
    trace.Clear();
  }
}

TEST(VizTinygradTest, ReplayRefusesAStepWhoseNodeIsNotInTheGraph) {
  UOpPtr x = UOp::Variable("x", 0, 10);
  UOpPtr y = UOp::Variable("y", 0, 10);
  TracedMatch m;
  m.rule = "x+0 -> x";
  m.before = y + 0;  // not in x+0
  m.after = y;
  absl::StatusOr<UOpPtr> r = ReplayMatches(x + 0, absl::Span<const TracedMatch>(&m, 1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "replay step 0 (x+0 -> x)")) << r.status();
  m.before = x + 0;
  m.after = x;
  r = ReplayMatches(x + 0, absl::Span<const TracedMatch>(&m, 1));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, x);
}

}  // namespace
}  // namespace kiln
