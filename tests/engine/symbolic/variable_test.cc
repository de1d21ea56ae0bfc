#include "engine/symbolic/variable.h"

#include "engine/symbolic/range.h"
#include "engine/symbolic/symbolic.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

TEST(VariableTest, BindAndUnbind) {
  UOpPtr v = UOp::Variable("batch", 1, 64);
  auto b = Bind(v, 8);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->op(), Op::BIND);
  auto u = Unbind(*b);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->first, v);
  EXPECT_EQ(u->second, 8);
  // a bound variable keeps the variable's range
  EXPECT_EQ(VMin(*b), 1);
  EXPECT_EQ(VMax(*b), 64);
}

TEST(VariableTest, BindOutOfRangeIsAnError) {
  UOpPtr v = UOp::Variable("batch", 1, 64);
  auto b = Bind(v, 65);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("batch"), std::string_view::npos);
  EXPECT_NE(b.status().message().find("[1, 64]"), std::string_view::npos);
  EXPECT_FALSE(Bind(UOp::ConstInt(3), 1).ok());
  EXPECT_FALSE(Unbind(v).ok());
}

TEST(VariableTest, Evaluate) {
  UOpPtr x = UOp::Variable("x", 0, 100), y = UOp::Variable("y", -10, 10);
  EXPECT_EQ(*Evaluate((x * 4 + 8) / 4, {{"x", 7}}), 9);
  EXPECT_EQ(*Evaluate(y / 4 + y % 4, {{"y", -7}}), -1 + -3);
  EXPECT_EQ(*Evaluate(Where(Lt(x, 5), x, y), {{"x", 9}, {"y", -2}}), -2);
  EXPECT_EQ(*Evaluate(*Bind(x, 12) * 2), 24);
  EXPECT_EQ(*Evaluate(Lt(x, 3), {{"x", 2}}), 1);
}

TEST(VariableTest, EvaluateErrorsNeverTrap) {
  UOpPtr x = UOp::Variable("x", 0, 100), y = UOp::Variable("y", -10, 10);
  auto r = Evaluate(x / y, {{"x", 5}, {"y", 0}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("division by zero"), std::string_view::npos);
  EXPECT_FALSE(Evaluate(x % y, {{"x", 5}, {"y", 0}}).ok());
  EXPECT_FALSE(Evaluate(x, {}).ok());                  // no value
  EXPECT_FALSE(Evaluate(x, {{"x", 101}}).ok());        // out of range
  EXPECT_FALSE(Evaluate(Cast(x, dtypes::kFloat32), {{"x", 1}}).ok());
  EXPECT_FALSE(Evaluate(UOp::Range(4, 0)).ok());
  EXPECT_FALSE(Evaluate(UOp::ConstInt(5) / UOp::ConstInt(0)).ok());
}

TEST(VariableTest, SubstituteAndUnbindAll) {
  UOpPtr x = UOp::Variable("x", 0, 100), y = UOp::Variable("y", 0, 10);
  UOpPtr e = (x + y) * 3;
  UOpPtr s = Substitute(e, {{y, UOp::ConstInt(4)}});
  EXPECT_EQ(s, (x + UOp::ConstInt(4)) * 3);
  EXPECT_EQ(Simplify(s), x * 3 + 12);
  UOpPtr bound = *Bind(x, 7) + *Bind(y, 2);
  VarVals vals;
  auto ub = UnbindAll(bound, &vals);
  ASSERT_TRUE(ub.ok());
  EXPECT_EQ(*ub, x + y);
  EXPECT_EQ(vals.at("x"), 7);
  EXPECT_EQ(vals.at("y"), 2);
  auto sv = SubstituteValues(x + y, vals);
  ASSERT_TRUE(sv.ok());
  EXPECT_EQ(Simplify(*sv), UOp::ConstInt(9));
  EXPECT_FALSE(SubstituteValues(x, {{"x", 1000}}).ok());
  VarVals conflict;
  EXPECT_FALSE(UnbindAll(*Bind(x, 1) + *Bind(x, 2), &conflict).ok());
}

TEST(VariableTest, SubstituteDeepChain) {
  UOpPtr x = UOp::Variable("x", 0, 100);
  UOpPtr e = x;
  for (int i = 0; i < 300000; ++i) e = e + 1;
  UOpPtr s = Substitute(e, {{x, UOp::ConstInt(1)}});
  EXPECT_EQ(*Evaluate(s), 300001);
}

}  // namespace
}  // namespace kiln
