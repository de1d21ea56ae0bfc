// Symbolic rule tests: Simplify(expr) must be exactly (pointer-equal, thanks to interning) the
// hand-derived expected node. Each rule family has a "no change" case.
#include "engine/symbolic/symbolic.h"

#include "engine/rewrite/graph_rewrite.h"
#include "engine/symbolic/range.h"
#include "gtest/gtest.h"
#include "tests/engine/symbolic/test_util.h"

namespace kiln {
namespace {

using testing::Render;

UOpPtr C(int64_t v) { return UOp::ConstInt(v); }
UOpPtr CT(DType d, int64_t v) { return UOp::Const(d, v); }
UOpPtr T() { return UOp::ConstBool(true); }
UOpPtr F() { return UOp::ConstBool(false); }
UOpPtr Bin(Op op, const UOpPtr& a, const UOpPtr& b) { return UOp::Alu(op, {a, b}); }

class SymbolicTest : public ::testing::Test {
 protected:
  UOpPtr x = UOp::Variable("x", 0, 100);
  UOpPtr y = UOp::Variable("y", 0, 10);
  UOpPtr z = UOp::Variable("z", -5, 5);
  UOpPtr a = UOp::Variable("a", 0, 7);
  UOpPtr b4 = UOp::Variable("b", 0, 3);
  UOpPtr n = UOp::Variable("n", 1, 10);
  UOpPtr cond = Lt(x, 50);  // a bool that is not constant
  UOpPtr xf = Cast(x, dtypes::kFloat32);
};

#define EXPECT_SIMP(expr, expected)                                                     \
  do {                                                                                  \
    UOpPtr got_ = Simplify(expr);                                                       \
    UOpPtr want_ = (expected);                                                          \
    EXPECT_EQ(got_, want_) << "got " << Render(got_) << " want " << Render(want_);      \
  } while (0)
#define EXPECT_NO_CHANGE(expr)                                                          \
  do {                                                                                  \
    UOpPtr e_ = (expr);                                                                 \
    UOpPtr got_ = Simplify(e_);                                                         \
    EXPECT_EQ(got_, e_) << "changed " << Render(e_) << " into " << Render(got_);        \
  } while (0)

// ** constant folding **
TEST_F(SymbolicTest, ConstFoldAdd) { EXPECT_SIMP(C(3) + C(4), C(7)); }
TEST_F(SymbolicTest, ConstFoldMul) { EXPECT_SIMP(C(3) * C(4), C(12)); }
TEST_F(SymbolicTest, ConstFoldCDiv) { EXPECT_SIMP(C(7) / C(2), C(3)); }
TEST_F(SymbolicTest, ConstFoldCDivNegative) { EXPECT_SIMP(C(-7) / C(2), C(-3)); }
TEST_F(SymbolicTest, ConstFoldCModNegative) { EXPECT_SIMP(C(-7) % C(2), C(-1)); }
TEST_F(SymbolicTest, ConstFoldFloorDiv) { EXPECT_SIMP(Bin(Op::FLOORDIV, C(-7), C(2)), C(-4)); }
TEST_F(SymbolicTest, ConstFoldFloorMod) { EXPECT_SIMP(Bin(Op::FLOORMOD, C(-7), C(2)), C(1)); }
TEST_F(SymbolicTest, ConstFoldDivByZero) { EXPECT_SIMP(C(7) / C(0), C(0)); }
TEST_F(SymbolicTest, ConstFoldModByZero) { EXPECT_SIMP(C(7) % C(0), C(0)); }
TEST_F(SymbolicTest, ConstFoldFloorDivByZero) { EXPECT_SIMP(Bin(Op::FLOORDIV, C(7), C(0)), C(0)); }
TEST_F(SymbolicTest, ConstFoldMinDivMinusOne) {
  EXPECT_SIMP(C(INT64_MIN) / C(-1), C(INT64_MIN));
  EXPECT_SIMP(C(INT64_MIN) % C(-1), C(0));
}
TEST_F(SymbolicTest, ConstFoldInt8Wraps) { EXPECT_SIMP(CT(dtypes::kInt8, 127) + CT(dtypes::kInt8, 1), CT(dtypes::kInt8, -128)); }
TEST_F(SymbolicTest, ConstFoldUInt8Wraps) {
  EXPECT_SIMP(Bin(Op::SUB, CT(dtypes::kUInt8, 0), CT(dtypes::kUInt8, 1)), CT(dtypes::kUInt8, 255));
}
TEST_F(SymbolicTest, ConstFoldInt32Wraps) {
  EXPECT_SIMP(CT(dtypes::kInt32, INT32_MAX) * CT(dtypes::kInt32, 2), CT(dtypes::kInt32, -2));
}
TEST_F(SymbolicTest, ConstFoldLt) { EXPECT_SIMP(Lt(C(3), C(4)), T()); }
TEST_F(SymbolicTest, ConstFoldUnsignedLt) {
  EXPECT_SIMP(Lt(CT(dtypes::kUInt32, 0xffffffffLL), CT(dtypes::kUInt32, 1)), F());
}
TEST_F(SymbolicTest, ConstFoldMax) { EXPECT_SIMP(Max(C(3), C(-4)), C(3)); }
TEST_F(SymbolicTest, ConstFoldCastTruncates) { EXPECT_SIMP(Cast(CT(dtypes::kInt32, 300), dtypes::kUInt8), CT(dtypes::kUInt8, 44)); }
TEST_F(SymbolicTest, ConstFoldCastFloatToInt) {
  EXPECT_SIMP(Cast(UOp::Const(dtypes::kFloat32, 3.7), dtypes::kInt32), CT(dtypes::kInt32, 3));
}
TEST_F(SymbolicTest, ConstFoldCastIntToFloat) { EXPECT_SIMP(Cast(C(5), dtypes::kFloat32), UOp::Const(dtypes::kFloat32, 5.0)); }
TEST_F(SymbolicTest, ConstFoldWhere) { EXPECT_SIMP(Where(T(), C(1), C(2)), C(1)); }
TEST_F(SymbolicTest, ConstFoldShl) { EXPECT_SIMP(Bin(Op::SHL, C(1), C(3)), C(8)); }
TEST_F(SymbolicTest, ConstFoldXor) { EXPECT_SIMP(Bin(Op::XOR, C(5), C(3)), C(6)); }
TEST_F(SymbolicTest, ConstFoldFloatNeg) {
  EXPECT_SIMP(UOp::Make(Op::NEG, dtypes::kFloat32, {UOp::Const(dtypes::kFloat32, 2.0)}), UOp::Const(dtypes::kFloat32, -2.0));
}
TEST_F(SymbolicTest, ConstFoldFloat32Rounds) {
  UOpPtr third = UOp::Const(dtypes::kFloat32, 1.0) / UOp::Const(dtypes::kFloat32, 3.0);
  EXPECT_SIMP(third, UOp::Const(dtypes::kFloat32, static_cast<double>(1.0f / 3.0f)));
}
TEST_F(SymbolicTest, ConstFoldBoolAdd) { EXPECT_SIMP(T() + F(), T()); }
TEST_F(SymbolicTest, ConstFoldOversizedShiftLeftAlone) {
  UOpPtr e = Bin(Op::SHL, C(1), C(64));
  EXPECT_NO_CHANGE(e);
}

// ** self / zero folding **
TEST_F(SymbolicTest, AddZero) { EXPECT_SIMP(x + 0, x); }
TEST_F(SymbolicTest, ZeroAdd) { EXPECT_SIMP(C(0) + x, x); }
TEST_F(SymbolicTest, MulOne) { EXPECT_SIMP(x * 1, x); }
TEST_F(SymbolicTest, MulZero) { EXPECT_SIMP(x * 0, C(0)); }
TEST_F(SymbolicTest, DivOne) { EXPECT_SIMP(x / 1, x); }
TEST_F(SymbolicTest, ModOne) { EXPECT_SIMP(x % 1, C(0)); }
TEST_F(SymbolicTest, XMinusX) { EXPECT_SIMP(x + x * -1, C(0)); }
TEST_F(SymbolicTest, XMinusXSugar) { EXPECT_SIMP(x - x, C(0)); }
TEST_F(SymbolicTest, SubOpSelf) { EXPECT_SIMP(Bin(Op::SUB, x, x), C(0)); }
TEST_F(SymbolicTest, DivSelf) { EXPECT_SIMP(x / x, C(1)); }
TEST_F(SymbolicTest, ModSelf) { EXPECT_SIMP(x % x, C(0)); }
TEST_F(SymbolicTest, MaxSelf) { EXPECT_SIMP(Max(x, x), x); }
TEST_F(SymbolicTest, AndSelf) { EXPECT_SIMP(Bin(Op::AND, cond, cond), cond); }
TEST_F(SymbolicTest, WhereSameBranches) { EXPECT_SIMP(Where(cond, x, x), x); }
TEST_F(SymbolicTest, WhereTrue) { EXPECT_SIMP(Where(T(), x, y), x); }
TEST_F(SymbolicTest, WhereFalse) { EXPECT_SIMP(Where(F(), x, y), y); }
TEST_F(SymbolicTest, LtSelf) { EXPECT_SIMP(Lt(x, x), F()); }
TEST_F(SymbolicTest, NeSelf) { EXPECT_SIMP(Ne(x, x), F()); }
TEST_F(SymbolicTest, EqSelf) { EXPECT_SIMP(Eq(x, x), T()); }
TEST_F(SymbolicTest, CastToSameDType) { EXPECT_SIMP(Cast(x, dtypes::kIndex), x); }
TEST_F(SymbolicTest, DoubleNegation) { EXPECT_SIMP((x * -1) * -1, x); }
TEST_F(SymbolicTest, DoubleNegOp) {
  UOpPtr neg = UOp::Make(Op::NEG, dtypes::kFloat32, {UOp::Make(Op::NEG, dtypes::kFloat32, {xf})});
  EXPECT_SIMP(neg, xf);
}
TEST_F(SymbolicTest, DivMinusOne) { EXPECT_SIMP(x / -1, x * -1); }
TEST_F(SymbolicTest, BoolAndTrue) { EXPECT_SIMP(Bin(Op::AND, cond, T()), cond); }
TEST_F(SymbolicTest, BoolAndFalse) { EXPECT_SIMP(Bin(Op::AND, cond, F()), F()); }
TEST_F(SymbolicTest, BoolOrTrue) { EXPECT_SIMP(Bin(Op::OR, cond, T()), T()); }
TEST_F(SymbolicTest, BoolOrFalse) { EXPECT_SIMP(Bin(Op::OR, cond, F()), cond); }
TEST_F(SymbolicTest, NeFalse) { EXPECT_SIMP(Ne(cond, F()), cond); }
TEST_F(SymbolicTest, WhereTrueFalse) { EXPECT_SIMP(Where(cond, T(), F()), cond); }
TEST_F(SymbolicTest, NotNot) { EXPECT_SIMP(Ne(Ne(cond, T()), T()), cond); }
TEST_F(SymbolicTest, ModModSame) { EXPECT_SIMP((x % n) % n, x % n); }
TEST_F(SymbolicTest, ShlZero) { EXPECT_SIMP(Bin(Op::SHL, x, C(0)), x); }
TEST_F(SymbolicTest, XorSelf) { EXPECT_SIMP(Bin(Op::XOR, x, x), C(0)); }
TEST_F(SymbolicTest, AndZero) { EXPECT_SIMP(Bin(Op::AND, x, C(0)), C(0)); }
TEST_F(SymbolicTest, DivByZeroConst) { EXPECT_SIMP(x / 0, C(0)); }
TEST_F(SymbolicTest, ModByZeroConst) { EXPECT_SIMP(x % 0, C(0)); }
TEST_F(SymbolicTest, BoolMulIsAnd) {
  UOpPtr c2 = Lt(y, 5);
  EXPECT_SIMP(Bin(Op::MUL, cond, c2), Bin(Op::AND, cond, c2));
}
TEST_F(SymbolicTest, FloatMulZeroNoChange) { EXPECT_NO_CHANGE(xf * UOp::Const(dtypes::kFloat32, 0.0)); }
TEST_F(SymbolicTest, FloatSelfNeNoChange) { EXPECT_NO_CHANGE(Ne(xf, xf)); }
TEST_F(SymbolicTest, SelfFoldingNoChange) { EXPECT_NO_CHANGE(x * 3); }

// ** commutative canonical order **
TEST_F(SymbolicTest, ConstToTheRight) { EXPECT_SIMP(C(3) + x, x + 3); }
TEST_F(SymbolicTest, ConstToTheRightMul) { EXPECT_SIMP(C(2) * x, x * 2); }
TEST_F(SymbolicTest, VariablesByName) { EXPECT_SIMP(y + x, x + y); }
TEST_F(SymbolicTest, VariableBeforeMul) { EXPECT_SIMP(x * 2 + y, y + x * 2); }
TEST_F(SymbolicTest, OrderIsStable) {
  UOpPtr s = Simplify(x * 2 + y * 3);
  EXPECT_EQ(Simplify(y * 3 + x * 2), s);
}
TEST_F(SymbolicTest, CanonicalNoChange) { EXPECT_NO_CHANGE(x + y); }

// ** associative constant collection **
TEST_F(SymbolicTest, AddConstConst) { EXPECT_SIMP((x + 3) + 4, x + 7); }
TEST_F(SymbolicTest, MulConstConst) { EXPECT_SIMP((x * 3) * 4, x * 12); }
TEST_F(SymbolicTest, AddConstCancels) { EXPECT_SIMP((x + 3) + -3, x); }
TEST_F(SymbolicTest, MoveConstOut) { EXPECT_SIMP((x + 3) + y, (x + y) + 3); }
TEST_F(SymbolicTest, MoveMulConstOut) { EXPECT_SIMP((x * 3) * y, (x * y) * 3); }
TEST_F(SymbolicTest, MaxConstConst) { EXPECT_SIMP(Max(Max(z, C(1)), C(3)), Max(z, C(3))); }
TEST_F(SymbolicTest, AssociativeNoChange) { EXPECT_NO_CHANGE((x + y) + 3); }

// ** combine terms **
TEST_F(SymbolicTest, CombineMulConsts) { EXPECT_SIMP(x * 3 + x * 4, x * 7); }
TEST_F(SymbolicTest, CombineXPlusXc) { EXPECT_SIMP(x + x * 3, x * 4); }
TEST_F(SymbolicTest, XPlusX) { EXPECT_SIMP(x + x, x * 2); }
TEST_F(SymbolicTest, CombineWithRest) { EXPECT_SIMP((y + x * 2) + x * 3, y + x * 5); }
TEST_F(SymbolicTest, CombineYXX) { EXPECT_SIMP((y + x) + x, y + x * 2); }
TEST_F(SymbolicTest, CombineToZero) { EXPECT_SIMP(x * 3 + x * -3, C(0)); }
TEST_F(SymbolicTest, NegateSum) { EXPECT_SIMP((x + 3) * -1, x * -1 + -3); }
TEST_F(SymbolicTest, DistributeConstSum) { EXPECT_SIMP((x + 3) * 4, x * 4 + 12); }
TEST_F(SymbolicTest, CombineNoChange) { EXPECT_NO_CHANGE(x * 3 + y * 4); }

// ** div/mod folding **
TEST_F(SymbolicTest, DivOfScaledSum) { EXPECT_SIMP((x * 4 + 8) / 4, x + 2); }
TEST_F(SymbolicTest, ModPlusDivTimesC) { EXPECT_SIMP((x % 4) + (x / 4) * 4, x); }
TEST_F(SymbolicTest, DivTimesCPlusMod) { EXPECT_SIMP((x / 4) * 4 + (x % 4), x); }
TEST_F(SymbolicTest, RecombineScaled) { EXPECT_SIMP((x % 4) * 3 + (x / 4) * 12, x * 3); }
TEST_F(SymbolicTest, RecombinePartial) { EXPECT_SIMP((x % 4) + ((x / 4) % 8) * 4, x % 32); }
TEST_F(SymbolicTest, SmallDivIsZero) { EXPECT_SIMP(a / 8, C(0)); }
TEST_F(SymbolicTest, SmallModIsSelf) { EXPECT_SIMP(a % 8, a); }
TEST_F(SymbolicTest, MulDivSame) { EXPECT_SIMP((x * 4) / 4, x); }
TEST_F(SymbolicTest, MulDivMultiple) { EXPECT_SIMP((x * 8) / 4, x * 2); }
TEST_F(SymbolicTest, MulModMultiple) { EXPECT_SIMP((x * 8) % 4, C(0)); }
TEST_F(SymbolicTest, MulDivNegativeOk) { EXPECT_SIMP((z * 8) / 4, z * 2); }
TEST_F(SymbolicTest, DivSplitsRemainder) { EXPECT_SIMP((x * 4 + b4) / 4, x); }
TEST_F(SymbolicTest, ModSplitsRemainder) { EXPECT_SIMP((x * 4 + b4) % 4, b4); }
TEST_F(SymbolicTest, DivSplitsWithConst) { EXPECT_SIMP((x * 4 + b4 + 4) / 4, x + 1); }
TEST_F(SymbolicTest, NestedDiv) { EXPECT_SIMP((x / 2) / 3, x / 6); }
TEST_F(SymbolicTest, DivOfMod) { EXPECT_SIMP((x % 12) / 4, (x / 4) % 3); }
TEST_F(SymbolicTest, ModOfMod) { EXPECT_SIMP((x % 8) % 4, x % 4); }
TEST_F(SymbolicTest, DivConstSplit) { EXPECT_SIMP((x + 10) / 4, (x + 2) / 4 + 2); }
TEST_F(SymbolicTest, ModConstSplit) { EXPECT_SIMP((x + 10) % 4, (x + 2) % 4); }
TEST_F(SymbolicTest, GcdFold) { EXPECT_SIMP((x * 2 + y * 4) % 8, ((x + y * 2) % 4) * 2); }
TEST_F(SymbolicTest, FloorDivToCDiv) { EXPECT_SIMP(Bin(Op::FLOORDIV, x, C(4)), x / 4); }
TEST_F(SymbolicTest, FloorModToCMod) { EXPECT_SIMP(Bin(Op::FLOORMOD, x, C(4)), x % 4); }
TEST_F(SymbolicTest, FloorDivNegativeStays) { EXPECT_NO_CHANGE(Bin(Op::FLOORDIV, z, C(4))); }
TEST_F(SymbolicTest, CDivNegativeNoChange) { EXPECT_NO_CHANGE(z / 4); }
TEST_F(SymbolicTest, CDivNegativeSumNoChange) { EXPECT_NO_CHANGE((z + 10) / 4); }
TEST_F(SymbolicTest, CModNegativeNoChange) { EXPECT_NO_CHANGE((z * 4 + 1) % 4); }
TEST_F(SymbolicTest, DivNoChange) { EXPECT_NO_CHANGE(x / 4); }
TEST_F(SymbolicTest, DivVarNoChange) { EXPECT_NO_CHANGE(x / n); }
TEST_F(SymbolicTest, MulDivVar) { EXPECT_SIMP((x * n) / n, x); }
TEST_F(SymbolicTest, ConstQuotientNegative) { EXPECT_SIMP(z / 8, C(0)); }
TEST_F(SymbolicTest, ConstQuotientMod) { EXPECT_SIMP((a + 8) % 8, a); }
TEST_F(SymbolicTest, RangeModEnd) {
  UOpPtr r = UOp::Range(16, 0);
  EXPECT_SIMP(r % 16, r);
  EXPECT_SIMP(r / 16, C(0));
}
TEST_F(SymbolicTest, RangeModSymbolicEnd) {
  UOpPtr r = UOp::Make(Op::RANGE, dtypes::kIndex, {n}, AxisArg{1, AxisType::kLoop});
  EXPECT_SIMP(r % n, r);
  EXPECT_SIMP(r / n, C(0));
}
TEST_F(SymbolicTest, RangeOfOneIsZero) { EXPECT_SIMP(UOp::Range(1, 2), C(0)); }

// ** comparisons **
TEST_F(SymbolicTest, LtAlwaysTrue) { EXPECT_SIMP(Lt(a, 8), T()); }
TEST_F(SymbolicTest, LtAlwaysFalse) { EXPECT_SIMP(Lt(a, 0), F()); }
TEST_F(SymbolicTest, LtNoChange) { EXPECT_NO_CHANGE(Lt(x, 50)); }
TEST_F(SymbolicTest, LtMovesConst) { EXPECT_SIMP(Lt(x + 3, 10), Lt(x, 7)); }
TEST_F(SymbolicTest, LtDividesByFactor) { EXPECT_SIMP(Lt(x * 4, 10), Lt(x, 3)); }
TEST_F(SymbolicTest, LtNegFactor) { EXPECT_SIMP(Lt(z * -2, 3), Lt(z * -1, 2)); }
TEST_F(SymbolicTest, LtOfDiv) { EXPECT_SIMP(Lt(x / 4, 3), Lt(x, 12)); }
TEST_F(SymbolicTest, LtOfFloorDivNegative) { EXPECT_SIMP(Lt(Bin(Op::FLOORDIV, z, C(2)), C(1)), Lt(z, 2)); }
TEST_F(SymbolicTest, LtOfDivNegativeNoChange) { EXPECT_NO_CHANGE(Lt(z / 2, 1)); }
TEST_F(SymbolicTest, LtFoldingSum) { EXPECT_SIMP(Lt(x * 4 + b4, 8), Lt(x, 2)); }
TEST_F(SymbolicTest, NeOutOfRange) { EXPECT_SIMP(Ne(a, C(10)), T()); }
TEST_F(SymbolicTest, EqOutOfRange) { EXPECT_SIMP(Eq(a, C(10)), F()); }
TEST_F(SymbolicTest, MaxByRange) { EXPECT_SIMP(Max(a, C(10)), C(10)); }
TEST_F(SymbolicTest, MaxByRangeVar) { EXPECT_SIMP(Max(a, x + 7), x + 7); }
TEST_F(SymbolicTest, MaxNoChange) { EXPECT_NO_CHANGE(Max(x, y)); }
TEST_F(SymbolicTest, NegatedLt) { EXPECT_SIMP(Lt(x * -1, y * -1), Lt(y, x)); }

// ** where / bool **
TEST_F(SymbolicTest, WhereNotSwaps) { EXPECT_SIMP(Where(Ne(cond, T()), x, y), Where(cond, y, x)); }
TEST_F(SymbolicTest, OrNotIsTrue) { EXPECT_SIMP(Bin(Op::OR, cond, Ne(cond, T())), T()); }
TEST_F(SymbolicTest, NestedWhereSameElse) {
  UOpPtr c2 = Lt(y, 5);
  EXPECT_SIMP(Where(cond, Where(c2, x, z), z), Where(Bin(Op::AND, cond, c2), x, z));
}
TEST_F(SymbolicTest, WhereNoChange) { EXPECT_NO_CHANGE(Where(cond, x, y)); }

// ** casts **
TEST_F(SymbolicTest, LosslessCastRoundTrip) {
  UOpPtr v = Cast(x, dtypes::kInt32);
  EXPECT_SIMP(Cast(Cast(v, dtypes::kInt64), dtypes::kInt32), v);
}
TEST_F(SymbolicTest, LossyCastRoundTripNoChange) {
  UOpPtr v = Cast(x, dtypes::kInt32);
  EXPECT_NO_CHANGE(Cast(Cast(v, dtypes::kInt8), dtypes::kInt32));
}

// ** Sym **
TEST_F(SymbolicTest, SymDistributes) {
  UOpPtr e = GraphRewriteOrDie((x + y) * 3, Sym());
  EXPECT_EQ(e, x * 3 + y * 3) << Render(e);
}
TEST_F(SymbolicTest, SymNoChange) { EXPECT_EQ(GraphRewriteOrDie(x + y, Sym()), x + y); }
TEST_F(SymbolicTest, SymbolicSimpleDoesNotReorder) {
  UOpPtr e = C(3) + x;
  EXPECT_EQ(GraphRewriteOrDie(e, SymbolicSimple()), e);
}

// ** graph scale **
TEST_F(SymbolicTest, LongChainFoldsIteratively) {
  UOpPtr e = x;
  for (int i = 0; i < 200000; ++i) e = e + 1;
  EXPECT_SIMP(e, x + 200000);
}

}  // namespace
}  // namespace kiln
