// x == max(x) in one schedule (the MAX reduce's gradient, Argmax): every kernel that compares x with the realized max
// must see the same bits of x as the kernel that computed the max. Kernels that recompute x from its inputs need not
// (the CPU backend fuses a multiply feeding an add into one FMA where the product has one use, and rounds twice where
// it has more), so a row could have no element equal to its own max: its max gradient was lost (issue #4: wrong
// conv weight gradients in the Fashion-MNIST step, BatchNorm -> MaxPool). Realized on CPU and INTERP, against loops.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

constexpr int64_t kRows = 64, kCols = 32;

class MaxEqualityTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(GetParam()).ok()) GTEST_SKIP() << GetParam() << " backend not available";
    a_ = Data(1.7f, 0.3f);
    b_ = Data(2.3f, 1.1f);
    c_ = Data(0.9f, 2.0f);
    p_.resize(a_.size());
    x_.resize(a_.size());
    for (size_t i = 0; i < a_.size(); ++i) {
      p_[i] = a_[i] * b_[i];
      x_[i] = p_[i] + c_[i];
    }
  }
  // Values whose products carry low bits that an FMA keeps and a rounded multiply drops.
  static std::vector<float> Data(float f, float phase) {
    std::vector<float> v(kRows * kCols);
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(f * static_cast<float>(i) + phase) * 3.3f + 0.01f;
    return v;
  }
  // The column of each row's largest x (the data has no ties that rounding could make).
  int64_t ArgMax(int64_t r) const {
    int64_t best = 0;
    for (int64_t j = 1; j < kCols; ++j)
      if (x_[r * kCols + j] > x_[r * kCols + best]) best = j;
    return best;
  }
  Tensor T(const std::vector<float>& v) const { return Tensor::FromVector(v, {kRows, kCols}, GetParam()); }

  std::vector<float> a_, b_, c_, p_, x_;
};

// The MAX reduce's gradient: d/da of sum_r max_j(x) + sum(p*p) = is_max/count * b + 2 p b. The gradient kernel
// recomputes x next to the second term (p shared); each row's is_max/count must still put exactly 1 on its max.
TEST_P(MaxEqualityTest, MaxGradientKeepsEveryRow) {
  Tensor a = T(a_), b = T(b_), c = T(c_);
  a.RequiresGrad();
  Tensor p = a * b;
  Tensor x = p + c;
  Tensor loss = x.Max(1).Sum() + (p * p).Sum();
  ASSERT_TRUE(loss.Backward().ok());
  auto got = a.Grad().ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  for (int64_t r = 0; r < kRows; ++r) {
    const int64_t m = ArgMax(r);
    for (int64_t j = 0; j < kCols; ++j) {
      const int64_t i = r * kCols + j;
      const float want = (j == m ? b_[i] : 0.0f) + 2 * p_[i] * b_[i];
      EXPECT_NEAR((*got)[i], want, 1e-4f * (1 + std::abs(want))) << "row " << r << " col " << j;
    }
  }
}

// Argmax compares x with its max the same way.
TEST_P(MaxEqualityTest, ArgmaxOfSharedProduct) {
  Tensor a = T(a_), b = T(b_), c = T(c_);
  Tensor p = a * b;
  Tensor x = p + c;
  Tensor both = x.Argmax(1).Cast(dtypes::kFloat32) + (p * p).Sum(1) * 0.0f;
  auto got = both.ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  for (int64_t r = 0; r < kRows; ++r) EXPECT_EQ((*got)[r], static_cast<float>(ArgMax(r))) << "row " << r;
}

INSTANTIATE_TEST_SUITE_P(Devices, MaxEqualityTest, ::testing::Values("CPU", "INTERP"));

}  // namespace
}  // namespace kiln
