// Realized constants (a scalar, Tensor::Full) become buffers filled on the host: no kernel is scheduled or launched
// (issue #17; tinygrad launches none for a realized scalar). Expected values are numpy's np.full (uint8 wraps).
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "backends/register_all.h"
#include "engine/realize/realize.h"
#include "engine/tensor/tensor.h"

namespace kiln {
namespace {

class ConstantRealizeTest : public ::testing::Test {
 protected:
  void SetUp() override { backends::RegisterAllBackends(); }
  // Realizes `t` and expects no kernel.
  static void RealizeWithoutKernel(Tensor& t) {
    ASSERT_TRUE(t.Realize().ok());
    EXPECT_EQ(LastRealizeStats().kernels, 0);
    EXPECT_TRUE(LastRealizeStats().launches.empty());
    EXPECT_TRUE(t.IsRealized());
  }
};

TEST_F(ConstantRealizeTest, ScalarLaunchesNoKernel) {
  Tensor t = Tensor::Full({}, 2);
  RealizeWithoutKernel(t);
  auto v = t.ToVector<int32_t>();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::vector<int32_t>{2});
}

TEST_F(ConstantRealizeTest, FullLaunchesNoKernel) {
  Tensor t = Tensor::Full({4, 3}, 1.5);
  RealizeWithoutKernel(t);
  auto v = t.ToVector<float>();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::vector<float>(12, 1.5f));
}

TEST_F(ConstantRealizeTest, EveryDTypeAndSeveralRoots) {
  Tensor a = Tensor::Full({5}, -7, dtypes::kInt32), b = Tensor::Full({3}, true, dtypes::kBool);
  Tensor c = Tensor::Full({2, 2}, 300, dtypes::kUInt8), d = Tensor::Full({2}, -0.25, dtypes::kFloat64);
  Tensor e = Tensor::Full({3}, int64_t{1} << 40, dtypes::kInt64);
  ASSERT_TRUE(Tensor::Realize({&a, &b, &c, &d, &e}).ok());
  EXPECT_EQ(LastRealizeStats().kernels, 0);
  EXPECT_EQ(*a.ToVector<int32_t>(), std::vector<int32_t>(5, -7));
  EXPECT_EQ(*b.ToVector<bool>(), std::vector<bool>(3, true));
  EXPECT_EQ(*c.ToVector<uint8_t>(), std::vector<uint8_t>(4, 44));
  EXPECT_EQ(*d.ToVector<double>(), std::vector<double>(2, -0.25));
  EXPECT_EQ(*e.ToVector<int64_t>(), std::vector<int64_t>(3, int64_t{1} << 40));
}

TEST_F(ConstantRealizeTest, ComputedValuesStillLaunchKernels) {
  Tensor t = Tensor::Full({4}, 1.0f).Add(Tensor::Arange(4).Cast(dtypes::kFloat32));
  ASSERT_TRUE(t.Realize().ok());
  EXPECT_EQ(LastRealizeStats().kernels, 1);
  EXPECT_EQ(*t.ToVector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace kiln
