#include "engine/symbolic/range.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kiln {
namespace {

UOpPtr C(int64_t v) { return UOp::ConstInt(v); }
UOpPtr Bin(Op op, const UOpPtr& a, const UOpPtr& b) { return UOp::Alu(op, {a, b}); }

void ExpectRange(const UOpPtr& u, int64_t lo, int64_t hi) {
  VRange r = VMinMax(u);
  EXPECT_EQ(r.lo, lo);
  EXPECT_EQ(r.hi, hi);
}

TEST(RangeTest, Leaves) {
  ExpectRange(C(5), 5, 5);
  ExpectRange(UOp::Variable("rv", -3, 9), -3, 9);
  ExpectRange(UOp::Range(10, 0), 0, 9);
  ExpectRange(UOp::ConstBool(true), 1, 1);
  UOpPtr n = UOp::Variable("rn", 1, 8);
  ExpectRange(UOp::Make(Op::RANGE, dtypes::kIndex, {n}, AxisArg{0, AxisType::kLoop}), 0, 7);
  ExpectRange(UOp::Make(Op::SPECIAL, dtypes::kIndex, {C(32)}, std::string("gidx0")), 0, 31);
}

TEST(RangeTest, AddSubMul) {
  UOpPtr x = UOp::Variable("ra", -2, 3), y = UOp::Variable("rb", 4, 5);
  ExpectRange(x + y, 2, 8);
  ExpectRange(Bin(Op::SUB, x, y), -7, -1);
  ExpectRange(x * y, -10, 15);
  ExpectRange(x * x, -6, 9);  // interval arithmetic: correlated operands are not tracked
  ExpectRange(x * -2, -6, 4);
  ExpectRange(UOp::Make(Op::NEG, dtypes::kIndex, {x}), -3, 2);
}

TEST(RangeTest, CDivCModTruncate) {
  UOpPtr x = UOp::Variable("rc", -7, 7);
  ExpectRange(x / 2, -3, 3);
  ExpectRange(x % 4, -3, 3);
  ExpectRange(x / -2, -3, 3);
  UOpPtr p = UOp::Variable("rp", 5, 6);
  ExpectRange(p % 4, 1, 2);   // one quotient bucket: exact
  ExpectRange(p % 5, 0, 1);
  UOpPtr neg = UOp::Variable("rneg", -6, -5);
  ExpectRange(neg % 4, -2, -1);
  ExpectRange(neg / 4, -1, -1);
  UOpPtr d = UOp::Variable("rd", 0, 3);  // divisor may be 0: x/0 == 0 is included
  ExpectRange(UOp::Variable("rq", 4, 9) / d, 0, 9);
  ExpectRange(UOp::Variable("rq", 4, 9) % d, 0, 2);
}

TEST(RangeTest, FloorDivMod) {
  UOpPtr x = UOp::Variable("rf", -7, 7);
  ExpectRange(Bin(Op::FLOORDIV, x, C(2)), -4, 3);
  ExpectRange(Bin(Op::FLOORMOD, x, C(4)), 0, 3);
  ExpectRange(Bin(Op::FLOORMOD, x, C(-4)), -3, 0);
  ExpectRange(Bin(Op::FLOORMOD, UOp::Variable("rg", 9, 10), C(4)), 1, 2);
}

TEST(RangeTest, MaxShiftCompare) {
  UOpPtr x = UOp::Variable("rm", -2, 3), y = UOp::Variable("rn2", 0, 10);
  ExpectRange(Max(x, y), 0, 10);
  ExpectRange(Bin(Op::SHL, y, C(2)), 0, 40);
  ExpectRange(Bin(Op::SHR, y, C(1)), 0, 5);
  ExpectRange(Lt(x, C(4)), 1, 1);
  ExpectRange(Lt(x, C(-2)), 0, 0);
  ExpectRange(Lt(x, C(0)), 0, 1);
  ExpectRange(Ne(x, C(7)), 1, 1);
  ExpectRange(Eq(x, C(7)), 0, 0);
  ExpectRange(Eq(C(2), C(2)), 1, 1);
}

TEST(RangeTest, BoolsWhereCast) {
  UOpPtr x = UOp::Variable("rw", 0, 10);
  UOpPtr t = Lt(x, C(20)), m = Lt(x, C(5));
  ExpectRange(Bin(Op::AND, t, m), 0, 1);
  ExpectRange(Bin(Op::OR, t, m), 1, 1);
  ExpectRange(Where(m, x, x + 100), 0, 110);
  ExpectRange(Where(t, x, x + 100), 0, 10);
  ExpectRange(Cast(x, dtypes::kUInt8), 0, 10);
  ExpectRange(Cast(x * 100, dtypes::kUInt8), 0, 255);  // may wrap: dtype range
  ExpectRange(Cast(x + 1, dtypes::kBool), 1, 1);
  ExpectRange(Bin(Op::AND, x, C(3)), 0, 3);
}

TEST(RangeTest, FallsBackToDTypeRange) {
  UOpPtr f = Cast(UOp::Variable("rx", 0, 3), dtypes::kFloat32);
  EXPECT_EQ(VMin(f), INT64_MIN);
  EXPECT_EQ(VMax(f), INT64_MAX);
  UOpPtr big = UOp::Variable("rbig", 0, INT64_MAX / 2);
  ExpectRange(big * 4, INT64_MIN, INT64_MAX);  // would overflow
  UOpPtr i8 = Cast(UOp::Variable("r8", 0, 100), dtypes::kInt8);
  ExpectRange(i8 + i8, -128, 127);
  ExpectRange(UOp::Make(Op::BIND, dtypes::kIndex, {UOp::Variable("rb2", 2, 9), C(4)}), 2, 9);
}

TEST(RangeTest, MillionNodeChainIsIterative) {
  UOpPtr e = UOp::Variable("rchain", 0, 1);
  for (int i = 0; i < 1000000; ++i) e = e + 1;
  ExpectRange(e, 1000000, 1000001);
}

TEST(RangeTest, ConcurrentQueriesAgree) {
  UOpPtr e = UOp::Variable("rconc", 0, 3);
  for (int i = 0; i < 20000; ++i) e = (i % 3 == 0) ? e * 1 + 2 : e + 1;
  std::vector<VRange> got(4);
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t) th.emplace_back([&, t] { got[t] = VMinMax(e); });
  for (auto& t : th) t.join();
  for (const VRange& r : got) {
    EXPECT_EQ(r.lo, got[0].lo);
    EXPECT_EQ(r.hi, got[0].hi);
  }
  EXPECT_EQ(got[0].hi - got[0].lo, 3);
}

}  // namespace
}  // namespace kiln
