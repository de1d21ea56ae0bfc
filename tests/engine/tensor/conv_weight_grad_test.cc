// Conv2d weight gradients at the Fashion-MNIST CNN's layer shapes, with padding, an odd batch and a fused (unrealized)
// pooled input, compared with a plain C++ loop: the Conv2d gradient override's channels-last matmul over batch chunks
// (a 1x1 conv's as one Matmul), also where each output-gradient element feeds few multiply-adds (conv1, 1 x 5 x 5).
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/realize/realize.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/gradient.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"
#include "tests/engine/tensor/test_util.h"

namespace kiln {
namespace {

struct Shape4 {
  const char* name;
  int64_t b, ci, co, hw, k, pad;
  bool pooled = false;  // the input is MaxPool2d(2) of a 2x larger tensor, unrealized (fused into the gradient)
};
void PrintTo(const Shape4& s, std::ostream* os) { *os << s.name; }

class ConvWeightGradTest : public ::testing::TestWithParam<Shape4> {
 protected:
  void SetUp() override { backends::RegisterAllBackends(); }
};

TEST_P(ConvWeightGradTest, MatchesLoopReference) {
  const Shape4 s = GetParam();
  const int64_t oh = s.hw + 2 * s.pad - s.k + 1;
  std::vector<float> big = testing::SineData(s.b * s.ci * 4 * s.hw * s.hw, 1.0f, 0.1f);
  std::vector<float> x = s.pooled ? std::vector<float>(s.b * s.ci * s.hw * s.hw)
                                  : testing::SineData(s.b * s.ci * s.hw * s.hw, 1.0f, 0.1f);
  if (s.pooled) {
    for (int64_t p = 0; p < s.b * s.ci; ++p)
      for (int64_t y = 0; y < s.hw; ++y)
        for (int64_t xx = 0; xx < s.hw; ++xx) {
          float m = -INFINITY;
          for (int64_t dy2 = 0; dy2 < 2; ++dy2)
            for (int64_t dx2 = 0; dx2 < 2; ++dx2)
              m = std::max(m, big[(p * 2 * s.hw + 2 * y + dy2) * 2 * s.hw + 2 * xx + dx2]);
          x[(p * s.hw + y) * s.hw + xx] = m;
        }
  }
  std::vector<float> w = testing::SineData(s.co * s.ci * s.k * s.k, 0.5f, 0.2f),
                     dy = testing::SineData(s.b * s.co * oh * oh, 1.0f, 0.3f);
  std::vector<double> want(s.co * s.ci * s.k * s.k, 0.0);
  for (int64_t n = 0; n < s.b; ++n)
    for (int64_t o = 0; o < s.co; ++o)
      for (int64_t c = 0; c < s.ci; ++c)
        for (int64_t ky = 0; ky < s.k; ++ky)
          for (int64_t kx = 0; kx < s.k; ++kx) {
            double acc = 0;
            for (int64_t y = 0; y < oh; ++y)
              for (int64_t xx = 0; xx < oh; ++xx) {
                const int64_t iy = y + ky - s.pad, ix = xx + kx - s.pad;
                if (iy < 0 || ix < 0 || iy >= s.hw || ix >= s.hw) continue;
                acc += static_cast<double>(dy[((n * s.co + o) * oh + y) * oh + xx]) *
                       x[((n * s.ci + c) * s.hw + iy) * s.hw + ix];
              }
            want[((o * s.ci + c) * s.k + ky) * s.k + kx] += acc;
          }
  Tensor xt = s.pooled ? Tensor::FromVector(big, {s.b, s.ci, 2 * s.hw, 2 * s.hw}).MaxPool2d({2, 2})
                       : Tensor::FromVector(x, {s.b, s.ci, s.hw, s.hw});
  Tensor wt = Tensor::FromVector(w, {s.co, s.ci, s.k, s.k});
  Tensor dyt = Tensor::FromVector(dy, {s.b, s.co, oh, oh});
  ConvOptions opt;
  opt.padding = {s.pad};
  Tensor loss = (xt.Conv2d(wt, std::nullopt, opt) * dyt).Sum();
  auto g = Gradient(loss, {wt});
  ASSERT_TRUE(g.ok()) << g.status();
  auto got = (*g)[0].ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want.size());
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR((*got)[i], want[i], 1e-4 * scale) << s.name << " at " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvWeightGradTest,
    ::testing::Values(Shape4{"conv3", 64, 32, 64, 10, 3, 0}, Shape4{"conv4", 64, 64, 64, 8, 3, 0},
                      Shape4{"conv2", 16, 32, 32, 24, 5, 0}, Shape4{"conv1", 32, 1, 32, 28, 5, 0},
                      Shape4{"padded", 8, 8, 16, 9, 3, 1}, Shape4{"odd_batch", 3, 8, 5, 6, 3, 0},
                      Shape4{"conv3_pooled", 64, 32, 64, 10, 3, 0, true},
                      // >= 2^20 output-gradient elements, several batch chunks
                      Shape4{"conv1_large", 64, 1, 32, 28, 5, 0},
                      // 1x1 convs over >= 128 pixels: one Matmul (packed right-hand side; two samples' pixels)
                      Shape4{"pointwise", 1, 64, 256, 16, 1, 0}, Shape4{"pointwise_batch", 2, 96, 48, 10, 1, 0},
                      // ... and over more pixels than 256 KB of dY rows: 14 chunks of 224, summed
                      Shape4{"pointwise_chunks", 1, 64, 256, 56, 1, 0},
                      // one Matmul of >= 2^15 weights: the product stored [Ci, Co], then transposed
                      Shape4{"pointwise_wide", 1, 128, 256, 12, 1, 0},
                      // one batch chunk and >= 2^15 weights: stored [Ci, KH, KW, Co], then transposed
                      Shape4{"one_chunk", 1, 64, 64, 9, 3, 1}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kiln
