// engine/nn: layer init ranges and state names, BatchNorm running statistics, and one optimizer step
// of SGD (momentum, nesterov, weight decay), Adam and AdamW against a reference implementation of the
// PyTorch-documented update rule, on a tiny problem with a known gradient.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/nn/layers.h"
#include "engine/nn/losses.h"
#include "engine/nn/module.h"
#include "engine/nn/optim.h"
#include "gtest/gtest.h"

namespace kiln::nn {
namespace {

class NnTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { backends::RegisterAllBackends(); }
};

std::vector<float> Values(const Tensor& t) {
  absl::StatusOr<std::vector<float>> v = t.ToVector<float>();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>{};
}

void ExpectInRange(const Tensor& t, double bound) {
  std::vector<float> v = Values(t);
  ASSERT_FALSE(v.empty());
  float lo = v[0], hi = v[0];
  for (float x : v) {
    EXPECT_LE(std::abs(x), bound);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_GT(hi - lo, bound * 0.5);  // spread over the range, not constant
}

TEST_F(NnTest, LinearInitRange) {
  Tensor::ManualSeed(1);
  Linear l(16, 8);
  EXPECT_EQ(l.weight.shape(), Shape({8, 16}));
  ExpectInRange(l.weight, 1.0 / 4.0);
  ExpectInRange(*l.bias, 1.0 / 4.0);
  EXPECT_TRUE(l.weight.requires_grad());
}

TEST_F(NnTest, Conv2dInitRange) {
  Tensor::ManualSeed(2);
  Conv2d c(4, 6, 3);
  EXPECT_EQ(c.weight.shape(), Shape({6, 4, 3, 3}));
  ExpectInRange(c.weight, 1.0 / 6.0);  // fan_in = 4*3*3 = 36
  ExpectInRange(*c.bias, 1.0 / 6.0);
}

class Net : public Module {
 public:
  Net() {
    layers.Emplace<Conv2d>(1, 2, 3);
    layers.Add([](const Tensor& x) { return x.Relu(); });
    layers.Emplace<BatchNorm>(2);
    layers.Add([](const Tensor& x) { return x.Flatten(1); });
    layers.Emplace<Linear>(8, 3);
  }
  Tensor Forward(const Tensor& x) override { return layers(x); }
  void CollectState(const std::string& prefix, std::vector<NamedTensor>* out) override {
    layers.CollectState(prefix + "layers.", out);
  }
  Sequential layers;
};

TEST_F(NnTest, StateDictNames) {
  Net net;
  std::vector<std::string> names;
  for (const NamedTensor& nt : StateDict(net)) names.push_back(nt.name);
  EXPECT_EQ(names, (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias",
                                             "layers.2.running_mean", "layers.2.running_var", "layers.4.weight",
                                             "layers.4.bias"}));
  EXPECT_EQ(Parameters(net).size(), 8u);
  EXPECT_EQ(TrainableParameters(net).size(), 6u);
}

TEST_F(NnTest, BatchNormRunningStats) {
  BatchNorm bn(2);
  // x (N=2, C=2, 1, 2): channel 0 = {1, 2, 3, 4}, channel 1 = {0, 0, 2, 2}
  Tensor x = Tensor::FromVector<float>({1, 2, 0, 0, 3, 4, 2, 2}, {2, 2, 1, 2});
  Tensor y;
  {
    TrainingScope t(true);
    y = bn(x);
  }
  std::vector<Tensor*> ts = {&y, &bn.running_mean, &bn.running_var};
  absl::Status st = Tensor::Realize(ts);
  ASSERT_TRUE(st.ok()) << st;
  std::vector<float> rm = Values(bn.running_mean), rv = Values(bn.running_var);
  // mean (2.5, 1); biased var (1.25, 1); unbiased (5/3, 4/3)
  EXPECT_NEAR(rm[0], 0.1 * 2.5, 1e-6);
  EXPECT_NEAR(rm[1], 0.1 * 1.0, 1e-6);
  EXPECT_NEAR(rv[0], 0.9 + 0.1 * 5.0 / 3.0, 1e-6);
  EXPECT_NEAR(rv[1], 0.9 + 0.1 * 4.0 / 3.0, 1e-6);
  std::vector<float> yv = Values(y);
  EXPECT_NEAR(yv[0], (1 - 2.5) / std::sqrt(1.25 + 1e-5), 1e-4);
  // eval mode uses the running statistics
  TrainingScope e(false);
  std::vector<float> ye = Values(bn(x));
  EXPECT_NEAR(ye[0], (1 - rm[0]) / std::sqrt(rv[0] + 1e-5), 1e-4);
}

TEST_F(NnTest, MSELoss) {
  Tensor p = Tensor::FromVector<float>({1, 2, 3}, {3});
  Tensor t = Tensor::FromVector<float>({1, 0, 0}, {3});
  EXPECT_NEAR(*MSELoss(p, t).Item<float>(), 13.0 / 3.0, 1e-6);
  EXPECT_NEAR(*MSELoss(p, t, "sum").Item<float>(), 13.0, 1e-6);
  EXPECT_FALSE(MSELoss(p, t, "avg").ok());
}

// ---- optimizers: loss = sum(w * c) + 0.5 * sum(w^2), so grad = c + w ----
const std::vector<float> kW0 = {0.5f, -1.0f, 2.0f};
const std::vector<float> kC = {1.0f, 2.0f, -3.0f};

Tensor LossOf(const Tensor& w) {
  Tensor c = Tensor::FromVector<float>(kC, {3});
  return w.Mul(c).Sum().Add(w.Mul(w).Sum().Mul(0.5));
}

struct Ref {  // reference update rules (PyTorch docs), in double
  std::vector<double> w, b, m, v;
  int t = 0;
  std::vector<double> Grad() const {
    std::vector<double> g(w.size());
    for (size_t i = 0; i < w.size(); ++i) g[i] = kC[i] + w[i];
    return g;
  }
  void Sgd(double lr, double mom, double wd, bool nesterov) {
    std::vector<double> g = Grad();
    if (b.empty()) b.assign(w.size(), 0.0);
    for (size_t i = 0; i < w.size(); ++i) {
      double gi = g[i] + wd * w[i];
      if (mom != 0) {
        b[i] = mom * b[i] + gi;
        gi = nesterov ? gi + mom * b[i] : b[i];
      }
      w[i] -= lr * gi;
    }
  }
  void Adam(double lr, double b1, double b2, double eps, double wd, bool decoupled) {
    std::vector<double> g = Grad();
    if (m.empty()) m.assign(w.size(), 0.0), v.assign(w.size(), 0.0);
    ++t;
    for (size_t i = 0; i < w.size(); ++i) {
      double gi = g[i] + (decoupled ? 0.0 : wd * w[i]);
      if (decoupled) w[i] -= lr * wd * w[i];
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
};

template <typename MakeOpt, typename RefStep>
void CheckSteps(MakeOpt make, RefStep ref_step, int steps = 3) {
  Tensor w = Tensor::FromVector<float>(kW0, {3});
  w.RequiresGrad();
  auto opt = make(std::vector<Tensor*>{&w});
  Ref ref{std::vector<double>(kW0.begin(), kW0.end())};
  for (int s = 0; s < steps; ++s) {
    opt->ZeroGrad();
    Tensor loss = LossOf(w);
    ASSERT_TRUE(loss.Backward().ok());
    ASSERT_TRUE(opt->Step({&loss}).ok());
    ref_step(ref);
    std::vector<float> got = Values(w);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref.w[i], 1e-5 + 1e-4 * std::abs(ref.w[i])) << "step " << s;
  }
}

TEST_F(NnTest, SgdPlain) {
  CheckSteps([](std::vector<Tensor*> p) { return std::make_unique<SGD>(p, 0.1); },
             [](Ref& r) { r.Sgd(0.1, 0, 0, false); });
}
TEST_F(NnTest, SgdMomentumWeightDecay) {
  CheckSteps([](std::vector<Tensor*> p) { return std::make_unique<SGD>(p, 0.1, 0.9, 0.01); },
             [](Ref& r) { r.Sgd(0.1, 0.9, 0.01, false); });
}
TEST_F(NnTest, SgdNesterov) {
  CheckSteps([](std::vector<Tensor*> p) { return std::make_unique<SGD>(p, 0.05, 0.9, 0.0, true); },
             [](Ref& r) { r.Sgd(0.05, 0.9, 0.0, true); });
}
TEST_F(NnTest, Adam) {
  CheckSteps([](std::vector<Tensor*> p) { return std::make_unique<Adam>(p, 0.01); },
             [](Ref& r) { r.Adam(0.01, 0.9, 0.999, 1e-8, 0.0, false); });
}
TEST_F(NnTest, AdamL2) {
  CheckSteps([](std::vector<Tensor*> p) { return std::make_unique<Adam>(p, 0.01, 0.9, 0.999, 1e-8, 0.1); },
             [](Ref& r) { r.Adam(0.01, 0.9, 0.999, 1e-8, 0.1, false); });
}
TEST_F(NnTest, AdamW) {
  CheckSteps([](std::vector<Tensor*> p) { return std::make_unique<AdamW>(p, 0.01, 0.9, 0.999, 1e-8, 0.1); },
             [](Ref& r) { r.Adam(0.01, 0.9, 0.999, 1e-8, 0.1, true); });
}

TEST_F(NnTest, StepWithoutGradientIsAnError) {
  Tensor w = Tensor::FromVector<float>(kW0, {3});
  w.RequiresGrad();
  SGD opt({&w}, 0.1);
  absl::Status st = opt.Step();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("no gradient"), std::string::npos) << st;
}

TEST_F(NnTest, TinyMlpLossDecreases) {
  Tensor::ManualSeed(3);
  Linear l1(4, 8), l2(8, 3);
  std::vector<Tensor*> ps = {&l1.weight, &*l1.bias, &l2.weight, &*l2.bias};
  Adam opt(ps, 0.05);
  Tensor x = Tensor::FromVector<float>({1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1}, {4, 4});
  Tensor y = Tensor::FromVector<int32_t>({0, 1, 2, 1}, {4});
  float first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    opt.ZeroGrad();
    Tensor loss = SparseCategoricalCrossEntropy(l2(l1(x).Relu()), y);
    ASSERT_TRUE(loss.Backward().ok());
    ASSERT_TRUE(opt.Step({&loss}).ok());
    float v = *loss.Item<float>();
    if (s == 0) first = v;
    last = v;
  }
  EXPECT_LT(last, first * 0.2) << first << " -> " << last;
}

}  // namespace
}  // namespace kiln::nn
