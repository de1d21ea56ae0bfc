// Long float32 sums (issue #17): split into partial sums (engine/schedule/split_reduce.h), they stay exact on ones
// past 2^24 (where one float32 accumulator stops growing) and within 1e-6 of a float64 reference on 10^7 random
// values, on every backend. References are computed here in double (exact for ones, and a plain float64 sum for the
// random data, whose own error is ~1e-16). The sizes per backend keep `make test` short (INTERP interprets each add);
// KILN_LONG_SUM_FULL=1 runs the sizes (2^28 ones, 10^7 random values) on every backend.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

struct Sizes {
  int64_t ones_from_vector;  // FromVector(ones).Sum()
  int64_t ones_full;         // Full({n}, 1).Sum()
  int64_t random;            // uniform [0, 1) values: Sum, Mean, Var
};

Sizes SizesFor(const std::string& dev) {
  const char* full = std::getenv("KILN_LONG_SUM_FULL");
  if (full != nullptr && std::string(full) == "1") return {int64_t{1} << 28, int64_t{1} << 28, 10'000'000};
  if (dev == "INTERP") return {(int64_t{1} << 24) + 4096, (int64_t{1} << 24) + 4096, 1'000'000};
  return {int64_t{1} << 25, int64_t{1} << 28, 10'000'000};
}

class LongSumTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(GetParam()).ok()) GTEST_SKIP() << GetParam() << " backend not available";
  }
  static double Item(const Tensor& t) {
    auto v = t.ToVector<float>();
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() && v->size() == 1 ? (*v)[0] : NAN;
  }
};

TEST_P(LongSumTest, OnesFromVectorAreExact) {
  const int64_t n = SizesFor(GetParam()).ones_from_vector;
  Tensor x = Tensor::FromVector(std::vector<float>(n, 1.0f), {n}, GetParam());
  EXPECT_EQ(Item(x.Sum()), static_cast<double>(n));
}

TEST_P(LongSumTest, FullOnesAreExact) {
  const int64_t n = SizesFor(GetParam()).ones_full;
  // A graph of constants alone runs on the default device; a 0 read from a buffer on the backend puts it there.
  Tensor zero = Tensor::FromVector(std::vector<float>{0.0f}, {1}, GetParam());
  EXPECT_EQ(Item((Tensor::Full({n}, 1.0f, std::nullopt, GetParam()) + zero).Sum()), static_cast<double>(n));
}

TEST_P(LongSumTest, PrimeLengthOnesAreExact) {
  // 2 x 8388617 (a prime): no divisor gives groups of about 4096, so they are zero-padded; above 2^24 and even, so
  // float32 holds the exact sum.
  const int64_t n = 16777234;
  Tensor x = Tensor::FromVector(std::vector<float>(n, 1.0f), {n}, GetParam());
  EXPECT_EQ(Item(x.Sum()), static_cast<double>(n));
}

TEST_P(LongSumTest, ColumnSumsOfOnesAreExact) {
  const int64_t n = (int64_t{1} << 24) + 8, c = 2;
  Tensor x = Tensor::FromVector(std::vector<float>(n * c, 1.0f), {n, c}, GetParam());
  auto v = x.Sum(0).ToVector<float>();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::vector<float>(c, static_cast<float>(n)));
}

TEST_P(LongSumTest, RandomSumMeanVarWithin1e6OfFloat64) {
  const int64_t n = SizesFor(GetParam()).random;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> data(n);
  double sum = 0;
  for (float& f : data) {
    f = u(rng);
    sum += f;
  }
  const double mean = sum / static_cast<double>(n);
  double ss = 0;
  for (float f : data) ss += (f - mean) * (f - mean);
  const double var = ss / static_cast<double>(n - 1);
  Tensor x = Tensor::FromVector(data, {n}, GetParam());
  const double got_sum = Item(x.Sum()), got_mean = Item(x.Mean()), got_var = Item(x.Var());
  EXPECT_LE(std::abs(got_sum - sum) / sum, 1e-6) << "sum " << got_sum << " vs " << sum;
  EXPECT_LE(std::abs(got_mean - mean) / mean, 1e-6) << "mean " << got_mean << " vs " << mean;
  EXPECT_LE(std::abs(got_var - var) / var, 1e-6) << "var " << got_var << " vs " << var;
  std::printf("[ %s ] n=%lld relative errors: sum %.3g mean %.3g var %.3g\n", GetParam().c_str(),
              static_cast<long long>(n), std::abs(got_sum - sum) / sum, std::abs(got_mean - mean) / mean,
              std::abs(got_var - var) / var);
}

INSTANTIATE_TEST_SUITE_P(Backends, LongSumTest, ::testing::Values("CPU", "INTERP", "CL"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
