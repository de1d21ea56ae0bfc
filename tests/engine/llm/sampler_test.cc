// Sampler (engine/llm/sampler.h): the distribution it draws from against a direct computation of OpenAI's /
// Hugging Face's temperature -> top-k -> top-p filtering written out here, and the draws against that distribution.
#include "engine/llm/sampler.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::llm {
namespace {

// softmax(l / T) over the top_k largest, then the smallest prefix (by probability, largest first) reaching top_p.
std::vector<double> Reference(const std::vector<float>& l, double temp, int64_t top_k,
                              double top_p) {
  std::vector<std::pair<double, int>> v;
  for (size_t i = 0; i < l.size(); ++i) v.push_back({l[i], static_cast<int>(i)});
  std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first > b.first; });
  if (top_k > 0 && top_k < static_cast<int64_t>(v.size())) v.resize(top_k);
  double z = 0;
  for (auto& [x, i] : v) z += std::exp(x / temp);
  std::vector<double> p(v.size());
  for (size_t k = 0; k < v.size(); ++k) p[k] = std::exp(v[k].first / temp) / z;
  size_t keep = v.size();
  double cum = 0;
  for (size_t k = 0; k < v.size(); ++k) {
    cum += p[k];
    if (cum >= top_p) {
      keep = k + 1;
      break;
    }
  }
  double z2 = 0;
  for (size_t k = 0; k < keep; ++k) z2 += p[k];
  std::vector<double> out(l.size(), 0.0);
  for (size_t k = 0; k < keep; ++k) out[v[k].second] = p[k] / z2;
  return out;
}

std::vector<float> RandomLogits(int n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> l(n);
  for (float& x : l) x = d(g);
  return l;
}

TEST(SamplerTest, TemperatureZeroIsTheArgmaxWithTiesToTheLowerId) {
  Sampler s(SamplingParams{.temperature = 0.0});
  EXPECT_EQ(s.Sample(std::vector<float>{0.5f, 3.0f, -1.0f, 3.0f}), 1);
  const std::vector<float> l = RandomLogits(1000, 1);
  EXPECT_EQ(s.Sample(l), std::max_element(l.begin(), l.end()) - l.begin());
}

TEST(SamplerTest, TheDistributionIsTemperatureThenTopKThenTopP) {
  const std::vector<float> l = RandomLogits(300, 2);
  for (double t : {0.3, 1.0, 2.5}) {
    for (int64_t k : {0, 1, 7, 50}) {
      for (double p : {1.0, 0.9, 0.5, 0.05}) {
        const std::vector<double> got =
            Sampler(SamplingParams{.temperature = t, .top_k = k, .top_p = p}).Distribution(l);
        const std::vector<double> want = Reference(l, t, k, p);
        for (size_t i = 0; i < l.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-9)
              << "T " << t << " top_k " << k << " top_p " << p << " id " << i;
      }
    }
  }
}

TEST(SamplerTest, DrawsFollowTheDistribution) {
  const std::vector<float> l = RandomLogits(40, 3);
  const SamplingParams params{.temperature = 0.8, .top_k = 20, .top_p = 0.95, .seed = 7};
  Sampler s(params);
  const std::vector<double> want = Reference(l, 0.8, 20, 0.95);
  const int n = 40000;
  std::vector<int> count(l.size(), 0);
  for (int i = 0; i < n; ++i) ++count[s.Sample(l)];
  for (size_t i = 0; i < l.size(); ++i) {
    if (want[i] == 0.0) {
      EXPECT_EQ(count[i], 0) << "id " << i << " is outside the kept set";
      continue;
    }
    const double sd = std::sqrt(n * want[i] * (1 - want[i]));
    EXPECT_NEAR(count[i], n * want[i], 5 * sd + 1) << "id " << i;
  }
}

TEST(SamplerTest, ASeedRepeatsTheDraws) {
  const std::vector<float> l = RandomLogits(500, 4);
  auto draws = [&](uint64_t seed) {
    Sampler s(SamplingParams{.temperature = 1.0, .seed = seed});
    std::vector<int32_t> d;
    for (int i = 0; i < 64; ++i) d.push_back(s.Sample(l));
    return d;
  };
  EXPECT_EQ(draws(42), draws(42));
  EXPECT_NE(draws(42), draws(43));
}

TEST(SamplerTest, ParametersOutsideTheirRangeAreNamed) {
  EXPECT_TRUE(SamplingParams{}.Validate().ok());
  EXPECT_NE(SamplingParams{.temperature = -0.1}.Validate().message().find("temperature"),
            std::string::npos);
  EXPECT_NE(SamplingParams{.temperature = NAN}.Validate().message().find("temperature"),
            std::string::npos);
  EXPECT_NE(SamplingParams{.top_k = -1}.Validate().message().find("top_k"), std::string::npos);
  EXPECT_NE(SamplingParams{.top_p = 0.0}.Validate().message().find("top_p"), std::string::npos);
  EXPECT_NE(SamplingParams{.top_p = 1.5}.Validate().message().find("top_p"), std::string::npos);
}

}  // namespace
}  // namespace kiln::llm
