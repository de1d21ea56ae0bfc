// Tanh near 0 (found by the differential test, issue #17): 2 sigmoid(2x) - 1 cancels, 4e-4 relative error at 1e-4.
// Checked against libm's double tanh on CPU, INTERP and CL over tiny, moderate and saturated arguments.
#include <cmath>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

class TanhAccuracyTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(GetParam()).ok()) GTEST_SKIP() << GetParam() << " backend not available";
  }
};

TEST_P(TanhAccuracyTest, RelativeErrorWithinAFewUlps) {
  std::vector<float> x;
  for (float m = 1e-7f; m < 30.0f; m *= 1.37f) {
    x.push_back(m);
    x.push_back(-m);
  }
  x.insert(x.end(), {0.0f, 0.2499f, 0.25f, 0.2501f, 88.0f, -88.0f, 1000.0f});
  auto got = Tensor::FromVector(x, {static_cast<int64_t>(x.size())}, GetParam()).Tanh().ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::tanh(static_cast<double>(x[i]));
    EXPECT_LE(std::abs((*got)[i] - want), 1e-6 * std::abs(want) + 1e-30) << "tanh(" << x[i] << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, TanhAccuracyTest, ::testing::Values("CPU", "INTERP", "CL"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
