// Per-channel reductions over (batch, h, w) of NCHW tensors, the BatchNorm statistics and backward sums of the
// Fashion-MNIST CNN, at shapes large enough for the CPU heuristic's accumulator tiling (h and w merged into one
// axis; merged through a 2x2 pool-gradient broadcast only where w alone is too narrow), and the backward's two sums
// in one kernel. Realized on CPU and INTERP and compared with a plain C++ loop reference.
#include <cmath>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/codegen/codegen.h"
#include "engine/schedule/schedule.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"
#include "tests/engine/cpu_target.h"
#include "tests/engine/tensor/test_util.h"

namespace kiln {
namespace {

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
}

class ChannelReduceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(GetParam()).ok())
      GTEST_SKIP() << GetParam() << " backend not available";
  }
};

// sum and sum of squares over (n, h, w): h and w contiguous together (400 floats).
TEST_P(ChannelReduceTest, SumAndSquaresOverBatchAndPlane) {
  const int64_t N = 128, C = 8, H = 20, W = 20;
  std::vector<float> x = testing::SineData(N * C * H * W, 1.5f, 0.1f);
  std::vector<double> sum(C, 0.0), sq(C, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * W; ++i) {
        const double v = x[(n * C + c) * H * W + i];
        sum[c] += v;
        sq[c] += v * v;
      }
  Tensor t = Tensor::FromVector(x, {N, C, H, W}, GetParam());
  auto got = t.Sum({0, 2, 3}).ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectNear(*got, sum);
  auto got_sq = (t * t).Sum({0, 2, 3}).ToVector<float>();
  ASSERT_TRUE(got_sq.ok()) << got_sq.status();
  ExpectNear(*got_sq, sq);
}

// sum over (n, h, w) of x * p[h / 2, w / 2] (a pooled tensor broadcast back over its 2x2 windows): the index of p
// is not affine in h and w.
void PooledCase(const std::string& dev, int64_t N, int64_t C, int64_t H, int64_t W) {
  std::vector<float> x = testing::SineData(N * C * H * W, 1.0f, 0.2f);
  std::vector<float> p = testing::SineData(N * C * (H / 2) * (W / 2), 2.0f, 0.7f);
  std::vector<double> want(C, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          want[c] += static_cast<double>(x[((n * C + c) * H + h) * W + w]) *
                     p[((n * C + c) * (H / 2) + h / 2) * (W / 2) + w / 2];
  Tensor tx = Tensor::FromVector(x, {N, C, H, W}, dev);
  Tensor tp = Tensor::FromVector(p, {N, C, H / 2, 1, W / 2, 1}, dev)
                  .Expand({N, C, H / 2, 2, W / 2, 2})
                  .Reshape({N, C, H, W});
  auto got = (tx * tp).Sum({0, 2, 3}).ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectNear(*got, want);
}

TEST_P(ChannelReduceTest, PooledBroadcastWide) { PooledCase(GetParam(), 128, 8, 20, 20); }
TEST_P(ChannelReduceTest, PooledBroadcastNarrow) { PooledCase(GetParam(), 512, 16, 6, 6); }

// The BatchNorm backward's sums realized together: sum(g) and sum(g * xhat) with xhat = (relu(x + b) - mean) * s
// per channel, sharing g and xhat in one kernel of two outputs (the values vectorize_shared_lanes builds as 8-lane
// vectors on the CPU).
TEST_P(ChannelReduceTest, BatchNormBackwardSumsTogether) {
  const int64_t N = 32, C = 32, H = 20, W = 20;
  std::vector<float> x = testing::SineData(N * C * H * W, 1.5f, 0.1f), g = testing::SineData(N * C * H * W, 1.0f, 0.4f);
  std::vector<float> b = testing::SineData(C, 0.5f, 0.3f), m = testing::SineData(C, 0.2f, 0.9f),
                     sc = testing::SineData(C, 1.0f, 1.3f);
  std::vector<double> sum_g(C, 0.0), sum_gx(C, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * W; ++i) {
        const int64_t at = (n * C + c) * H * W + i;
        const double xhat = (std::max(0.0, static_cast<double>(x[at]) + b[c]) - m[c]) * sc[c];
        sum_g[c] += g[at];
        sum_gx[c] += g[at] * xhat;
      }
  const std::string dev = GetParam();
  Tensor tx = Tensor::FromVector(x, {N, C, H, W}, dev), tg = Tensor::FromVector(g, {N, C, H, W}, dev);
  Tensor tb = Tensor::FromVector(b, {1, C, 1, 1}, dev), tm = Tensor::FromVector(m, {1, C, 1, 1}, dev),
         ts = Tensor::FromVector(sc, {1, C, 1, 1}, dev);
  Tensor xhat = ((tx + tb).Relu() - tm) * ts;
  Tensor s1 = tg.Sum({0, 2, 3}), s2 = (tg * xhat).Sum({0, 2, 3});
  ASSERT_TRUE(Tensor::Realize({&s1, &s2}).ok());
  auto got1 = s1.ToVector<float>(), got2 = s2.ToVector<float>();
  ASSERT_TRUE(got1.ok() && got2.ok());
  ExpectNear(*got1, sum_g);
  ExpectNear(*got2, sum_gx);
}

// Lowered for a 2-core AVX-512 CPU, those two sums are one kernel whose shared values (g, xhat) are 8-lane vector
// ops: LLVM's SLP vectorizer left the scalar lane copies scalar (each value feeds both sums' trees), 5x slower
// (the CNN's conv2 BatchNorm backward, 12 -> 2.3 ms).
TEST(ChannelReduceLowering, BatchNormBackwardSumsShareVectorLanes) {
  const int64_t N = 32, C = 32, H = 20, W = 20;
  Tensor tx = Tensor::Empty({N, C, H, W}), tg = Tensor::Empty({N, C, H, W});
  Tensor tb = Tensor::Empty({1, C, 1, 1}), tm = Tensor::Empty({1, C, 1, 1}), ts = Tensor::Empty({1, C, 1, 1});
  Tensor xhat = ((tx + tb).Relu() - tm) * ts;
  Tensor s1 = tg.Sum({0, 2, 3}), s2 = (tg * xhat).Sum({0, 2, 3});
  absl::StatusOr<Schedule> sched = CreateSchedule({s1.uop(), s2.uop()});
  ASSERT_TRUE(sched.ok()) << sched.status();
  int kernels = 0, vector_alus = 0;
  for (const ScheduleItem& it : sched->items) {
    if (it.kind != ScheduleItem::Kind::kKernel) continue;
    ++kernels;
    absl::StatusOr<codegen::Program> p = codegen::LowerKernel(it.ast, test_util::Avx512TwoCoreLlvm(), {});
    ASSERT_TRUE(p.ok()) << p.status();
    for (const UOpPtr& u : p->uops) vector_alus += u->dtype().count == 8 && IsALU(u->op());
  }
  EXPECT_EQ(kernels, 1);
  EXPECT_GT(vector_alus, 0) << "the shared values are scalar lane copies";
}

INSTANTIATE_TEST_SUITE_P(Backends, ChannelReduceTest, ::testing::Values("CPU", "INTERP"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
