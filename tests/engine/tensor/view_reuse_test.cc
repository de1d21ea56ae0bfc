// One view read at two different indices in one kernel (issue #17): a flipped or sliced tensor broadcast against
// itself, multiplied by its own transpose. The kernel builder once memoized lowered values under the addresses of
// index nodes it did not keep alive, so a later index built at a freed address picked up a stale value; whether it
// did depended on the allocator, so each case runs 100 times with a different allocation pattern in between (a
// random number of live and freed nodes and heap blocks, and, after the issue's own case, other shapes, which take
// other paths through the allocator), on every executing backend. Expected values: numpy's for the issue's cases
// (written out below), plain loops over the input for the other shapes.
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/register_all.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

constexpr int kRounds = 100;

class ViewReuseTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(GetParam()).ok()) GTEST_SKIP() << GetParam() << " backend not available";
  }

  // Perturbs the heap and the intern table: keeps some nodes and blocks alive until the next round, frees others.
  void Shuffle(int round) {
    std::mt19937 rng(static_cast<uint32_t>(round) * 7919u + 17u);
    keep_nodes_.clear();
    keep_blocks_.clear();
    const int n = static_cast<int>(rng() % 200);
    std::vector<UOpPtr> transient;
    for (int i = 0; i < n; ++i) {
      UOpPtr c = UOp::ConstInt(static_cast<int64_t>(rng() % 100000) + 1000000);
      UOpPtr e = c * static_cast<int64_t>(rng() % 7 + 2) + UOp::ConstInt(static_cast<int64_t>(rng() % 5));
      (rng() % 2 ? keep_nodes_ : transient).push_back(e);
    }
    for (int i = static_cast<int>(rng() % 50); i > 0; --i) {
      std::vector<char> b(rng() % 512 + 1);
      if (rng() % 2) keep_blocks_.push_back(std::move(b));
    }
  }

  std::vector<UOpPtr> keep_nodes_;
  std::vector<std::vector<char>> keep_blocks_;
};

std::vector<float> X6() { return {0, 1, 2, 3, 4, 5}; }

// Round 0 is the issue's 3x2 case; later rounds cycle through n x m inputs holding 0, 1, 2, ...
std::pair<int64_t, int64_t> ShapeOf(int round) {
  if (round == 0) return {3, 2};
  return {2 + round % 6, 1 + (round / 6) % 3};
}
std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST_P(ViewReuseTest, FlipReshapedTwoWaysAndAdded) {
  const std::vector<float> issue = {8, 10, 6, 8, 4, 6, 6, 8, 4, 6, 2, 4, 4, 6, 2, 4, 0, 2};
  for (int round = 0; round < kRounds; ++round) {
    Shuffle(round);
    auto [n, m] = ShapeOf(round);
    std::vector<float> x = Iota(n * m), want;
    for (int64_t i = 0; i < n; ++i)  // f[i] + f[j], f = x[::-1]
      for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < m; ++k) want.push_back(x[(n - 1 - i) * m + k] + x[(n - 1 - j) * m + k]);
    if (round == 0) { ASSERT_EQ(want, issue); }
    Tensor f = Tensor::FromVector(x, {n, m}, GetParam()).Flip(0);
    auto got = (f.Reshape({n, 1, m}) + f.Reshape({1, n, m})).ToVector<float>();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(*got, want) << "round " << round << ", " << n << "x" << m;
  }
}

TEST_P(ViewReuseTest, FlipTimesItsTranspose) {
  const std::vector<float> issue = {41, 23, 5, 23, 13, 3, 5, 3, 1};
  for (int round = 0; round < kRounds; ++round) {
    Shuffle(round);
    auto [n, m] = ShapeOf(round);
    std::vector<float> x = Iota(n * m), want;
    for (int64_t i = 0; i < n; ++i)  // (f @ f.T)[i][j] = sum_k f[i][k] f[j][k]
      for (int64_t j = 0; j < n; ++j) {
        float s = 0;
        for (int64_t k = 0; k < m; ++k) s += x[(n - 1 - i) * m + k] * x[(n - 1 - j) * m + k];
        want.push_back(s);
      }
    if (round == 0) { ASSERT_EQ(want, issue); }
    Tensor f = Tensor::FromVector(x, {n, m}, GetParam()).Flip(0);
    auto got = f.Matmul(f.Transpose(0, 1)).ToVector<float>();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(*got, want) << "round " << round << ", " << n << "x" << m;
  }
}

TEST_P(ViewReuseTest, SlicedPairwiseSquaredDistance) {
  const std::vector<float> issue = {0, 8, 8, 0};
  for (int round = 0; round < kRounds; ++round) {
    Shuffle(round);
    auto [n, m] = ShapeOf(round);
    std::vector<float> x = Iota(n * m), want;
    for (int64_t i = 1; i < n; ++i)  // a = x[1:]: sum_k (a[i][k] - a[j][k])^2
      for (int64_t j = 1; j < n; ++j) {
        float s = 0;
        for (int64_t k = 0; k < m; ++k) s += (x[i * m + k] - x[j * m + k]) * (x[i * m + k] - x[j * m + k]);
        want.push_back(s);
      }
    if (round == 0) { ASSERT_EQ(want, issue); }
    Tensor a = Tensor::FromVector(x, {n, m}, GetParam()).Slice({SliceArg::Range(1, std::nullopt)});
    auto got = (a.Unsqueeze(1) - a.Unsqueeze(0)).Square().Sum(-1).ToVector<float>();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(*got, want) << "round " << round << ", " << n << "x" << m;
  }
}

TEST_P(ViewReuseTest, ShrinkUsedAtTwoIndices) {
  // x[1:3, :] + x[1:3, :].T-broadcast: s[i, j] + s[j, i] for the 2x2 block s = x[1:3, 0:2].
  const std::vector<float> want = {4, 7, 7, 10};
  for (int round = 0; round < kRounds; ++round) {
    Shuffle(round);
    Tensor s = Tensor::FromVector(X6(), {3, 2}, GetParam()).Shrink({{1, 3}, {0, 2}});
    auto got = (s + s.Transpose(0, 1)).ToVector<float>();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(*got, want) << "round " << round;
  }
}

TEST_P(ViewReuseTest, CatOfShrinksThenShrunk) {
  // Found by the ONNX import (Slice of a Concat of one-element Slices): the gate of the Cat's third
  // part once depended on the order the parts were built in. Expected values are plain loops.
  for (int round = 0; round < kRounds; ++round) {
    Shuffle(round);
    const int64_t n = round == 0 ? 4 : 5 + round % 3;  // round 0: the ONNX case (4 parts + a constant)
    std::vector<int64_t> d(n), cat;
    for (int64_t i = 0; i < n; ++i) d[i] = 2 + i;
    Tensor b = Tensor::FromVector(d, {n}, GetParam());
    std::vector<Tensor> parts;
    for (int64_t i = 0; i < n; ++i) {
      if (i == 2 && round % 2 == 0) {  // a constant between the views, as in the ONNX model
        parts.push_back(Tensor::Full({1}, int64_t{1}, dtypes::kInt64, GetParam()));
        cat.push_back(1);
      }
      parts.push_back(b.Shrink({{i, i + 1}}));
      cat.push_back(d[i]);
    }
    std::vector<int64_t> want(cat.begin() + 2, cat.begin() + 5);
    auto got = Tensor::Cat(parts, 0).Shrink({{2, 5}}).Contiguous().ToVector<int64_t>();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(*got, want) << "round " << round << ", " << n << " parts";
  }
}

TEST_P(ViewReuseTest, PoolOverAnExpandedConstantInOneKernelWithASum) {
  // sum-pool(x) / sum-pool(ones) in one kernel, ones an expanded constant (ONNX AveragePool's counts):
  // the counts' accumulator does not depend on the output loops, and was once reset only once per
  // kernel, so it counted on across outputs (4, 8, 12, ... instead of 4). Expected: plain loops.
  for (int nd = 1; nd <= 3; ++nd) {
    for (int64_t dil : {1, 2}) {
      const int64_t side = 4, k = 2, out = side - dil * (k - 1);
      std::vector<int64_t> shape = {1, 1};
      int64_t n = 1, outs = 1;
      for (int i = 0; i < nd; ++i) shape.push_back(side), n *= side, outs *= out;
      std::vector<float> xs(n);
      for (int64_t i = 0; i < n; ++i) xs[i] = static_cast<float>(i % 7 + 1);
      std::vector<float> want(outs);
      for (int64_t o = 0; o < outs; ++o) {  // mean of x over the dilated window at output o
        float sum = 0;
        int64_t cnt = 0;
        for (int64_t w = 0; w < (int64_t{1} << nd); ++w) {  // k = 2: one bit per dim
          int64_t flat = 0;
          for (int d = 0, orem = o; d < nd; ++d) {
            const int64_t od = orem % out, wd = (w >> d) & 1;
            orem /= out;
            int64_t stride = 1;
            for (int e = 0; e < d; ++e) stride *= side;
            flat += (od + wd * dil) * stride;
          }
          sum += xs[flat], ++cnt;
        }
        want[o] = sum / static_cast<float>(cnt);
      }
      // Dims are laid out last-fastest in the Tensor, first-fastest above: reverse the input order.
      std::vector<float> xr(n);
      for (int64_t i = 0; i < n; ++i) {
        int64_t r = 0;
        for (int d = 0, rem = static_cast<int>(i); d < nd; ++d) {
          r = r * side + rem % side;
          rem /= static_cast<int>(side);
        }
        xr[r] = xs[i];
      }
      PoolOptions o;
      o.stride = IntVec(nd, 1);
      o.dilation = IntVec(nd, dil);
      Tensor x = Tensor::FromVector(xr, shape, GetParam());
      Tensor ones = Tensor::Ones(shape, dtypes::kFloat32, GetParam());
      auto got = x.AvgPool2d(IntVec(nd, k), o).Div(ones.AvgPool2d(IntVec(nd, k), o)).ToVector<float>();
      ASSERT_TRUE(got.ok()) << got.status();
      std::vector<float> want_r(outs);
      for (int64_t i = 0; i < outs; ++i) {
        int64_t r = 0;
        for (int d = 0, rem = static_cast<int>(i); d < nd; ++d) {
          r = r * out + rem % out;
          rem /= static_cast<int>(out);
        }
        want_r[r] = want[i];
      }
      for (int64_t i = 0; i < outs; ++i)
        ASSERT_NEAR((*got)[i], want_r[i], 1e-5) << nd << "-d, dilation " << dil << ", output " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ViewReuseTest, ::testing::Values("CPU", "INTERP", "CL"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
