// Winograd convolutions (engine/tensor/winograd.cc), each form Conv2d picks, against a float64 loop over the
// definition: F(4x4, 5x5) at the Fashion-MNIST CNN's conv2 (24x24 -> 20x20), F(2x2, 5x5) (6x6 -> 2x2),
// F(6x6, 3x3) at the CNN's conv4 (8x8 -> 6x6), F(4x4, 3x3) padded by 1 (ResNet's 3x3 convs; 8x8 -> 8x8), and a
// ragged one (7x7 padded by 1: 2 x 2 tiles of 4 cover 8x8, cropped to 7x7). With WINO=0 the same convs run direct:
// the Winograd schedule has its transforms' kernels besides the product, so it has more kernels (the form was
// taken), and both agree with the loop. The gradients (the direct conv's, registered on the Winograd output) are
// checked against the loop too. The transforms' select chains are lowered one slot per lane (heuristic.cc's stacked
// axes, expand.cc's SubstitutePicking): the lowered input transform of conv2 has no select left.
#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/base/env.h"
#include "engine/codegen/codegen.h"
#include "engine/realize/realize.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/gradient.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"
#include "tests/engine/cpu_target.h"
#include "tests/engine/tensor/test_util.h"

namespace kiln {
namespace {

struct Shape {
  const char* name;
  int64_t b, ci, co, hw, k, pad;
  // Largest error allowed with WINO=1, as a fraction of the largest output (see the measurements below).
  double tol;
};
void PrintTo(const Shape& s, std::ostream* os) { *os << s.name; }

// max |got - want| / max |want|.
double RelErr(const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 0, err = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
  return err / scale;
}

int ScheduledKernels(const Tensor& t) {
  auto s = CreateSchedule({t.uop()});
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return -1;
  int n = 0;
  for (const ScheduleItem& it : s->items) n += it.kind == ScheduleItem::Kind::kKernel;
  return n;
}

class WinogradTest : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override { backends::RegisterAllBackends(); }
};

TEST_P(WinogradTest, MatchesTheDefinitionAndItsGradients) {
  const Shape s = GetParam();
  const int64_t oh = s.hw + 2 * s.pad - s.k + 1;
  const std::vector<float> x = testing::SineData(s.b * s.ci * s.hw * s.hw, 1.0f, 0.1f),
                           w = testing::SineData(s.co * s.ci * s.k * s.k, 0.3f, 0.2f),
                           dy = testing::SineData(s.b * s.co * oh * oh, 1.0f, 0.3f);
  const testing::ConvLoops want = testing::ConvByLoops(x, w, dy, s.b, s.ci, s.co, s.hw, s.k, s.pad);
  int kernels[2] = {0, 0};
  for (int wino : {0, 1}) {
    Context knobs({{Knob::kWino, wino}});
    Tensor xt = Tensor::FromVector(x, {s.b, s.ci, s.hw, s.hw});
    Tensor wt = Tensor::FromVector(w, {s.co, s.ci, s.k, s.k});
    Tensor dyt = Tensor::FromVector(dy, {s.b, s.co, oh, oh});
    ConvOptions opt;
    opt.padding = {s.pad};
    Tensor y = xt.Conv2d(wt, std::nullopt, opt);
    ASSERT_TRUE(y.ok()) << y.status();
    kernels[wino] = ScheduledKernels(y);
    auto got_y = y.ToVector<float>();
    ASSERT_TRUE(got_y.ok()) << got_y.status();
    // Rounding, max |error| / max |output| against the float64 loop, measured on a 2-core Zen 4: direct (WINO=0)
    // 0.8-4.3e-6 for every shape and part; Winograd F(2x2, 5x5) 3.7e-6, F(4x4, 3x3) 3.3-5.1e-6, F(4x4, 5x5) 5.7e-6,
    // F(6x6, 3x3) 2.95e-5 (the alpha = 8 forms, points +-1/2, lose most; NNPACK's default 3x3 form, F(6x6, 3x3), is
    // one of them). Gradients are the direct conv's either way (an F(4x4, 5x5) input gradient over an output
    // gradient padded from 2x2 to 10x10 measured 1.07e-4: the error follows the windows, not the small outputs).
    const double tol = wino ? s.tol : 1e-5;
    EXPECT_LT(RelErr(*got_y, want.y), tol) << s.name << " forward, WINO=" << wino;
    auto g = Gradient((y * dyt).Sum(), {xt, wt});
    ASSERT_TRUE(g.ok()) << g.status();
    auto got_dx = (*g)[0].ToVector<float>();
    auto got_dw = (*g)[1].ToVector<float>();
    ASSERT_TRUE(got_dx.ok() && got_dw.ok());
    EXPECT_LT(RelErr(*got_dx, want.dx), tol) << s.name << " input gradient, WINO=" << wino;
    EXPECT_LT(RelErr(*got_dw, want.dw), 1e-5)
        << s.name << " weight gradient (direct either way), WINO=" << wino;
  }
  EXPECT_GT(kernels[1], kernels[0]) << s.name << ": the Winograd form was not taken";
}

INSTANTIATE_TEST_SUITE_P(Forms, WinogradTest,
                         ::testing::Values(Shape{"f4x5_cnn_conv2", 2, 32, 32, 24, 5, 0, 3e-5},
                                           Shape{"f2x5", 16, 32, 32, 6, 5, 0, 3e-5},
                                           Shape{"f6x3_cnn_conv4", 16, 64, 64, 8, 3, 0, 1.5e-4},
                                           Shape{"f4x3_padded", 8, 32, 32, 8, 3, 1, 3e-5},
                                           Shape{"f4x3_ragged", 8, 32, 48, 7, 3, 1, 3e-5}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return std::string(info.param.name);
                         });

// Too few input channels (the CNN's conv1, 1 -> 32), a stride, weights that require grad, or WINO=0: the direct
// conv.
TEST(WinogradChoice, SmallOrStridedConvsStayDirect) {
  backends::RegisterAllBackends();
  Tensor x1 = Tensor::Zeros({64, 1, 28, 28}), w1 = Tensor::Zeros({32, 1, 5, 5});
  EXPECT_EQ(ScheduledKernels(x1.Conv2d(w1)), 1);
  Tensor x = Tensor::Zeros({8, 32, 24, 24}), w = Tensor::Zeros({32, 32, 3, 3});
  ConvOptions strided;
  strided.stride = {2};
  const int direct_strided = ScheduledKernels(x.Conv2d(w, std::nullopt, strided));
  const int wino = ScheduledKernels(x.Conv2d(w));
  Tensor trained = Tensor::Zeros({32, 32, 3, 3});
  trained.RequiresGrad();  // a training step's weights
  const int training = ScheduledKernels(x.Conv2d(trained));
  Context off({{Knob::kWino, 0}});
  const int direct = ScheduledKernels(x.Conv2d(w));
  EXPECT_LT(direct, wino);
  EXPECT_LE(direct_strided, direct);
  EXPECT_EQ(training, direct);
}

// ResNet-50's stage-4 3x3 conv (512 -> 512 channels at 7x7): at batch 1 each image has four output tiles, so the
// product would stream 36 / 9 times the direct conv's 9.4 MB of weights for four uses each (2.2 ms against the
// direct kernel's 1.2-1.3 ms); it stays direct. At batch 8 the weights serve 32 tiles and the Winograd form is taken.
TEST(WinogradChoice, LargeWeightsAtSmallOutputsStayDirect) {
  backends::RegisterAllBackends();
  Tensor w = Tensor::Zeros({512, 512, 3, 3});
  ConvOptions padded;
  padded.padding = {1};
  auto kernels = [&](int64_t batch, bool wino) {
    Context k({{Knob::kWino, wino ? 1 : 0}});
    return ScheduledKernels(Tensor::Zeros({batch, 512, 7, 7}).Conv2d(w, std::nullopt, padded));
  };
  EXPECT_EQ(kernels(1, true), kernels(1, false));
  EXPECT_GT(kernels(8, true), kernels(8, false));
}

// A pointwise conv over a Winograd output (ResNet-50's bottlenecks: 3x3 -> ReLU -> 1x1) reads it channels-last: it
// takes the output channels as its lanes over packed weights, with its input (the ReLU) stored channels-last, rather
// than pixel lanes, whose loads would each gather 16 pixels a row of channels apart (ResNet-50's 64 -> 256 channel
// 1x1 at 56x56: 1.6 ms against 0.7 ms). So it adds two kernels to the ReLU's own (the weights' packing and the conv;
// the ReLU is stored channels-last instead of NCHW), where pixel lanes added none (the ReLU fused into the conv's
// loads); its values match a float64 loop.
TEST(WinogradConsumers, PointwiseConvTakesChannelLanesOverTheOutput) {
  backends::RegisterAllBackends();
  const int64_t c = 64, hw = 16;
  const std::vector<float> x = testing::SineData(c * hw * hw, 1.0f, 0.1f), w1 = testing::SineData(c * c * 9, 0.3f, 0.2f),
                           w2 = testing::SineData(c * c, 0.3f, 0.4f), dy(c * hw * hw, 0.0f);
  std::vector<double> want = testing::ConvByLoops(x, w1, dy, 1, c, c, hw, 3, 1).y;
  for (double& v : want) v = std::max(v, 0.0);
  std::vector<double> want2(c * hw * hw, 0.0);
  for (int64_t o = 0; o < c; ++o)
    for (int64_t i = 0; i < c; ++i)
      for (int64_t p = 0; p < hw * hw; ++p) want2[o * hw * hw + p] += double{w2[o * c + i]} * want[i * hw * hw + p];
  Context knobs({{Knob::kWino, 1}});
  ConvOptions padded;
  padded.padding = {1};
  const Tensor y = Tensor::FromVector(x, {1, c, hw, hw}).Conv2d(Tensor::FromVector(w1, {c, c, 3, 3}), std::nullopt,
                                                                padded);
  const Tensor relu = y.Relu();
  const Tensor z = relu.Conv2d(Tensor::FromVector(w2, {c, c, 1, 1}));
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_GT(ScheduledKernels(y), 1) << "the Winograd form was not taken";
  EXPECT_EQ(ScheduledKernels(z) - ScheduledKernels(relu), 2);
  auto got = z.ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_LT(RelErr(*got, want2), 3e-5);
}

// The lowered transforms of the CNN's conv2 (8 x 8 slots selected per lane: the input's and the weights') keep no
// select, on a 2-core AVX-512 target.
TEST(WinogradLowering, TransformSelectsFoldPerLane) {
  Tensor x = Tensor::Zeros({2, 32, 24, 24}), w = Tensor::Zeros({32, 32, 5, 5});
  auto programs =
      test_util::LowerScheduledKernels(x.Conv2d(w).uop(), test_util::Avx512TwoCoreLlvm());
  ASSERT_TRUE(programs.ok()) << programs.status();
  int transforms = 0;
  for (const codegen::Program& p : *programs) {
    if (p.name.rfind("E_", 0) != 0 || p.name.find("_8_8_") == std::string::npos) continue;
    ++transforms;
    int wheres = 0, loads = 0;
    for (const UOpPtr& u : p.uops) {
      wheres += u->op() == Op::WHERE;
      loads += u->op() == Op::LOAD;
    }
    EXPECT_EQ(wheres, 0) << p.name;
    EXPECT_GT(loads, 0) << p.name;
  }
  EXPECT_EQ(transforms, 2) << "the input's and the weights' transforms, 8 x 8 lanes each";
}

}  // namespace
}  // namespace kiln
