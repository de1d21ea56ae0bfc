// GraphRewrite on million-node graphs: iterative traversal, no recursion (label: slow).
#include <gtest/gtest.h>

#include "engine/rewrite/graph_rewrite.h"

namespace kiln {
namespace {

TEST(GraphRewriteLargeTest, MillionNodeChain) {
  constexpr int kN = 1000000;
  UOpPtr v = UOp::Variable("v", 0, 10);
  UOpPtr e = v;
  for (int i = 0; i < kN; ++i) e = UOp::Alu(Op::NEG, {e});
  // NEG(NEG(x)) -> x collapses pairs; an even chain reduces to v.
  PatternMatcher pm({{UPat(Op::NEG).Src({UPat(Op::NEG).Src({UPat::Var("x")})}),
                      [](const Bindings& b) { return b["x"]; }, "--x -> x"}});
  auto out = GraphRewrite(e, pm);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, v);
  PatternMatcher none({{UPat(Op::ADD), [](const Bindings&) { return UOpPtr(); }, "never"}});
  for (RewriteOptions o : {RewriteOptions{.bottom_up = true}, RewriteOptions{.walk = true}}) {
    auto same = GraphRewrite(e, none, o);
    ASSERT_TRUE(same.ok());
    EXPECT_EQ(*same, e);
  }
}

}  // namespace
}  // namespace kiln
