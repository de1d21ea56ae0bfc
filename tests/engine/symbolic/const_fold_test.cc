#include "engine/symbolic/const_fold.h"

#include <cmath>

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

TEST(ConstFoldTest, FoldConstAluNodes) {
  EXPECT_EQ(FoldConstAlu(*(UOp::ConstInt(6) / UOp::ConstInt(0))), UOp::ConstInt(0));
  EXPECT_EQ(FoldConstAlu(*Lt(UOp::ConstInt(1), UOp::ConstInt(2))), UOp::ConstBool(true));
  EXPECT_EQ(FoldConstAlu(*Cast(UOp::Const(dtypes::kFloat32, -2.9), dtypes::kInt8)),
            UOp::Const(dtypes::kInt8, int64_t{-2}));
  EXPECT_EQ(FoldConstAlu(*(UOp::Variable("cfx", 0, 3) + 1)), nullptr);
}

}  // namespace
}  // namespace kiln
