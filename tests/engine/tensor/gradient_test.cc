// Gradients of every differentiable op (engine/tensor/gradient.h), realized on the CPU backend in
// float64 and checked two ways: against numpy's analytic gradient (gen_gradient_cases.py, run in the
// test virtualenv; skipped when numpy is missing) and against a central finite difference computed
// by kiln forward passes. Both at rtol 1e-3. Loss = sum(f(inputs) * w) with a random upstream w.
#include "engine/tensor/gradient.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "backends/register_all.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Case {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<double>> inputs;  // the upstream gradient w last
  std::map<int, std::vector<double>> grads;
};

ConvOptions Strided(IntVec stride, IntVec padding) {
  ConvOptions o;
  o.stride = std::move(stride);
  o.padding = std::move(padding);
  return o;
}

const std::map<std::string, Fn>& Ops() {
  static const auto* ops = new std::map<std::string, Fn>{
      {"neg", [](const auto& a) { return a[0].Neg(); }},
      {"reciprocal", [](const auto& a) { return a[0].Reciprocal(); }},
      {"exp", [](const auto& a) { return a[0].Exp(); }},
      {"exp2", [](const auto& a) { return a[0].Exp2(); }},
      {"log", [](const auto& a) { return a[0].Log(); }},
      {"log2", [](const auto& a) { return a[0].Log2(); }},
      {"sqrt", [](const auto& a) { return a[0].Sqrt(); }},
      {"rsqrt", [](const auto& a) { return a[0].Rsqrt(); }},
      {"sin", [](const auto& a) { return a[0].Sin(); }},
      {"cos", [](const auto& a) { return a[0].Cos(); }},
      {"relu", [](const auto& a) { return a[0].Relu(); }},
      {"sigmoid", [](const auto& a) { return a[0].Sigmoid(); }},
      {"tanh", [](const auto& a) { return a[0].Tanh(); }},
      {"square", [](const auto& a) { return a[0].Square(); }},
      {"abs", [](const auto& a) { return a[0].Abs(); }},
      {"trunc", [](const auto& a) { return a[0].Trunc(); }},
      {"cast", [](const auto& a) { return a[0].Cast(dtypes::kFloat32).Cast(dtypes::kFloat64); }},
      {"gelu", [](const auto& a) { return a[0].Gelu(); }},
      {"silu", [](const auto& a) { return a[0].Silu(); }},
      {"add", [](const auto& a) { return a[0].Add(a[1]); }},
      {"sub", [](const auto& a) { return a[0].Sub(a[1]); }},
      {"mul", [](const auto& a) { return a[0].Mul(a[1]); }},
      {"div", [](const auto& a) { return a[0].Div(a[1]); }},
      {"pow", [](const auto& a) { return a[0].Pow(a[1]); }},
      {"maximum_ties", [](const auto& a) { return a[0].Maximum(a[1]); }},
      {"maximum", [](const auto& a) { return a[0].Maximum(a[1]); }},
      {"minimum", [](const auto& a) { return a[0].Minimum(a[1]); }},
      {"where", [](const auto& a) { return a[2].Gt(0).Where(a[0], a[1]); }},
      {"broadcast_add", [](const auto& a) { return a[0].Add(a[1]); }},
      {"broadcast_mul", [](const auto& a) { return a[0].Mul(a[1]); }},
      {"reuse", [](const auto& a) { return a[0].Mul(a[0]).Add(a[0].Mul(a[0]).Mul(a[0])); }},
      {"sum_axis", [](const auto& a) { return a[0].Sum(1); }},
      {"sum_all", [](const auto& a) { return a[0].Sum(); }},
      {"mean", [](const auto& a) { return a[0].Mean(0); }},
      {"max_axis_ties", [](const auto& a) { return a[0].Max(1); }},
      {"max_axis", [](const auto& a) { return a[0].Max(0); }},
      {"min_axis", [](const auto& a) { return a[0].Min(1); }},
      {"prod_axis", [](const auto& a) { return a[0].Prod(1); }},
      {"reshape", [](const auto& a) { return a[0].Reshape({2, 6}); }},
      {"permute", [](const auto& a) { return a[0].Permute({2, 0, 1}); }},
      {"expand", [](const auto& a) { return a[0].Expand({3, 4}); }},
      {"pad", [](const auto& a) { return a[0].Pad({{1, 2}, {0, 1}}); }},
      {"shrink", [](const auto& a) { return a[0].Shrink({{1, 3}, {1, 4}}); }},
      {"flip", [](const auto& a) { return a[0].Flip(0); }},
      {"contiguous", [](const auto& a) { return a[0].Contiguous(); }},
      {"detach", [](const auto& a) { return a[0].Detach().Mul(a[0]); }},
      {"matmul", [](const auto& a) { return a[0].Matmul(a[1]); }},
      {"softmax", [](const auto& a) { return a[0].Softmax(); }},
      {"log_softmax", [](const auto& a) { return a[0].LogSoftmax(); }},
      {"conv2d", [](const auto& a) { return a[0].Conv2d(a[1]); }},
      {"conv2d_s2p1", [](const auto& a) { return a[0].Conv2d(a[1], std::nullopt, Strided({2}, {1})); }},
      {"conv2d_s2p1_wide", [](const auto& a) { return a[0].Conv2d(a[1], std::nullopt, Strided({2}, {1})); }},
      {"conv2d_s2_rem", [](const auto& a) { return a[0].Conv2d(a[1], std::nullopt, Strided({2}, {0})); }},
      {"conv2d_1x1s2", [](const auto& a) { return a[0].Conv2d(a[1], std::nullopt, Strided({2}, {0})); }},
      {"conv2d_s23p1", [](const auto& a) { return a[0].Conv2d(a[1], std::nullopt, Strided({2, 3}, {1})); }},
      {"max_pool2d", [](const auto& a) { return a[0].MaxPool2d(); }},
      {"avg_pool2d", [](const auto& a) { return a[0].AvgPool2d(); }},
      {"layernorm", [](const auto& a) { return a[0].LayerNorm(); }},
      {"cross_entropy",
       [](const auto& a) {
         Tensor labels = Tensor::FromVector<int32_t>({1, 0, 4, 2}, {4});
         return a[0].SparseCategoricalCrossentropy(labels);
       }},
      {"cat", [](const auto& a) { return Tensor::Cat({a[0], a[1]}, 0); }},
      {"stack", [](const auto& a) { return Tensor::Stack({a[0], a[1]}, 1); }},
      {"var", [](const auto& a) { return a[0].Var(Axes{1}); }},
  };
  return *ops;
}

// No finite difference for: inputs on a kink (ties), where it is not defined; detach, whose gradient
// differs from the derivative by design; cast through float32, whose rounding swamps the step.
bool SkipFiniteDifference(const std::string& name) {
  return name == "maximum_ties" || name == "max_axis_ties" || name == "detach" || name == "cast";
}

const std::map<std::string, Case>* LoadCases(std::string* error) {
  static std::string* err = new std::string();
  static const std::map<std::string, Case>* cases = [] {
    auto* out = new std::map<std::string, Case>();
    // One file per process: ctest -j runs several gradient_test processes at once.
    std::string path = ::testing::TempDir() + "kiln_gradient_cases_" + std::to_string(getpid()) + ".txt";
    std::string cmd = std::string(KILN_TEST_PYTHON) + " " + KILN_GRADIENT_GEN + " " + path + " 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      *err = "cannot run " + cmd + " (numpy missing?)";
      return out;
    }
    std::ifstream f(path);
    std::string line, name;
    while (std::getline(f, line)) {
      std::istringstream in(line);
      std::string kind;
      in >> kind;
      if (kind == "case") {
        in >> name;
        (*out)[name] = Case{};
      } else if (kind == "input") {
        Case& c = (*out)[name];
        int nd;
        in >> nd;
        std::vector<int64_t> shape(nd);
        int64_t n = 1;
        for (auto& d : shape) {
          in >> d;
          n *= d;
        }
        std::vector<double> v(n);
        for (double& x : v) in >> x;
        c.shapes.push_back(shape);
        c.inputs.push_back(v);
      } else if (kind == "grad") {
        Case& c = (*out)[name];
        int i;
        in >> i;
        std::vector<double> v(c.inputs[i].size());
        for (double& x : v) in >> x;
        c.grads[i] = v;
      }
    }
    f.close();
    std::remove(path.c_str());
    return out;
  }();
  *error = *err;
  return cases;
}

std::vector<Tensor> Inputs(const Case& c, DType dtype) {
  std::vector<Tensor> ts;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    ts.push_back(Tensor::FromVector<double>(c.inputs[i], c.shapes[i]).Cast(dtype));
  }
  return ts;
}

// `contiguous` breaks the forward into two kernels: working around a codegen error on a reduce of a
// reduce in one kernel (conv2d/pool then sum: "linearize: AFTER placed before its source END").
Tensor Loss(const Fn& f, const std::vector<Tensor>& ts, bool contiguous = false) {
  std::vector<Tensor> xs(ts.begin(), ts.end() - 1);
  Tensor y = f(xs);
  if (contiguous) y = y.Contiguous();
  return y.Mul(ts.back()).Sum();
}

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << what << " element " << i;
  }
}

class GradientOpTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { backends::RegisterAllBackends(); }
};

TEST_P(GradientOpTest, MatchesNumpyAndFiniteDifference) {
  std::string error;
  const auto* cases = LoadCases(&error);
  if (!error.empty()) GTEST_SKIP() << error;
  auto it = cases->find(GetParam());
  ASSERT_NE(it, cases->end()) << "no case " << GetParam() << " in gen_gradient_cases.py";
  const Case& c = it->second;
  const Fn& f = Ops().at(GetParam());
  std::vector<Tensor> ts = Inputs(c, dtypes::kFloat64);
  std::vector<Tensor> targets(ts.begin(), ts.end() - 1);
  Tensor loss = Loss(f, ts);
  ASSERT_TRUE(loss.ok()) << loss.status();
  absl::StatusOr<std::vector<Tensor>> g = Gradient(loss, targets);
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<std::vector<double>> got;
  for (Tensor& gi : *g) {
    ASSERT_EQ(gi.dtype(), dtypes::kFloat64);
    absl::StatusOr<std::vector<double>> v = gi.ToVector<double>();
    ASSERT_TRUE(v.ok()) << v.status();
    got.push_back(*v);
  }
  // numpy's analytic gradient
  for (const auto& [i, want] : c.grads) ExpectClose(got[i], want, 1e-3, 1e-6, "numpy grad of input " + std::to_string(i));
  // central finite difference with kiln forward passes
  if (SkipFiniteDifference(GetParam())) return;
  for (size_t i = 0; i + 1 < c.inputs.size(); ++i) {
    std::vector<double> fd(c.inputs[i].size());
    for (size_t j = 0; j < fd.size(); ++j) {
      double x = c.inputs[i][j];
      double h = 1e-6 * std::max(1.0, std::abs(x));
      double lv[2];
      for (int s = 0; s < 2; ++s) {
        Case p = c;
        p.inputs[i][j] = x + (s == 0 ? h : -h);
        absl::StatusOr<double> l = Loss(f, Inputs(p, dtypes::kFloat64), /*contiguous=*/true).Item<double>();
        ASSERT_TRUE(l.ok()) << l.status();
        lv[s] = *l;
      }
      fd[j] = (lv[0] - lv[1]) / (2 * h);
    }
    ExpectClose(got[i], fd, 1e-3, 1e-5, "finite difference of input " + std::to_string(i));
  }
}

std::vector<std::string> OpNames() {
  std::vector<std::string> names;
  for (const auto& [name, f] : Ops()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Ops, GradientOpTest, ::testing::ValuesIn(OpNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---- graph-level behaviour ----

TEST(GradientTest, RulesAreNamed) { EXPECT_GE(GradientRules().num_rules(), 25u); }

TEST(GradientTest, NonScalarNeedsOutputGradient) {
  Tensor x = Tensor::Ones({2, 2});
  absl::StatusOr<std::vector<Tensor>> g = Gradient(x.Mul(2), {x});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("non-scalar"), std::string::npos) << g.status();
}

TEST(GradientTest, IntTargetIsAnError) {
  Tensor x = Tensor::Ones({2}, dtypes::kInt32);
  absl::StatusOr<std::vector<Tensor>> g = Gradient(x.Cast(dtypes::kFloat32).Sum(), {x});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("only float Tensors have gradient"), std::string::npos);
}

TEST(GradientTest, UnreachableTargetGetsZeros) {
  backends::RegisterAllBackends();
  Tensor x = Tensor::FromVector<float>({1, 2}, {2});
  Tensor y = Tensor::FromVector<float>({3, 4}, {2});
  absl::StatusOr<std::vector<Tensor>> g = Gradient(x.Sum(), {y});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*(*g)[0].ToVector<float>(), (std::vector<float>{0, 0}));
}

TEST(GradientTest, ExplicitOutputGradient) {
  backends::RegisterAllBackends();
  Tensor x = Tensor::FromVector<float>({1, 2, 3}, {3});
  Tensor seed = Tensor::FromVector<float>({1, 10, 100}, {3});
  absl::StatusOr<std::vector<Tensor>> g = x.Mul(x).Gradient({x}, seed);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*(*g)[0].ToVector<float>(), (std::vector<float>{2, 40, 600}));
}

TEST(BackwardTest, FillsGradOfRequiresGradTensorsOnly) {
  backends::RegisterAllBackends();
  Tensor w = Tensor::FromVector<float>({1, 2, 3}, {3});
  w.RequiresGrad();
  Tensor c = Tensor::FromVector<float>({4, 5, 6}, {3});
  Tensor loss = w.Mul(c).Sum();
  ASSERT_TRUE(loss.Backward().ok());
  ASSERT_TRUE(w.has_grad());
  EXPECT_FALSE(c.has_grad());
  EXPECT_EQ(*w.Grad().ToVector<float>(), (std::vector<float>{4, 5, 6}));
  // a second Backward accumulates; ZeroGrad clears
  ASSERT_TRUE(loss.Backward().ok());
  EXPECT_EQ(*w.Grad().ToVector<float>(), (std::vector<float>{8, 10, 12}));
  w.ZeroGrad();
  EXPECT_FALSE(w.has_grad());
  EXPECT_EQ(w.Grad().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(BackwardTest, RegistryFollowsObjects) {
  size_t before = LiveRequiresGradCount();
  {
    Tensor w = Tensor::Ones({2});
    w.RequiresGrad();
    Tensor copy = w;  // copies carry the flag
    EXPECT_TRUE(copy.requires_grad());
    EXPECT_EQ(LiveRequiresGradCount(), before + 2);
    Tensor other = Tensor::Zeros({2});
    other = w;  // assignment keeps the target's autograd state
    EXPECT_FALSE(other.requires_grad());
    w = Tensor::Zeros({2});
    EXPECT_TRUE(w.requires_grad());
  }
  EXPECT_EQ(LiveRequiresGradCount(), before);
}

TEST(BackwardTest, NonScalarLossIsAnError) {
  Tensor w = Tensor::Ones({2});
  w.RequiresGrad();
  absl::Status st = w.Mul(2).Backward();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("one element"), std::string::npos) << st;
}

TEST(BackwardTest, IntRequiresGradIsAnError) {
  Tensor w = Tensor::Ones({2}, dtypes::kInt32);
  w.RequiresGrad();
  EXPECT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("only float"), std::string::npos);
}

}  // namespace
}  // namespace kiln
