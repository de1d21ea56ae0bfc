#include "engine/dtype/dtype.h"

#include <vector>

#include "gtest/gtest.h"

namespace kiln {
namespace {

using namespace dtypes;  // NOLINT

DType Lub(std::vector<DType> ds) {
  auto r = LeastUpperDType(ds);
  EXPECT_TRUE(r.has_value());
  return r.value_or(kVoid);
}

TEST(DTypeTest, Sizes) {
  EXPECT_EQ(kBool.ItemSize(), 1);
  EXPECT_EQ(kInt8.ItemSize(), 1);
  EXPECT_EQ(kUInt16.ItemSize(), 2);
  EXPECT_EQ(kFloat16.ItemSize(), 2);
  EXPECT_EQ(kBFloat16.ItemSize(), 2);
  EXPECT_EQ(kInt32.ItemSize(), 4);
  EXPECT_EQ(kFloat32.ItemSize(), 4);
  EXPECT_EQ(kInt64.ItemSize(), 8);
  EXPECT_EQ(kFloat64.ItemSize(), 8);
  EXPECT_EQ(kFloat32.Vec(4).ByteSize(), 16);
  EXPECT_EQ(kFloat32.Ptr().ByteSize(), 8);
}

TEST(DTypeTest, Classification) {
  EXPECT_TRUE(kFloat16.IsFloat());
  EXPECT_TRUE(kBFloat16.IsFloat());
  EXPECT_FALSE(kInt32.IsFloat());
  EXPECT_TRUE(kUInt8.IsUnsigned());
  EXPECT_FALSE(kInt8.IsUnsigned());
  EXPECT_TRUE(kIndex.IsInt());
  EXPECT_FALSE(kBool.IsInt());
  EXPECT_TRUE(kBool.IsBool());
  EXPECT_FALSE(kFloat32.Ptr().IsFloat());
}

// Expected values follow the lattice in tinygrad's dtype.py (promo_lattice, least_upper_dtype), the same table JAX
// documents for its type promotion, restricted to the dtypes kiln has (no fp8).
TEST(DTypeTest, PromotionLattice) {
  EXPECT_EQ(Lub({kBool, kBool}), kBool);
  EXPECT_EQ(Lub({kBool, kInt8}), kInt8);
  EXPECT_EQ(Lub({kBool, kUInt8}), kUInt8);
  EXPECT_EQ(Lub({kInt8, kUInt8}), kInt16);
  EXPECT_EQ(Lub({kUInt8, kInt16}), kInt16);
  EXPECT_EQ(Lub({kUInt16, kInt16}), kInt32);
  EXPECT_EQ(Lub({kUInt32, kInt32}), kInt64);
  EXPECT_EQ(Lub({kUInt32, kUInt64}), kUInt64);
  EXPECT_EQ(Lub({kInt64, kUInt64}), kFloat16);
  EXPECT_EQ(Lub({kInt32, kFloat16}), kFloat16);
  EXPECT_EQ(Lub({kInt64, kBFloat16}), kBFloat16);
  EXPECT_EQ(Lub({kFloat16, kBFloat16}), kFloat32);
  EXPECT_EQ(Lub({kFloat16, kFloat32}), kFloat32);
  EXPECT_EQ(Lub({kFloat32, kFloat64}), kFloat64);
  EXPECT_EQ(Lub({kInt8, kFloat64}), kFloat64);
  EXPECT_EQ(Lub({kBool, kFloat32}), kFloat32);
  EXPECT_EQ(Lub({kUInt8, kInt8, kInt16}), kInt16);
  EXPECT_EQ(Lub({kFloat32.Vec(4), kFloat16.Vec(4)}), kFloat32.Vec(4));
}

TEST(DTypeTest, PromotionIsCommutativeAndIdempotent) {
  std::vector<DType> all = {kBool,  kInt8,   kUInt8,    kInt16,   kUInt16,  kInt32, kUInt32,
                            kInt64, kUInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
  for (DType a : all) {
    EXPECT_EQ(Lub({a, a}), a);
    for (DType b : all) {
      EXPECT_EQ(Lub({a, b}), Lub({b, a})) << a.Name() << " " << b.Name();
      DType ab = Lub({a, b});
      EXPECT_EQ(Lub({ab, a}), ab);  // the upper bound is above both
      EXPECT_EQ(Lub({ab, b}), ab);
    }
  }
}

TEST(DTypeTest, PromotionRejectsNonLattice) {
  EXPECT_FALSE(LeastUpperDType(std::vector<DType>{}).has_value());
  EXPECT_FALSE(LeastUpperDType(std::vector<DType>{kFloat32, kIndex}).has_value());
  EXPECT_FALSE(LeastUpperDType(std::vector<DType>{kFloat32.Vec(2), kFloat32}).has_value());
  EXPECT_FALSE(LeastUpperDType(std::vector<DType>{kFloat32.Ptr(), kFloat32}).has_value());
  EXPECT_EQ(LeastUpperDType(std::vector<DType>{kIndex, kIndex}), kIndex);
}

TEST(DTypeTest, LeastUpperFloatAndSumAcc) {
  EXPECT_EQ(LeastUpperFloat(kInt32), kFloat32);
  EXPECT_EQ(LeastUpperFloat(kFloat16), kFloat16);
  EXPECT_EQ(LeastUpperFloat(kInt64), kFloat32);  // lub(int64, float32) = float32
  EXPECT_EQ(SumAccDType(kInt8), kInt32);
  EXPECT_EQ(SumAccDType(kBool), kInt32);
  EXPECT_EQ(SumAccDType(kUInt8), kUInt32);
  EXPECT_EQ(SumAccDType(kInt64), kInt64);
  EXPECT_EQ(SumAccDType(kFloat16), kFloat32);
  EXPECT_EQ(SumAccDType(kFloat64), kFloat64);
}

TEST(DTypeTest, NamesRoundTrip) {
  std::vector<DType> all = {kVoid,   kBool,    kInt8,      kUInt8,   kInt16,   kUInt16,
                            kInt32,  kUInt32,  kInt64,     kUInt64,  kFloat16, kBFloat16,
                            kFloat32, kFloat64, kIndex,   kFloat32.Vec(4), kFloat16.Ptr(),
                            kInt32.Ptr(AddrSpace::kLocal), kFloat32.Vec(8).Ptr(AddrSpace::kReg)};
  for (DType d : all) {
    auto p = ParseDType(d.Name());
    ASSERT_TRUE(p.has_value()) << d.Name();
    EXPECT_EQ(*p, d) << d.Name();
  }
  EXPECT_EQ(kFloat32.Name(), "float");
  EXPECT_EQ(kFloat16.Name(), "half");
  EXPECT_EQ(kUInt8.Name(), "uchar");
  EXPECT_EQ(ParseDType("float32"), kFloat32);
  EXPECT_EQ(ParseDType("int64"), kInt64);
  EXPECT_FALSE(ParseDType("float33").has_value());
  EXPECT_FALSE(ParseDType("float.vec(0)").has_value());
  EXPECT_FALSE(ParseDType("float.vec(4").has_value());
  EXPECT_FALSE(ParseDType("float.ptr(bogus)").has_value());
}

TEST(DTypeTest, SafeCasts) {
  EXPECT_TRUE(CanSafeCast(kInt8, kInt32));
  EXPECT_FALSE(CanSafeCast(kInt32, kInt8));
  EXPECT_TRUE(CanSafeCast(kUInt8, kInt16));
  EXPECT_FALSE(CanSafeCast(kInt8, kUInt64));
  EXPECT_TRUE(CanSafeCast(kInt16, kFloat32));
  EXPECT_FALSE(CanSafeCast(kInt32, kFloat32));  // 31 value bits > 24-bit mantissa
  EXPECT_TRUE(CanSafeCast(kInt32, kFloat64));
  EXPECT_TRUE(CanSafeCast(kFloat16, kFloat32));
  EXPECT_FALSE(CanSafeCast(kFloat16, kBFloat16));
  EXPECT_TRUE(CanSafeCast(kBool, kFloat16));
  EXPECT_FALSE(CanSafeCast(kFloat32, kInt64));
}

TEST(DTypeTest, Ranges) {
  EXPECT_EQ(DTypeMin(kInt8), -128);
  EXPECT_EQ(DTypeMax(kUInt8), 255);
  EXPECT_EQ(DTypeMax(kInt32), 2147483647);
  EXPECT_EQ(DTypeMin(kUInt32), 0);
  EXPECT_EQ(DTypeMax(kBool), 1);
}

}  // namespace
}  // namespace kiln
