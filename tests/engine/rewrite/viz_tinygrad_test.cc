// The rewrite trace (VIZ, engine/rewrite/trace.h) against tinygrad's own VIZ record (issue #22):
// viz_tinygrad_ref.py builds small graphs with tinygrad, rewrites them with tinygrad's
// symbolic_simple or symbolic under TRACK_MATCH_STATS=2 and prints, in kiln's UOp text form, each
// input graph and tinygrad's result, and the rules tinygrad's trace lists for the rewrite. Here kiln
// rewrites the same graph with its SymbolicSimple or Symbolic and its trace must list the same
// rules the same number of times, end at the same graph, and replay (ReplayMatches) to exactly that
// node. (The order of the matches is not compared: both rewrite a node's sources before the node,
// but kiln's worklist takes independent subtrees in another order than tinygrad's stack -- the
// first case shows it.) tinygrad's rules are named by their source line; kTinygradRules maps kiln's
// names to them (one tinygrad rule written for several ops is several kiln rules, and kiln's
// canonical reordering, which tinygrad does at construction, has no tinygrad row: it is counted
// apart and must not change the result). Every expected number comes from tinygrad, at test time.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
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

// A tinygrad rule (a piece of its source line) and a kiln rule that does its work. Several rows may name one tinygrad
// rule: kiln spells some of tinygrad's multi-op rules once per op.
struct RuleName {
  const char* tinygrad;
  const char* kiln;
  // kiln builds this rule's replacement with its constant arithmetic folded (UOp builders fold CONST op CONST), where
  // tinygrad's trace lists that fold as the next match (fold_const_alu): one step in kiln, two in tinygrad.
  bool folds_its_constants = false;
};
constexpr RuleName kTinygradRules[] = {
    // symbolic_simple
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
    // symbolic
    {"(UPat.var(\"x\") * UPat.cvar(\"c0\") + UPat.var(\"x\") * UPat.cvar(\"c1\"), ",
     "x*c0+x*c1 -> x*(c0+c1)", true},
    {"((UPat.var(\"y\") + UPat.var(\"x\") * UPat.cvar(\"c0\")) + UPat.var(\"x\") * UPat.cvar(\"c1\"), ",
     "(y+x*c0)+x*c1 -> y+x*(c0+c1)", true},
    {"((UPat.var(\"y\") + UPat.var(\"x\")) + UPat.var(\"x\") * UPat.cvar(\"c\"), ",
     "(y+x)+x*c -> y+x*(c+1)", true},
    {"*((UPat.var(\"x\").alu(op, UPat.cvar(\"c1\")).alu(op, UPat.cvar(\"c2\")).named(\"f\"),",
     "(x+c1)+c2 -> x+(c1+c2)", true},
    {"*((UPat.var(\"x\").alu(op, UPat.cvar(\"c1\")).alu(op, UPat.cvar(\"c2\")).named(\"f\"),",
     "(x*c1)*c2 -> x*(c1*c2)", true},
    {"(UPat({Ops.CMPLT, Ops.CMPNE, Ops.FLOORDIV, Ops.FLOORMOD, Ops.PARAM, Ops.AFTER, Ops.SPECIAL}, name=\"x\"),",
     "cmp with vmin==vmax -> const"},
    {"(UPat({Ops.CMPLT, Ops.CMPNE, Ops.FLOORDIV, Ops.FLOORMOD, Ops.PARAM, Ops.AFTER, Ops.SPECIAL}, name=\"x\"),",
     "x with vmin==vmax -> const"},
};
// kiln's canonical order of commutative sources: tinygrad orders them when it builds a node.
constexpr const char* kCanonicalOrder = "a op b -> b op a (canonical order)";

struct Case {
  std::string name;
  std::string matcher;  // "symbolic_simple" or "symbolic"
  bool rules = true;    // compare the rules ("rules"), or only the result ("result")
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
      const size_t mode = line.rfind(' ');
      const size_t matcher = line.rfind(' ', mode - 1);
      cases.push_back({std::string(line.substr(5, matcher - 5)),
                       std::string(line.substr(matcher + 1, mode - matcher - 1)), line.substr(mode + 1) == "rules",
                       "", "", {}});
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

// The kTinygradRules key (tinygrad's rule) of a rule tinygrad's trace lists; "" (and a failure) when the table has
// none. `folds` tells whether kiln folds that rule's constant arithmetic in the same step (every row of the rule
// says the same).
std::string TinygradKey(const std::string& tinygrad_match, bool* folds) {
  std::string found;
  for (const RuleName& r : kTinygradRules) {
    if (!absl::StrContains(tinygrad_match, r.tinygrad)) continue;
    EXPECT_TRUE(found.empty() || found == r.tinygrad) << "two kTinygradRules rules match " << tinygrad_match;
    found = r.tinygrad;
    *folds = r.folds_its_constants;
  }
  EXPECT_FALSE(found.empty()) << "no kTinygradRules row for tinygrad's rule " << tinygrad_match;
  return found;
}
constexpr const char* kFoldConstAlu = "fold_const_alu)";

// `root` with the sources of every commutative op in kiln's canonical order (CanonicalBefore): tinygrad's
// symbolic leaves a constant on the left where a rule put it there ((y+x)+x*c -> y+x*(c+1) with y a constant).
UOpPtr CanonicalOrder(const UOpPtr& root) {
  absl::flat_hash_map<const UOp*, UOpPtr> done;
  for (const UOp* u : Toposort(absl::Span<const UOpPtr>(&root, 1))) {
    std::vector<UOpPtr> src;
    for (const UOpPtr& s : u->src()) src.push_back(done.at(s.get()));
    const bool commutative = u->op() == Op::ADD || u->op() == Op::MUL || u->op() == Op::MAX ||
                             u->op() == Op::AND || u->op() == Op::OR || u->op() == Op::XOR ||
                             u->op() == Op::CMPNE;
    if (commutative && src.size() == 2 && CanonicalBefore(*src[1], *src[0])) std::swap(src[0], src[1]);
    done[u] = UOp::Make(u->op(), u->dtype(), src, u->arg());
  }
  return done.at(root.get());
}

// The tinygrad rule a kiln rule stands for; "" (and a failure) when the table has none.
std::string TinygradKeyOfKiln(const std::string& kiln_rule) {
  for (const RuleName& r : kTinygradRules)
    if (kiln_rule == r.kiln) return r.tinygrad;
  ADD_FAILURE() << "kiln fired " << kiln_rule << ", which has no kTinygradRules row";
  return "";
}

TEST(VizTinygradTest, TraceListsTinygradsRewritesAndReplaysToTheResult) {
  std::string error;
  const std::vector<Case> cases = TinygradCases(&error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_EQ(cases.size(), 8u);
  int symbolic_cases = 0, result_cases = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(c.matcher == "symbolic_simple" || c.matcher == "symbolic") << c.matcher;
    symbolic_cases += c.matcher == "symbolic";
    result_cases += !c.rules;
    const PatternMatcher& rules = c.matcher == "symbolic" ? Symbolic() : SymbolicSimple();
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
      out = GraphRewrite(*input, rules, {.name = pass_name});
    }
    ASSERT_TRUE(out.ok()) << out.status();
    const std::vector<TracedPass> passes = trace.Passes();
    ASSERT_EQ(passes.size(), 1u) << trace.Format();
    EXPECT_EQ(passes[0].name, pass_name);
    EXPECT_EQ(passes[0].input, *input);
    EXPECT_EQ(passes[0].output, *out);
    const std::vector<TracedMatch> matches = trace.MatchesOf(passes[0].id);

    // The same rules, each the same number of times (kiln's canonical reorderings apart); for a result case, only
    // that there were rewrites.
    if (c.rules) {
      std::vector<std::string> want, got;
      std::map<std::string, int> want_counts, got_counts;
      int reorderings = 0, merged = 0;
      bool previous_folds = false;
      for (const std::string& m : c.matches) {
        want.push_back(m);
        if (previous_folds && absl::StrContains(m, kFoldConstAlu)) {
          ++merged;  // the fold of the previous rule's constants: part of that step in kiln
          previous_folds = false;
          continue;
        }
        bool folds = false;
        ++want_counts[TinygradKey(m, &folds)];
        previous_folds = folds;
      }
      for (const TracedMatch& m : matches) {
        got.push_back(m.rule);
        if (m.rule == kCanonicalOrder) {
          ++reorderings;
        } else {
          ++got_counts[TinygradKeyOfKiln(m.rule)];
        }
      }
      EXPECT_EQ(got_counts, want_counts) << "kiln:     " << absl::StrJoin(got, " | ")
                                         << "\ntinygrad: " << absl::StrJoin(want, "\n          ");
      EXPECT_EQ(passes[0].num_matches, static_cast<int64_t>(c.matches.size()) - merged + reorderings);
    } else {
      EXPECT_GT(matches.size(), 0u);
    }

    // The same final graph (interned: the same node; under symbolic, up to the order of commutative sources), and
    // the recorded steps lead there.
    const UOpPtr want_result = c.matcher == "symbolic" ? CanonicalOrder(*tinygrad_result) : *tinygrad_result;
    EXPECT_EQ(*out, want_result) << "kiln:\n" << PrintGraph(*out) << "tinygrad:\n" << c.output;
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
  EXPECT_EQ(symbolic_cases, 6);
  EXPECT_EQ(result_cases, 2);
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
