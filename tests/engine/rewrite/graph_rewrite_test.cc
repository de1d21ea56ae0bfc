// GraphRewrite modes, memoization and limits, after tinygrad's test/null/test_graph_rewrite.py.
#include "engine/rewrite/graph_rewrite.h"

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/container/flat_hash_map.h"
#include "engine/rewrite/pattern_matcher.h"

namespace kiln {
namespace {

UOpPtr I(int64_t v) { return UOp::ConstInt(v); }

int64_t CVal(const Bindings& b, const char* n) { return b[n]->ArgInt(); }

// ** constant folding + reassociation (index dtype) **
PatternMatcher FoldPm() {
  UPat x = UPat::Var("x"), c1 = UPat::CVar("c1"), c2 = UPat::CVar("c2");
  return PatternMatcher(
      {
          {c1 + c2, [](const Bindings& b) { return I(CVal(b, "c1") + CVal(b, "c2")); }, "c1+c2 -> c"},
          {c1 * c2, [](const Bindings& b) { return I(CVal(b, "c1") * CVal(b, "c2")); }, "c1*c2 -> c"},
          {x + 0, [](const Bindings& b) { return b["x"]; }, "x+0 -> x"},
          {(x + c1) + c2, [](const Bindings& b) { return b["x"] + (CVal(b, "c1") + CVal(b, "c2")); },
           "(x+c1)+c2 -> x+(c1+c2)"},
      },
      "fold");
}

TEST(GraphRewriteTest, ConstFoldingDefault) {
  UOpPtr v = UOp::Variable("v", 0, 10);
  UOpPtr e = ((v + 1) + 2) + (I(3) + I(-3));
  auto out = GraphRewrite(e, FoldPm());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, v + 3);
}

TEST(GraphRewriteTest, ConstFoldingBottomUp) {
  // The parent is offered to the rules before its children are folded; once they are, the rebuilt
  // parent is offered again, so the whole tree folds.
  UOpPtr e = (I(1) + I(2)) * (I(3) + I(4));
  auto out = GraphRewrite(e, FoldPm(), {.bottom_up = true});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, I(21));
  auto out2 = GraphRewrite(e, FoldPm());
  ASSERT_TRUE(out2.ok());
  EXPECT_EQ(*out2, I(21));
}

TEST(GraphRewriteTest, NoMatchReturnsSameRoot) {
  UOpPtr v = UOp::Variable("v", 0, 10);
  UOpPtr e = UOp::Sink({v * 2, v + 1});
  for (RewriteOptions o : {RewriteOptions{}, RewriteOptions{.bottom_up = true}, RewriteOptions{.walk = true}}) {
    auto out = GraphRewrite(e, FoldPm(), o);
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(*out, e);
  }
}

// ** substitute **
struct SubCtx {
  absl::flat_hash_map<const UOp*, UOpPtr> map;
  absl::flat_hash_map<const UOp*, int> visits;
};

PatternMatcher SubstitutePm() {
  return PatternMatcher({{UPat::Var("x"),
                          [](const Bindings& b) -> UOpPtr {
                            SubCtx* c = b.ctx<SubCtx>();
                            ++c->visits[b.root().get()];
                            auto it = c->map.find(b.root().get());
                            return it == c->map.end() ? nullptr : it->second;
                          },
                          "substitute"}},
                        "substitute");
}

TEST(GraphRewriteTest, SubstituteDiamondRewritesSharedNodeOnce) {
  UOpPtr v = UOp::Variable("v", 0, 10), w = UOp::Variable("w", 0, 10);
  UOpPtr a = v + 1;              // shared
  UOpPtr root = (a * 2) + (a * 3);
  for (bool bottom_up : {false, true}) {
    SubCtx ctx;
    ctx.map[v.get()] = w;
    auto out = GraphRewrite(root, SubstitutePm(), {.bottom_up = bottom_up, .ctx = &ctx});
    ASSERT_TRUE(out.ok());
    UOpPtr wa = w + 1;
    EXPECT_EQ(*out, (wa * 2) + (wa * 3));
    // Every node (the shared one included) is offered to the rules at most once, not once per
    // user. In default mode `a` itself is never offered: its source changed, so the rebuilt w+1 is.
    for (const auto& [node, n] : ctx.visits) EXPECT_EQ(n, 1) << "bottom_up=" << bottom_up;
    EXPECT_EQ(ctx.visits[v.get()], 1);
    EXPECT_EQ(ctx.visits[wa.get()], 1);
    EXPECT_EQ(ctx.visits.count(a.get()), bottom_up ? 1u : 0u);
  }
}

TEST(GraphRewriteTest, SubstituteWalk) {
  UOpPtr v = UOp::Variable("v", 0, 10), w = UOp::Variable("w", 0, 10);
  UOpPtr a = v + 1;
  UOpPtr root = UOp::Sink({a * 2, a * 3, a});
  SubCtx ctx;
  ctx.map[v.get()] = w;
  auto out = GraphRewrite(root, SubstitutePm(), {.bottom_up = true, .walk = true, .ctx = &ctx});
  ASSERT_TRUE(out.ok());
  UOpPtr wa = w + 1;
  EXPECT_EQ(*out, UOp::Sink({wa * 2, wa * 3, wa}));
  EXPECT_EQ(ctx.visits[a.get()], 1);
}

// ** visit order **
struct OrderCtx {
  std::vector<std::string> log;
};

// A matcher that logs "<tag>(name)" for every node it is offered and never rewrites.
PatternMatcher Recorder(const std::string& tag) {
  if (tag == "pm") {
    return PatternMatcher({{UPat::Var("x"),
                            [](const Bindings& b) -> UOpPtr {
                              b.ctx<OrderCtx>()->log.push_back("pm(" + b.root()->ArgStr() + ")");
                              return nullptr;
                            },
                            "record"}},
                          "pm");
  }
  return PatternMatcher({{UPat::Var("x"),
                          [](const Bindings& b) -> UOpPtr {
                            b.ctx<OrderCtx>()->log.push_back("bpm(" + b.root()->ArgStr() + ")");
                            return nullptr;
                          },
                          "record"}},
                        "bpm");
}

// NOOP nodes named by their string arg: parent(child1(grandchild), child2).
UOpPtr Named(std::string name, std::vector<UOpPtr> src = {}) {
  return UOp::Make(Op::NOOP, dtypes::kVoid, src, Arg(std::move(name)));
}

using Log = std::vector<std::string>;

TEST(GraphRewriteTest, VisitOrderDefault) {
  UOpPtr root = Named("parent", {Named("child1"), Named("child2")});
  OrderCtx ctx;
  ASSERT_TRUE(GraphRewrite(root, Recorder("pm"), {.ctx = &ctx}).ok());
  EXPECT_EQ(ctx.log, (Log{"pm(child1)", "pm(child2)", "pm(parent)"}));
}

TEST(GraphRewriteTest, VisitOrderBottomUp) {
  UOpPtr root = Named("parent", {Named("child1", {Named("grandchild")}), Named("child2")});
  OrderCtx ctx;
  ASSERT_TRUE(GraphRewrite(root, Recorder("bpm"), {.bottom_up = true, .ctx = &ctx}).ok());
  EXPECT_EQ(ctx.log, (Log{"bpm(parent)", "bpm(child1)", "bpm(grandchild)", "bpm(child2)"}));
}

TEST(GraphRewriteTest, VisitOrderBoth) {
  UOpPtr root = Named("parent", {Named("child1"), Named("child2")});
  OrderCtx ctx;
  PatternMatcher bpm = Recorder("bpm");
  ASSERT_TRUE(GraphRewrite(root, Recorder("pm"), {.bpm = &bpm, .ctx = &ctx}).ok());
  EXPECT_EQ(ctx.log, (Log{"bpm(parent)", "bpm(child1)", "pm(child1)", "bpm(child2)", "pm(child2)",
                          "pm(parent)"}));
}

TEST(GraphRewriteTest, VisitOrderWalk) {
  UOpPtr shared = Named("shared");
  UOpPtr root = Named("parent", {Named("child1", {shared}), Named("child2", {shared})});
  OrderCtx ctx;
  ASSERT_TRUE(GraphRewrite(root, Recorder("pm"), {.walk = true, .ctx = &ctx}).ok());
  EXPECT_EQ(ctx.log, (Log{"pm(shared)", "pm(child1)", "pm(child2)", "pm(parent)"}));
  ctx.log.clear();
  ASSERT_TRUE(GraphRewrite(root, Recorder("bpm"), {.bottom_up = true, .walk = true, .ctx = &ctx}).ok());
  EXPECT_EQ(ctx.log, (Log{"bpm(parent)", "bpm(child1)", "bpm(shared)", "bpm(child2)"}));
}

// ** walk: no fixed point, replacements not re-traversed **
TEST(GraphRewriteTest, WalkDoesNotRevisitReplacements) {
  // c -> c+0 would never terminate under a fixed point (the result contains c again... and a new
  // CONST 0); walk applies it once per original node.
  PatternMatcher grow({{UPat::CVar("c"), [](const Bindings& b) { return b["c"] + 0; }, "c -> c+0"}});
  UOpPtr v = UOp::Variable("v", 0, 10);
  UOpPtr e = v * 5;
  auto out = GraphRewrite(e, grow, {.walk = true});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, v * (I(5) + 0));
  auto out_bu = GraphRewrite(e, grow, {.bottom_up = true, .walk = true});
  ASSERT_TRUE(out_bu.ok()) << out_bu.status();
  // bottom-up walk matches the replacement's sources once (the new CONST 0) but never the
  // replacement itself, nor the original CONST 5 again.
  EXPECT_EQ(*out_bu, v * (I(5) + (I(0) + 0)));
}

TEST(GraphRewriteTest, WalkIsSinglePass) {
  // ADD(x, c) -> ADD(x, c+1): one step in walk mode.
  PatternMatcher inc({{UPat::Var("x") + UPat::CVar("c"),
                       [](const Bindings& b) { return b["x"] + (b["c"]->ArgInt() + 1); }, "inc"}});
  UOpPtr v = UOp::Variable("v", 0, 10);
  auto out = GraphRewrite(v + 1, inc, {.walk = true});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, v + 2);
}

// ** limits **
TEST(GraphRewriteTest, LegitimateDeepRewriteIsNotALoop) {
  // 3000 consecutive rewrites of one node stay under the default limit.
  PatternMatcher countdown({{UPat::CVar("c").Where([](const UOp& u) { return u.ArgInt() > 0; }),
                             [](const Bindings& b) { return I(b["c"]->ArgInt() - 1); }, "c -> c-1"}});
  auto out = GraphRewrite(I(3000), countdown);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, I(0));
}

PatternMatcher NeverConverges() {
  return PatternMatcher({{UPat(Op::ADD).Src({UPat(Op::DEFINE_VAR).Named("x"), UPat::CVar("c")}),
                          [](const Bindings& b) { return b["x"] + (b["c"]->ArgInt() + 1); },
                          "x+c -> x+(c+1)"}});
}

TEST(GraphRewriteTest, InfiniteLoopDefault) {
  UOpPtr v = UOp::Variable("v", 0, 10);
  auto out = GraphRewrite(UOp::Sink({v + 1}), NeverConverges(), {.step_limit = 1000});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("infinite loop in graph_rewrite"), std::string::npos)
      << out.status();
}

TEST(GraphRewriteTest, InfiniteLoopBottomUp) {
  UOpPtr v = UOp::Variable("v", 0, 10);
  auto out = GraphRewrite(UOp::Sink({v + 1}), NeverConverges(), {.bottom_up = true, .step_limit = 1000});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("infinite loop in graph_rewrite"), std::string::npos)
      << out.status();
}

TEST(GraphRewriteTest, InfiniteLoopNamesThePass) {
  UOpPtr v = UOp::Variable("v", 0, 10);
  auto out = GraphRewrite(v + 1, NeverConverges(), {.name = "runaway", .step_limit = 5000});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("infinite loop in graph_rewrite 'runaway'"), std::string::npos)
      << out.status();
}

TEST(GraphRewriteTest, CycleIsAnError) {
  // v -> v+1: the replacement contains v, which waits for its own replacement.
  PatternMatcher cyc({{UPat(Op::DEFINE_VAR).Named("v"), [](const Bindings& b) { return b["v"] + 1; }, "v -> v+1"}});
  UOpPtr v = UOp::Variable("v", 0, 10);
  for (bool bottom_up : {false, true}) {
    auto out = GraphRewrite(UOp::Sink({v * 2}), cyc, {.bottom_up = bottom_up});
    ASSERT_FALSE(out.ok()) << "bottom_up=" << bottom_up;
    EXPECT_NE(out.status().message().find("infinite loop in graph_rewrite"), std::string::npos);
  }
}

TEST(GraphRewriteTest, BottomUpAndBpmExclusive) {
  PatternMatcher pm = FoldPm();
  auto out = GraphRewrite(I(1), pm, {.bottom_up = true, .bpm = &pm});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GraphRewriteTest, ConcurrentRewritesOfSharedGraph) {
  // Rewrites on many threads over one shared DAG (nodes carry per-rewrite scratch marks) all
  // produce the same result; a nested rewrite over the same nodes also works.
  UOpPtr v = UOp::Variable("v", 0, 10);
  UOpPtr e = v;
  for (int i = 0; i < 300; ++i) e = (e + 1) + 2;
  UOpPtr expected = v + 900;
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  PatternMatcher pm = FoldPm();
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        auto out = GraphRewrite(e, pm, {.bottom_up = (i % 2) == 1});
        ok[t] += out.ok() && *out == expected;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 20);
  static const PatternMatcher* fold = nullptr;
  fold = &pm;
  PatternMatcher nested({{UPat(Op::SINK).Named("s"),
                          [](const Bindings& b) -> UOpPtr {
                            UOpPtr inner = GraphRewriteOrDie(b["s"]->src(0), *fold);
                            return inner == b["s"]->src(0) ? nullptr : UOp::Sink({inner});
                          },
                          "fold inside"}});
  auto out = GraphRewrite(UOp::Sink({e}), nested);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, UOp::Sink({expected}));
}

TEST(GraphRewriteTest, OrDie) {
  EXPECT_EQ(GraphRewriteOrDie(I(2) + I(3), FoldPm()), I(5));
}

}  // namespace
}  // namespace kiln
