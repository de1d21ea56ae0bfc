#include "engine/symbolic/const_fold.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kiln {
namespace {

std::optional<int64_t> I(Op op, DType d, int64_t a, int64_t b) {
  int64_t v[2] = {a, b};
  return ExecIntAlu(op, d, v);
}

TEST(ConstFoldTest, DivisionByZeroIsZeroAndNeverTraps) {
  for (Op op : {Op::CDIV, Op::CMOD, Op::FLOORDIV, Op::FLOORMOD}) {
    for (DType d : {dtypes::kIndex, dtypes::kInt32, dtypes::kUInt8, dtypes::kUInt64}) {
      EXPECT_EQ(I(op, d, 7, 0), 0);
    }
  }
  EXPECT_EQ(I(Op::CDIV, dtypes::kInt64, INT64_MIN, -1), INT64_MIN);
  EXPECT_EQ(I(Op::CMOD, dtypes::kInt64, INT64_MIN, -1), 0);
  EXPECT_EQ(I(Op::FLOORDIV, dtypes::kInt64, INT64_MIN, -1), INT64_MIN);
  EXPECT_EQ(I(Op::CDIV, dtypes::kInt32, INT32_MIN, -1), INT32_MIN);
}

TEST(ConstFoldTest, CAndFloorSemantics) {
  EXPECT_EQ(I(Op::CDIV, dtypes::kIndex, -7, 2), -3);
  EXPECT_EQ(I(Op::CMOD, dtypes::kIndex, -7, 2), -1);
  EXPECT_EQ(I(Op::FLOORDIV, dtypes::kIndex, -7, 2), -4);
  EXPECT_EQ(I(Op::FLOORMOD, dtypes::kIndex, -7, 2), 1);
  EXPECT_EQ(I(Op::FLOORMOD, dtypes::kIndex, 7, -2), -1);
  EXPECT_EQ(I(Op::CMOD, dtypes::kIndex, 7, -2), 1);
}

TEST(ConstFoldTest, WrapsPerDType) {
  EXPECT_EQ(WrapInt(dtypes::kInt8, 128), -128);
  EXPECT_EQ(WrapInt(dtypes::kUInt8, -1), 255);
  EXPECT_EQ(WrapInt(dtypes::kUInt16, 65537), 1);
  EXPECT_EQ(I(Op::ADD, dtypes::kIndex, INT64_MAX, 1), INT64_MIN);
  EXPECT_EQ(I(Op::MUL, dtypes::kInt16, 300, 300), static_cast<int16_t>(90000));
  EXPECT_EQ(I(Op::CMPLT, dtypes::kUInt64, -1, 1), 0);  // 2^64-1 < 1 is false unsigned
  EXPECT_EQ(I(Op::SHR, dtypes::kUInt32, 0xffffffffLL, 4), 0x0fffffffLL);
  EXPECT_EQ(I(Op::SHR, dtypes::kInt32, -16, 2), -4);
  EXPECT_EQ(I(Op::SHL, dtypes::kInt32, 1, 32), std::nullopt);
  EXPECT_EQ(I(Op::SHL, dtypes::kInt32, 1, -1), std::nullopt);
}

TEST(ConstFoldTest, Floats) {
  double v[2] = {1.0, 3.0};
  EXPECT_EQ(*ExecFloatAlu(Op::FDIV, dtypes::kFloat32, v), static_cast<double>(1.0f / 3.0f));
  EXPECT_EQ(*ExecFloatAlu(Op::FDIV, dtypes::kFloat64, v), 1.0 / 3.0);
  EXPECT_EQ(RoundFloat(dtypes::kFloat16, 1.0 / 3.0), 0.333251953125);
  EXPECT_EQ(RoundFloat(dtypes::kBFloat16, 1.0 / 3.0), 0.333984375);
  double z[2] = {0.0, 0.0};
  EXPECT_TRUE(std::isnan(*ExecFloatAlu(Op::FDIV, dtypes::kFloat32, z)));
}

// Half rounding is written out (const_fold.cc: clang 14 has no _Float16 on x86); where the compiler has _Float16
// (gcc, the release build), its own double -> half conversion is the reference: edge values (ties, the subnormal
// range, overflow to infinity) and 200,000 random doubles across the range.
TEST(ConstFoldTest, Float16RoundingMatchesTheCompilersHalf) {
  EXPECT_EQ(RoundFloat(dtypes::kFloat16, 65519.0), 65504.0);
  EXPECT_TRUE(std::isinf(RoundFloat(dtypes::kFloat16, 65520.0)));
  EXPECT_EQ(RoundFloat(dtypes::kFloat16, -std::ldexp(1.0, -25)), -0.0);       // half the smallest subnormal: to even
  EXPECT_EQ(RoundFloat(dtypes::kFloat16, std::ldexp(3.0, -26)), std::ldexp(1.0, -24));
#if defined(__FLT16_MAX__)
  std::mt19937_64 rng(7);
  std::vector<double> vals = {0.0, -0.0, 1.0, 2049.0, 2051.0, 65504.0, 65519.99, 65520.0, 1e9, -1e9,
                              std::ldexp(1.0, -14), std::ldexp(1.0, -24), std::ldexp(1.0, -25), std::ldexp(1.5, -25),
                              std::ldexp(1.0, -26), 1.0 + std::ldexp(1.0, -11), 1.0 + 3 * std::ldexp(1.0, -11)};
  std::uniform_real_distribution<double> mant(0.5, 1.0);
  std::uniform_int_distribution<int> exp(-30, 18);
  for (int i = 0; i < 200000; ++i) vals.push_back((i % 2 ? -1 : 1) * std::ldexp(mant(rng), exp(rng)));
  for (double v : vals) {
    const double want = static_cast<double>(static_cast<_Float16>(v));
    const double got = RoundFloat(dtypes::kFloat16, v);
    ASSERT_EQ(std::signbit(got), std::signbit(want)) << v;
    ASSERT_EQ(got, want) << v;
  }
#endif
}

TEST(ConstFoldTest, FoldConstAluNodes) {
  EXPECT_EQ(FoldConstAlu(*(UOp::ConstInt(6) / UOp::ConstInt(0))), UOp::ConstInt(0));
  EXPECT_EQ(FoldConstAlu(*Lt(UOp::ConstInt(1), UOp::ConstInt(2))), UOp::ConstBool(true));
  EXPECT_EQ(FoldConstAlu(*Cast(UOp::Const(dtypes::kFloat32, -2.9), dtypes::kInt8)),
            UOp::Const(dtypes::kInt8, int64_t{-2}));
  EXPECT_EQ(FoldConstAlu(*(UOp::Variable("cfx", 0, 3) + 1)), nullptr);
}

}  // namespace
}  // namespace kiln
