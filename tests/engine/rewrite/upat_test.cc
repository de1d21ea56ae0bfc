// UPat / PatternMatcher behaviour, after tinygrad's test/null/test_pattern_matcher.py.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/rewrite/pattern_matcher.h"
#include "engine/rewrite/upat.h"
#include "engine/uop/uop.h"

namespace kiln {
namespace {

// The marker a test rule returns on a match (distinct from any node under test).
UOpPtr Marker() { return UOp::Make(Op::NOOP, dtypes::kVoid, {}, Arg(std::string("matched"))); }

// Captured bindings of the last successful match.
struct Captured {
  std::vector<std::pair<std::string, UOpPtr>> vars;
  int calls = 0;
};

// Matches `pat` against `u`; on success fills `cap` with the bindings of `names`.
bool Match(const UPat& pat, const UOpPtr& u, Captured* cap = nullptr,
           std::vector<std::string> names = {}) {
  static thread_local std::vector<std::string>* cur_names = nullptr;
  cur_names = &names;
  PatternMatcher pm({{pat,
                      [](const Bindings& b) -> UOpPtr {
                        if (Captured* c = b.ctx<Captured>()) {
                          ++c->calls;
                          c->vars.clear();
                          for (const std::string& n : *cur_names) {
                            const UOpPtr* p = b.Find(n);
                            c->vars.emplace_back(n, p ? *p : nullptr);
                          }
                        }
                        return Marker();
                      },
                      "test"}});
  return pm.Rewrite(u, cap) == Marker();
}

UOpPtr F32(double v) { return UOp::Const(dtypes::kFloat32, v); }
UOpPtr I32(int64_t v) { return UOp::Const(dtypes::kInt32, v); }

TEST(UPatTest, SimpleMatch) {
  UPat pat = UPat(Op::CONST).Named("x").WithDType(dtypes::kFloat32);
  Captured cap;
  EXPECT_TRUE(Match(pat, F32(1.0), &cap, {"x"}));
  EXPECT_EQ(cap.vars[0].second, F32(1.0));
  EXPECT_FALSE(Match(pat, I32(1)));
}

TEST(UPatTest, AnyAlternatives) {
  UPat pat = UPat::Any({UPat(Op::CONST).WithArg(Arg(ConstFloat(1.0))).Named("x"),
                        UPat(Op::CONST).WithArg(Arg(ConstFloat(2.0))).Named("y")});
  Captured cap;
  EXPECT_TRUE(Match(pat, F32(1.0), &cap, {"x", "y"}));
  EXPECT_EQ(cap.vars[0].second, F32(1.0));
  EXPECT_EQ(cap.vars[1].second, nullptr);  // the other alternative's name is unbound
  EXPECT_TRUE(Match(pat, F32(2.0), &cap, {"x", "y"}));
  EXPECT_EQ(cap.vars[1].second, F32(2.0));
  EXPECT_FALSE(Match(pat, F32(3.0)));
}

TEST(UPatTest, AnyNestedInSource) {
  UPat pat = UPat(Op::NEG).Src({UPat::Any({UPat(Op::RECIPROCAL), UPat(Op::SQRT)}).Named("x")});
  UOpPtr a = F32(2.0);
  EXPECT_TRUE(Match(pat, UOp::Alu(Op::NEG, {UOp::Alu(Op::SQRT, {a})})));
  EXPECT_TRUE(Match(pat, UOp::Alu(Op::NEG, {UOp::Alu(Op::RECIPROCAL, {a})})));
  EXPECT_FALSE(Match(pat, UOp::Alu(Op::NEG, {UOp::Alu(Op::EXP2, {a})})));
}

TEST(UPatTest, MinimumLenAndAllowAnyLen) {
  UOpPtr a = F32(1), b = F32(2), c = F32(3);
  UOpPtr sink3 = UOp::Sink({a, b, c}), sink1 = UOp::Sink({a});
  UPat two = UPat(Op::SINK).Src({UPat::Var("p"), UPat::Var("q")});
  EXPECT_FALSE(Match(two, sink3));  // exact tuple: lengths must be equal
  EXPECT_FALSE(Match(two, sink1));
  Captured cap;
  EXPECT_TRUE(Match(two.AllowAnyLen(), sink3, &cap, {"p", "q"}));  // prefix
  EXPECT_EQ(cap.vars[0].second, a);
  EXPECT_EQ(cap.vars[1].second, b);
  EXPECT_FALSE(Match(two.AllowAnyLen(), sink1));  // still needs at least 2
}

TEST(UPatTest, OpAndOpSet) {
  UOpPtr x = F32(1), y = F32(2);
  EXPECT_TRUE(Match(UPat(Op::ADD), x + y));
  EXPECT_FALSE(Match(UPat(Op::ADD), x * y));
  UPat set(OpSet{Op::ADD, Op::MUL});
  EXPECT_TRUE(Match(set, x + y));
  EXPECT_TRUE(Match(set, x * y));
  EXPECT_FALSE(Match(set, Max(x, y)));
}

TEST(UPatTest, ArgAndFilterArg) {
  UOpPtr r3 = UOp::Range(3, 0), r4 = UOp::Range(4, 1);
  EXPECT_TRUE(Match(UPat(Op::RANGE).WithArg(Arg(AxisArg{0, AxisType::kLoop})), r3));
  EXPECT_FALSE(Match(UPat(Op::RANGE).WithArg(Arg(AxisArg{0, AxisType::kLoop})), r4));
  // filter_arg: a predicate over the node
  UPat big = UPat(Op::CONST).Where([](const UOp& u) { return u.ConstValue() > 10; });
  EXPECT_TRUE(Match(big, I32(11)));
  EXPECT_FALSE(Match(big, I32(10)));
  // chained predicates all must hold
  UPat odd_big = big.Where([](const UOp& u) { return u.ArgInt() % 2 == 1; });
  EXPECT_TRUE(Match(odd_big, I32(11)));
  EXPECT_FALSE(Match(odd_big, I32(12)));
}

TEST(UPatTest, ConstValueAnyDType) {
  EXPECT_TRUE(Match(UPat::Const(int64_t{1}), I32(1)));
  EXPECT_TRUE(Match(UPat::Const(int64_t{1}), F32(1.0)));
  EXPECT_TRUE(Match(UPat::Const(1.5), F32(1.5)));
  EXPECT_FALSE(Match(UPat::Const(int64_t{1}), I32(2)));
  EXPECT_TRUE(Match(UPat::Const(int64_t{1}), UOp::ConstBool(true)));
  EXPECT_FALSE(Match(UPat::Const(int64_t{0}), UOp::Range(3, 0)));
}

TEST(UPatTest, DupNameMustBindSameNode) {
  UPat pat = UPat(Op::ADD).Src({UPat::Var("x"), UPat::Var("x")});
  UOpPtr a = UOp::Variable("a", 0, 10), b = UOp::Variable("b", 0, 10);
  EXPECT_TRUE(Match(pat, a + a));
  EXPECT_FALSE(Match(pat, a + b));
  // across depth
  UPat deep = UPat(Op::MUL).Src({UPat::Var("x") + UPat::Var("y"), UPat::Var("x")});
  EXPECT_TRUE(Match(deep, (a + b) * a));
  EXPECT_TRUE(Match(deep, (b + a) * a));  // ADD sources permute, x binds to a
  EXPECT_FALSE(Match(deep, (a + b) * (a + 1)));
}

TEST(UPatTest, DTypeAndDTypeSet) {
  UPat f = UPat::Var("x", dtypes::kFloat32);
  EXPECT_TRUE(Match(f, F32(1)));
  EXPECT_FALSE(Match(f, I32(1)));
  // a scalar dtype also matches vectors of it
  EXPECT_TRUE(Match(f, UOp::Const(dtypes::kFloat32.Vec(4), 1.0)));
  UPat set = UPat::Var("x").WithDTypes({dtypes::kFloat32, dtypes::kInt32});
  EXPECT_TRUE(Match(set, F32(1)));
  EXPECT_TRUE(Match(set, I32(1)));
  EXPECT_FALSE(Match(set, UOp::Const(dtypes::kInt64, int64_t{1})));
  EXPECT_TRUE(Match(UPat::CVar("c", dtypes::kInt32), I32(4)));
  EXPECT_FALSE(Match(UPat::CVar("c", dtypes::kInt32), UOp::Variable("v", 0, 3)));
}

TEST(UPatTest, SrcOne) {
  UPat pat = UPat(Op::NEG).Src({UPat(Op::CONST).Named("c")});
  Captured cap;
  ASSERT_TRUE(Match(pat, UOp::Alu(Op::NEG, {F32(1)}), &cap, {"c"}));
  EXPECT_EQ(cap.vars[0].second, F32(1));
  EXPECT_FALSE(Match(pat, UOp::Alu(Op::NEG, {F32(1) + F32(2)})));
}

TEST(UPatTest, SrcPermutations) {
  UPat pat = UPat(Op::ADD).SrcPerm({UPat(Op::CONST).Named("c"), UPat(Op::RANGE).Named("r")});
  UOpPtr r = UOp::Range(8, 0), c = UOp::ConstInt(3);
  Captured cap;
  EXPECT_TRUE(Match(pat, r + c, &cap, {"c", "r"}));
  EXPECT_EQ(cap.vars[0].second, c);
  EXPECT_EQ(cap.vars[1].second, r);
  EXPECT_TRUE(Match(pat, c + r, &cap, {"c", "r"}));
  EXPECT_EQ(cap.vars[0].second, c);
  EXPECT_FALSE(Match(pat, r + r));
  // exact tuple does not permute
  UPat exact = UPat(Op::ADD).Src({UPat(Op::CONST), UPat(Op::RANGE)});
  EXPECT_TRUE(Match(exact, c + r));
  EXPECT_FALSE(Match(exact, r + c));
}

TEST(UPatTest, SrcRepeat) {
  UPat pat = UPat(Op::SINK).SrcRepeat(UPat(Op::CONST));
  UOpPtr a = F32(1), b = F32(2), v = UOp::Variable("v", 0, 3);
  EXPECT_TRUE(Match(pat, UOp::Sink({a, b, a})));
  EXPECT_TRUE(Match(pat, UOp::Sink({})));
  EXPECT_FALSE(Match(pat, UOp::Sink({a, v})));
  // a named repeated pattern must bind the same node every time
  UPat same = UPat(Op::SINK).SrcRepeat(UPat::Var("x"));
  EXPECT_TRUE(Match(same, UOp::Sink({a, a, a})));
  EXPECT_FALSE(Match(same, UOp::Sink({a, b})));
}

TEST(UPatTest, DeepSrcPermutations) {
  UOpPtr r = UOp::Range(8, 0), v = UOp::Variable("v", 0, 3), c = UOp::ConstInt(2);
  UPat inner = UPat(Op::MUL).SrcPerm({UPat(Op::RANGE).Named("r"), UPat(Op::CONST).Named("c")});
  UPat pat = UPat(Op::ADD).SrcPerm({inner, UPat(Op::DEFINE_VAR).Named("v")});
  Captured cap;
  for (const UOpPtr& u : {r * c + v, c * r + v, v + r * c, v + c * r}) {
    EXPECT_TRUE(Match(pat, u, &cap, {"r", "c", "v"}));
    EXPECT_EQ(cap.vars[0].second, r);
    EXPECT_EQ(cap.vars[1].second, c);
    EXPECT_EQ(cap.vars[2].second, v);
  }
  EXPECT_FALSE(Match(pat, r * v + c));
}

TEST(UPatTest, EveryBindingOfferedUntilCallbackAccepts) {
  // ADD(x, y) with a callback that only accepts x = CONST: the matcher must offer the swapped
  // permutation after the callback declines the first.
  UOpPtr v = UOp::Variable("v", 0, 3), c = UOp::ConstInt(5);
  PatternMatcher pm({{UPat::Var("x") + UPat::Var("y"),
                      [](const Bindings& b) -> UOpPtr {
                        ++*b.ctx<int>();
                        return b["x"]->IsConst() ? b["y"] : nullptr;
                      },
                      "const on the left"}});
  int calls = 0;
  EXPECT_EQ(pm.Rewrite(v + c, &calls), v);
  EXPECT_EQ(calls, 2);
}

TEST(UPatTest, CallbackReturningSameNodeIsNoMatch) {
  UOpPtr v = UOp::Variable("v", 0, 3);
  PatternMatcher pm({{UPat::Var("x"), [](const Bindings& b) { return b["x"]; }, "identity"},
                     {UPat::Var("x"), [](const Bindings& b) { return b["x"] + 1; }, "plus one"}});
  EXPECT_EQ(pm.Rewrite(v), v + 1);
}

TEST(UPatTest, OperatorSugar) {
  UOpPtr v = UOp::Variable("v", 0, 10);
  UPat x = UPat::Var("x");
  EXPECT_TRUE(Match(x + 0, v + 0));
  EXPECT_TRUE(Match(x + 0, UOp::ConstInt(0) + v));  // commutative
  EXPECT_TRUE(Match(x * 1, v * 1));
  EXPECT_TRUE(Match(x / 2, v / 2));
  EXPECT_FALSE(Match(x / 2, UOp::ConstInt(2) / v));  // CDIV is not commutative
  EXPECT_TRUE(Match(x % 3, v % 3));
  EXPECT_TRUE(Match(Lt(x, 5), Lt(v, 5)));
  EXPECT_TRUE(Match(Max(x, UPat::CVar("c")), Max(UOp::ConstInt(1), v)));
  UOpPtr cond = Lt(v, 3);
  EXPECT_TRUE(Match(Where(UPat::Var("c"), x, UPat::CVar()), Where(cond, v, UOp::ConstInt(0))));
  EXPECT_TRUE(Match(Cast(x), Cast(v, dtypes::kFloat32)));
  EXPECT_TRUE(Match((x + UPat::CVar("c1")) + UPat::CVar("c2"), (v + 1) + 2));
  EXPECT_TRUE(Match((x + UPat::CVar("c1")) + UPat::CVar("c2"), UOp::ConstInt(2) + (UOp::ConstInt(1) + v)));
}

TEST(PatternMatcherTest, EarlyRejectDoesNotChangeResults) {
  // A rule requiring a CONST child is skipped (not attempted) for nodes without one, and still
  // fires when a CONST is present in either position.
  std::vector<int> attempts;
  UPat pat = UPat(Op::ADD).SrcPerm({UPat::Var("x"), UPat(Op::CONST).Named("c")});
  PatternMatcher pm({{pat,
                      [](const Bindings& b) -> UOpPtr {
                        ++*b.ctx<int>();
                        return b["x"];
                      },
                      "x+c -> x"}});
  UOpPtr a = UOp::Variable("a", 0, 5), b = UOp::Variable("b", 0, 5);
  int calls = 0;
  EXPECT_EQ(pm.Rewrite(a + b, &calls), nullptr);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(pm.Rewrite(a + 3, &calls), a);
  EXPECT_EQ(pm.Rewrite(UOp::ConstInt(3) + a, &calls), a);
  EXPECT_EQ(calls, 2);
  // ops not in the rule table are never tried
  EXPECT_EQ(pm.Rewrite(a * 3, &calls), nullptr);
  EXPECT_EQ(calls, 2);
}

TEST(PatternMatcherTest, WildcardRootMatchesEveryOp) {
  PatternMatcher pm({{UPat::Var("x").Where([](const UOp& u) { return u.op() == Op::MUL; }),
                      [](const Bindings& b) { return b["x"]->src(0); }, "mul -> lhs"}});
  UOpPtr a = UOp::Variable("a", 0, 5);
  EXPECT_EQ(pm.Rewrite(a * 3), a);
  EXPECT_EQ(pm.Rewrite(a + 3), nullptr);
}

TEST(PatternMatcherTest, CompositionOrder) {
  UOpPtr a = UOp::Variable("a", 0, 5);
  PatternMatcher first({{UPat::Var("x") + 0, [](const Bindings& b) { return b["x"] * 1; }, "first"}}, "p1");
  PatternMatcher second({{UPat::Var("x") + 0, [](const Bindings& b) { return b["x"]; }, "second"},
                         {UPat::Var("x") * 1, [](const Bindings& b) { return b["x"]; }, "mul"}},
                        "p2");
  PatternMatcher ab = first + second, ba = second + first;
  EXPECT_EQ(ab.num_rules(), 3u);
  EXPECT_EQ(ab.name(), "p1+p2");
  EXPECT_EQ(ab.Rewrite(a + 0), a * 1);  // first's rule wins
  EXPECT_EQ(ba.Rewrite(a + 0), a);      // second's rule wins
  EXPECT_EQ(ab.Rewrite(a * 1), a);      // rules of both are present
}

TEST(PatternMatcherTest, BindingsRootAndCtx) {
  UOpPtr a = UOp::Variable("a", 0, 5);
  struct Ctx {
    UOpPtr seen;
  } ctx;
  PatternMatcher pm({{UPat(Op::NEG).Src({UPat::Var("x")}),
                      [](const Bindings& b) {
                        b.ctx<Ctx>()->seen = b.root();
                        return b["x"];
                      },
                      "neg"}});
  UOpPtr n = UOp::Alu(Op::NEG, {a});
  EXPECT_EQ(pm.Rewrite(n, &ctx), a);
  EXPECT_EQ(ctx.seen, n);
}

}  // namespace
}  // namespace kiln
