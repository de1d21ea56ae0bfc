// MaxPool2d's gradient over inputs of >= 2^20 elements (its override: the pooled gradient divided by the window's
// count of maxima at the pooled size, then spread over the maxima into a stored input gradient) and below (the
// rules), with ties of 2 and 4 in a window and with padding, on CPU and INTERP, against a plain C++ loop: each
// window's gradient shared equally by its maxima.
#include <cmath>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/gradient.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"
#include "tests/engine/tensor/test_util.h"

namespace kiln {
namespace {

struct PoolCase {
  const char* name;
  int64_t n, c, h, w, k, stride, pad;
};

class MaxPoolGradTest : public ::testing::TestWithParam<std::tuple<std::string, PoolCase>> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(std::get<0>(GetParam())).ok()) GTEST_SKIP() << "backend not available";
  }
};

TEST_P(MaxPoolGradTest, MatchesLoopReference) {
  const auto& [dev, s] = GetParam();
  const int64_t oh = (s.h + 2 * s.pad - s.k) / s.stride + 1, ow = (s.w + 2 * s.pad - s.k) / s.stride + 1;
  // Values on a coarse grid, so that windows hold ties.
  std::vector<float> x = testing::SineData(s.n * s.c * s.h * s.w, 1.0f, 0.1f);
  for (float& v : x) v = std::round(v * 2.0f) / 2.0f;
  std::vector<float> g = testing::SineData(s.n * s.c * oh * ow, 1.0f, 0.6f);
  std::vector<double> want(x.size(), 0.0);
  for (int64_t p = 0; p < s.n * s.c; ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        float m = -INFINITY;
        int count = 0;
        for (int pass = 0; pass < 3; ++pass)
          for (int64_t ky = 0; ky < s.k; ++ky)
            for (int64_t kx = 0; kx < s.k; ++kx) {
              const int64_t iy = oy * s.stride + ky - s.pad, ix = ox * s.stride + kx - s.pad;
              if (iy < 0 || ix < 0 || iy >= s.h || ix >= s.w) continue;
              const int64_t at = (p * s.h + iy) * s.w + ix;
              if (pass == 0) m = std::max(m, x[at]);
              if (pass == 1) count += x[at] == m;
              if (pass == 2 && x[at] == m) want[at] += static_cast<double>(g[(p * oh + oy) * ow + ox]) / count;
            }
      }
  Tensor xt = Tensor::FromVector(x, {s.n, s.c, s.h, s.w}, dev);
  Tensor gt = Tensor::FromVector(g, {s.n, s.c, oh, ow}, dev);
  PoolOptions opt;
  opt.stride = {s.stride};
  opt.padding = {s.pad};
  Tensor loss = (xt.MaxPool2d({s.k, s.k}, opt) * gt).Sum();
  auto grads = Gradient(loss, {xt});
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto got = (*grads)[0].ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR((*got)[i], want[i], 1e-6 * (1 + std::abs(want[i]))) << i;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MaxPoolGradTest,
    ::testing::Combine(::testing::Values("CPU", "INTERP"),
                       ::testing::Values(PoolCase{"cnn_conv2", 160, 32, 20, 20, 2, 2, 0},   // 2^21 elements
                                         PoolCase{"padded_3x3s2", 4, 64, 64, 64, 3, 2, 1},  // 2^20, overlapping
                                         PoolCase{"small", 4, 8, 12, 12, 2, 2, 0})),        // the rules
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).name; });

}  // namespace
}  // namespace kiln
