// Kernels whose SIMD lane axis is one the output is stored strided along (MatmulTile's strided-store lane axis):
// Conv2d forward and input gradient with output-channel lanes (Conv2d's output-channels-last weight copy), at the
// Fashion-MNIST CNN's conv2 and conv4 shapes and with padding (whose reduce loops codegen narrows to the window the
// padded input is valid in), and a transposed product whose only vector axis stores
// strided. Realized on CPU and INTERP and compared with plain C++ loops. Also lowered: the input gradient of a conv
// without padding, whose tap loop codegen narrows to the columns of g. (INTERP's 4-lane target keeps x lanes where
// the output rows fill whole vectors; its conv4 (6-wide rows) and the transposed product take the strided lanes.)
#include <cmath>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "backends/register_all.h"
#include "engine/realize/realize.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/gradient.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"
#include "tests/engine/cpu_target.h"
#include "tests/engine/tensor/test_util.h"

namespace kiln {
namespace {

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4 * scale) << what << " at " << i;
}

struct ConvShape {
  const char* name;
  int64_t b, ci, co, hw, k,
      pad;  // b * co * oh * ow * ci * k * k >= 2^24: Conv2d copies the weights co-last
  int64_t stride = 1;
};
void PrintTo(const ConvShape& s, std::ostream* os) { *os << s.name; }

class ConvLanesTest : public ::testing::TestWithParam<std::tuple<std::string, ConvShape>> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(std::get<0>(GetParam())).ok())
      GTEST_SKIP() << std::get<0>(GetParam()) << " not available";
  }
};

TEST_P(ConvLanesTest, ForwardAndInputGradientMatchLoops) {
  const auto& [dev, s] = GetParam();
  const int64_t oh = (s.hw + 2 * s.pad - s.k) / s.stride + 1;
  std::vector<float> x = testing::SineData(s.b * s.ci * s.hw * s.hw, 1.0f, 0.1f),
                     w = testing::SineData(s.co * s.ci * s.k * s.k, 0.5f, 0.2f),
                     dy = testing::SineData(s.b * s.co * oh * oh, 1.0f, 0.3f);
  const testing::ConvLoops want = testing::ConvByLoops(x, w, dy, s.b, s.ci, s.co, s.hw, s.k, s.pad, s.stride);
  Tensor xt = Tensor::FromVector(x, {s.b, s.ci, s.hw, s.hw}, dev);
  Tensor wt = Tensor::FromVector(w, {s.co, s.ci, s.k, s.k}, dev);
  Tensor dyt = Tensor::FromVector(dy, {s.b, s.co, oh, oh}, dev);
  ConvOptions opt;
  opt.padding = {s.pad};
  opt.stride = {s.stride};
  Tensor y = xt.Conv2d(wt, std::nullopt, opt);
  auto got_y = y.ToVector<float>();
  ASSERT_TRUE(got_y.ok()) << got_y.status();
  ExpectClose(*got_y, want.y, std::string(s.name) + " forward");
  auto g = Gradient((y * dyt).Sum(), {xt});
  ASSERT_TRUE(g.ok()) << g.status();
  auto got_dx = (*g)[0].ToVector<float>();
  ASSERT_TRUE(got_dx.ok()) << got_dx.status();
  ExpectClose(*got_dx, want.dx, std::string(s.name) + " input gradient");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvLanesTest,
    ::testing::Combine(
        ::testing::Values("CPU", "INTERP"),
        ::testing::Values(ConvShape{"conv2", 2, 32, 32, 24, 5, 0},
                          ConvShape{"conv4", 16, 64, 64, 8, 3, 0},
                          ConvShape{"padded", 20, 16, 48, 12, 3, 1},
                          // padding wider than the kernel: the reduce loops narrowed to the valid
                          // window (codegen/narrow.cc) are empty at the output's borders
                          ConvShape{"wide_pad", 32, 16, 32, 6, 3, 4},
                          // ResNet-50's layer kinds: a 7x7 output (49 pixels: a 7-row tile of one vector of
                          // lanes), 1x1 convs (stride 1 and 2), a padded 3x3 at 14x14 (its 196 merged pixels are
                          // tile rows split off the top of the axis, its gated input read without branches)
                          // at batch 1, as served (a batch > 1 gives the tile its batch axis as rows)
                          ConvShape{"rows7", 1, 640, 64, 7, 3, 1},
                          ConvShape{"pointwise", 1, 2048, 192, 7, 1, 0},
                          ConvShape{"pointwise_s2", 1, 1024, 384, 13, 1, 0, 2},
                          // a strided pointwise conv large enough to run over a stored copy of the pixels it
                          // reads (Conv2d), at batch 2
                          ConvShape{"pointwise_s2_copy", 2, 256, 64, 28, 1, 0, 2},
                          ConvShape{"padded_14", 1, 320, 32, 14, 3, 1},
                          // strided 3x3 input gradients, one stride-1 conv per output phase: ResNet-50's stage
                          // shape (its 2x2-tap phase takes channel lanes, the others not), and an odd input whose
                          // phases have 7 and 6 rows
                          ConvShape{"strided_3x3", 1, 128, 256, 28, 3, 1, 2},
                          ConvShape{"strided_odd", 2, 32, 48, 13, 3, 1, 2},
                          ConvShape{"strided_5x5_s3", 1, 16, 32, 17, 5, 2, 3})),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).name; });

class StridedLanesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(GetParam()).ok()) GTEST_SKIP() << GetParam() << " not available";
  }
};

// out[j, i] = sum_k w[k, j] * x[i, k]: along i, x moves by K (no vector loads), so the only lane axis is j, along
// which w is contiguous, x broadcast and the output strided by I.
TEST_P(StridedLanesTest, TransposedProductMatchesLoop) {
  const int64_t I = 20, J = 48, K = 384;
  std::vector<float> w = testing::SineData(K * J, 0.5f, 0.2f),
                     x = testing::SineData(I * K, 1.0f, 0.1f);
  std::vector<double> want(J * I, 0.0);
  for (int64_t j = 0; j < J; ++j)
    for (int64_t i = 0; i < I; ++i)
      for (int64_t k = 0; k < K; ++k)
        want[j * I + i] += static_cast<double>(w[k * J + j]) * x[i * K + k];
  Tensor wt = Tensor::FromVector(w, {K, J}, GetParam()),
         xt = Tensor::FromVector(x, {I, K}, GetParam());
  auto got = wt.Transpose().Matmul(xt.Transpose()).ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectClose(*got, want, "transposed product");
}

INSTANTIATE_TEST_SUITE_P(Backends, StridedLanesTest, ::testing::Values("CPU", "INTERP"));

// The input gradient of a conv without padding (the CNN's conv2: g padded by K - 1 = 4) copies g channels-last with
// its rows padded and pads the columns through the view, so that codegen narrows the kernel's per-column kx loop to
// the taps that reach g: lowered for a 2-core AVX-512 CPU, the conv kernel has a reduce loop whose end is not a
// constant and no gated load. (With the columns padded in the copy, every loop ran over all taps: 87 -> 73 ms at
// batch 512 on a 2-core Zen 3.)
TEST(ConvInputGradientLowering, ColumnPaddingNarrowsTheTapLoop) {
  const int64_t b = 16, ci = 32, co = 32, hw = 24, k = 5;
  Tensor x = Tensor::Empty({b, ci, hw, hw}), w = Tensor::Empty({co, ci, k, k});
  Tensor dy = Tensor::Empty({b, co, hw - k + 1, hw - k + 1});
  auto grads = Gradient((x.Conv2d(w) * dy).Sum(), {x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto programs = test_util::LowerScheduledKernels((*grads)[0].uop(), test_util::Avx512TwoCoreLlvm());
  ASSERT_TRUE(programs.ok()) << programs.status();
  int convs = 0;
  for (const codegen::Program& p : *programs) {
    int reduces = 0, narrowed = 0, gated = 0;
    for (const UOpPtr& u : p.uops) {
      if (u->op() == Op::RANGE && std::get<AxisArg>(u->arg()).type == AxisType::kReduce) {
        ++reduces;
        narrowed += u->src(0)->op() != Op::CONST;
      }
      gated += (u->op() == Op::INDEX || u->op() == Op::LOAD) && u->num_src() == 3;
    }
    if (reduces < 2) continue;  // the copies
    ++convs;
    EXPECT_GE(narrowed, 1) << p.name;
    EXPECT_EQ(gated, 0) << p.name;
  }
  EXPECT_EQ(convs, 1);
}

}  // namespace
}  // namespace kiln
