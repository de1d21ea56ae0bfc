// A reduce of a reduce inside one kernel (a pool or conv followed by a full Sum, no Contiguous in between), realized
// on CPU and INTERP and compared with a plain C++ loop reference.
#include <cmath>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

class ReduceOfReduceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(GetParam()).ok()) GTEST_SKIP() << GetParam() << " backend not available";
  }
  static std::vector<float> Data(int64_t n, float scale) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + 0.1f) * scale;
    return v;
  }
};

TEST_P(ReduceOfReduceTest, MaxPoolThenSum) {
  const int64_t N = 2, C = 3, H = 8, W = 8;
  std::vector<float> x = Data(N * C * H * W, 2.0f);
  double want = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < H / 2; ++oh)
        for (int64_t ow = 0; ow < W / 2; ++ow) {
          float m = -INFINITY;
          for (int64_t kh = 0; kh < 2; ++kh)
            for (int64_t kw = 0; kw < 2; ++kw)
              m = std::max(m, x[((n * C + c) * H + oh * 2 + kh) * W + ow * 2 + kw]);
          want += m;
        }
  Tensor t = Tensor::FromVector(x, {N, C, H, W}, GetParam());
  auto got = t.MaxPool2d({2, 2}).Sum().ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_NEAR((*got)[0], want, 1e-4 * (1 + std::abs(want)));
}

TEST_P(ReduceOfReduceTest, Conv2dThenSum) {
  const int64_t N = 2, C = 3, H = 6, W = 6, O = 4, K = 3, OH = H - K + 1, OW = W - K + 1;
  std::vector<float> x = Data(N * C * H * W, 1.0f), w = Data(O * C * K * K, 0.5f);
  double want = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = 0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t kh = 0; kh < K; ++kh)
              for (int64_t kw = 0; kw < K; ++kw)
                acc += static_cast<double>(x[((n * C + c) * H + oh + kh) * W + ow + kw]) *
                       w[((o * C + c) * K + kh) * K + kw];
          want += acc;
        }
  Tensor tx = Tensor::FromVector(x, {N, C, H, W}, GetParam());
  Tensor tw = Tensor::FromVector(w, {O, C, K, K}, GetParam());
  auto got = tx.Conv2d(tw).Sum().ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_NEAR((*got)[0], want, 1e-4 * (1 + std::abs(want)));
}

TEST_P(ReduceOfReduceTest, MaxPoolThenPartialSum) {
  const int64_t N = 2, C = 3, H = 8, W = 8;
  std::vector<float> x = Data(N * C * H * W, 2.0f);
  std::vector<double> want(C, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < H / 2; ++oh)
        for (int64_t ow = 0; ow < W / 2; ++ow) {
          float m = -INFINITY;
          for (int64_t kh = 0; kh < 2; ++kh)
            for (int64_t kw = 0; kw < 2; ++kw)
              m = std::max(m, x[((n * C + c) * H + oh * 2 + kh) * W + ow * 2 + kw]);
          want[c] += m;
        }
  Tensor t = Tensor::FromVector(x, {N, C, H, W}, GetParam());
  auto got = t.MaxPool2d({2, 2}).Sum({0, 2, 3}).ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) EXPECT_NEAR((*got)[c], want[c], 1e-4 * (1 + std::abs(want[c]))) << c;
}

INSTANTIATE_TEST_SUITE_P(Backends, ReduceOfReduceTest, ::testing::Values("CPU", "INTERP"));

}  // namespace
}  // namespace kiln
