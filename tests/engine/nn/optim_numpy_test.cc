// engine/nn optimizers against numpy: optim_ref.py (run in the test virtualenv at test time) computes each
// configuration's parameter trajectory with the PyTorch-documented update rules in float64 on a quadratic loss whose
// gradient it writes out analytically; kiln runs the same configuration (its autograd gives the gradient) and must
// match after every step, rtol 1e-4.
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/register_all.h"
#include "engine/nn/optim.h"
#include "gtest/gtest.h"

namespace kiln::nn {
namespace {

struct Config {
  std::string name, opt;
  double lr = 0, momentum = 0, weight_decay = 0, b1 = 0, b2 = 0, eps = 0;
  bool nesterov = false;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> init, c, d;
  std::vector<std::vector<std::vector<double>>> steps;  // steps[k][i]: parameter i after step k+1
};

std::vector<double> ReadDoubles(std::istringstream& in, size_t n) {
  std::vector<double> v(n);
  for (double& x : v) in >> x;
  return v;
}

std::vector<float> ToFloat(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Runs optim_ref.py and parses its output (format in its docstring).
std::vector<Config> LoadConfigs() {
  std::string cmd = absl::StrCat(KILN_TEST_PYTHON, " ", KILN_OPTIM_REF);
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {};
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) text.append(buf, n);
  if (pclose(p) != 0) return {};
  std::vector<Config> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "config") {
      Config c;
      int nest = 0;
      in >> c.name >> c.opt >> c.lr >> c.momentum >> c.weight_decay >> nest >> c.b1 >> c.b2 >>
          c.eps;
      c.nesterov = nest != 0;
      out.push_back(std::move(c));
    } else if (kind == "param") {
      Config& c = out.back();
      size_t i, ndim;
      std::string word;
      in >> i >> ndim;
      std::vector<int64_t> shape(ndim);
      size_t numel = 1;
      for (int64_t& s : shape) {
        in >> s;
        numel *= static_cast<size_t>(s);
      }
      in >> word;  // "init"
      c.shapes.push_back(shape);
      c.init.push_back(ToFloat(ReadDoubles(in, numel)));
    } else if (kind == "const") {
      Config& c = out.back();
      size_t i;
      std::string word;
      in >> i >> word;  // "c"
      size_t numel = c.init[i].size();
      c.c.push_back(ToFloat(ReadDoubles(in, numel)));
      in >> word;  // "d"
      c.d.push_back(ToFloat(ReadDoubles(in, numel)));
    } else if (kind == "step") {
      Config& c = out.back();
      size_t k, i;
      in >> k >> i;
      if (c.steps.size() < k) c.steps.resize(k);
      c.steps[k - 1].push_back(ReadDoubles(in, c.init[i].size()));
    }
  }
  return out;
}

std::unique_ptr<Optimizer> Make(const Config& c, std::vector<Tensor*> params) {
  if (c.opt == "sgd")
    return std::make_unique<SGD>(params, c.lr, c.momentum, c.weight_decay, c.nesterov);
  if (c.opt == "adam")
    return std::make_unique<Adam>(params, c.lr, c.b1, c.b2, c.eps, c.weight_decay);
  return std::make_unique<AdamW>(params, c.lr, c.b1, c.b2, c.eps, c.weight_decay);
}

class OptimNumpyTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    backends::RegisterAllBackends();
    configs_ = LoadConfigs();
  }
  static std::vector<Config> configs_;
};
std::vector<Config> OptimNumpyTest::configs_;

TEST_P(OptimNumpyTest, TrajectoryMatchesNumpy) {
  const Config* cfg = nullptr;
  for (const Config& c : configs_) {
    if (c.name == GetParam()) cfg = &c;
  }
  ASSERT_NE(cfg, nullptr) << "optim_ref.py gave no configuration " << GetParam();
  ASSERT_FALSE(cfg->steps.empty());
  std::vector<Tensor> params, cs, ds;
  for (size_t i = 0; i < cfg->init.size(); ++i) {
    params.push_back(Tensor::FromVector(cfg->init[i], cfg->shapes[i]));
    params.back().RequiresGrad();
    cs.push_back(Tensor::FromVector(cfg->c[i], cfg->shapes[i]));
    ds.push_back(Tensor::FromVector(cfg->d[i], cfg->shapes[i]));
  }
  std::vector<Tensor*> ptrs;
  for (Tensor& p : params) ptrs.push_back(&p);
  std::unique_ptr<Optimizer> opt = Make(*cfg, ptrs);
  for (size_t k = 0; k < cfg->steps.size(); ++k) {
    opt->ZeroGrad();
    Tensor loss = Tensor::Zeros({});
    for (size_t i = 0; i < params.size(); ++i) {
      loss = loss + (params[i] * params[i] * ds[i] * 0.5 + cs[i] * params[i]).Sum();
    }
    ASSERT_TRUE(loss.Backward().ok());
    absl::Status st = opt->Step({&loss});
    ASSERT_TRUE(st.ok()) << st;
    for (size_t i = 0; i < params.size(); ++i) {
      absl::StatusOr<std::vector<float>> got = params[i].ToVector<float>();
      ASSERT_TRUE(got.ok()) << got.status();
      const std::vector<double>& want = cfg->steps[k][i];
      ASSERT_EQ(got->size(), want.size());
      for (size_t j = 0; j < want.size(); ++j) {
        EXPECT_NEAR((*got)[j], want[j], 1e-6 + 1e-4 * std::abs(want[j]))
            << cfg->name << " step " << k + 1 << " param " << i << " element " << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, OptimNumpyTest,
                         ::testing::Values("sgd", "sgd_wd", "sgd_momentum", "sgd_momentum_wd",
                                           "sgd_nesterov", "sgd_nesterov_wd", "adam", "adam_betas",
                                           "adam_l2", "adamw", "adamw_strong"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace kiln::nn
