// Values of Tensor graphs, evaluated by the test-only reference interpreter (ref_eval.h) and compared
// with values computed directly in the test (naive loops, <cmath>). Checks the lowering without
// engine/realize. Device conformance (realized values vs numpy) is a separate, later suite.
//
// Conformance harness design (to write once realization works; label `conformance`): a Python
// script (tests/conformance/gen_tensor_cases.py, numpy in the project venv) emits a JSON file of cases
// {op, input shapes/dtypes, inputs drawn with numpy seed 0 in [-2, 2] (ints in [-5, 5]), args,
// expected output values/shape/dtype}; the C++ test builds each op with FromVector inputs, realizes
// on every available backend and compares with numpy: shape and dtype exactly, ints exactly, floats
// with atol 1e-6 / rtol 1e-3 (tinygrad's helper_test_op tolerances), nan positions exactly.
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"
#include "tests/engine/tensor/ref_eval.h"
#include "tests/engine/tensor/test_util.h"

namespace kiln {
namespace {

using testing::RefEval;
using testing::Sh;
using testing::V;
using Vals = std::vector<double>;

Vals Eval(const Tensor& t) {
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  return RefEval().Eval(t);
}

// Deterministic test data: element i is ((7 i) mod 11) - 5, as float32.
double DataAt(int64_t i) { return static_cast<double>((7 * i) % 11 - 5); }
Tensor Data(std::initializer_list<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return Tensor::Arange(n).Mul(7).Mod(11).Sub(5).Cast(dtypes::kFloat32).Reshape(shape);
}

void ExpectNear(const Vals& got, const Vals& want, double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << "at " << i;
    }
  }
}

TEST(TensorValuesTest, ArangeAndEye) {
  EXPECT_EQ(Eval(Tensor::Arange(6)), Vals({0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(Eval(Tensor::Arange(1)), Vals({0}));
  EXPECT_EQ(Eval(Tensor::Arange(2, 11, 3)), Vals({2, 5, 8}));
  EXPECT_EQ(Eval(Tensor::Arange(5, 0, -2)), Vals({5, 3, 1}));
  Vals big = Eval(Tensor::Arange(1000));
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(big[i], i);
  ExpectNear(Eval(Tensor::Arange(0, 1, 0.25)), {0, 0.25, 0.5, 0.75});
  ExpectNear(Eval(Tensor::Arange(-1.5, 1.5, 0.5)), {-1.5, -1, -0.5, 0, 0.5, 1});
  EXPECT_EQ(Eval(Tensor::Eye(3)), Vals({1, 0, 0, 0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(Eval(Tensor::Eye(2, 3)), Vals({1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(Eval(Tensor::Eye(3, 2)), Vals({1, 0, 0, 1, 0, 0}));
  EXPECT_EQ(DataAt(3), Eval(Data({5}))[3]);
}

TEST(TensorValuesTest, SlicingMatchesPython) {
  using S = SliceArg;
  Tensor x = Tensor::Arange(10);
  EXPECT_EQ(Eval(x.Slice({S::Range(2, 8, 2)})), Vals({2, 4, 6}));
  EXPECT_EQ(Eval(x.Slice({S::Range(std::nullopt, std::nullopt, -3)})), Vals({9, 6, 3, 0}));
  EXPECT_EQ(Eval(x.Slice({S::Range(8, 2, -2)})), Vals({8, 6, 4}));
  EXPECT_EQ(Eval(x.Slice({S::Range(-3, std::nullopt)})), Vals({7, 8, 9}));
  EXPECT_EQ(Eval(x.Slice({S::Range(-2, -8, -3)})), Vals({8, 5}));
  EXPECT_EQ(Eval(x.Slice({S::Index(-2)})), Vals({8}));
  Tensor y = Tensor::Arange(24).Reshape({2, 3, 4});
  EXPECT_EQ(Eval(y.Slice({S::Index(1), S::Range(std::nullopt, std::nullopt, -2), S::Range(1, 4, 2)})),
            Vals({21, 23, 13, 15}));
  EXPECT_EQ(Eval(y.Flip({0, 2}).Slice({S::Index(0), S::Index(0)})), Vals({15, 14, 13, 12}));  // y[1][0][::-1]
}

TEST(TensorValuesTest, MovementValues) {
  Tensor x = Tensor::Arange(6).Reshape({2, 3});
  EXPECT_EQ(Eval(x.Transpose()), Vals({0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(Eval(x.Pad({{1, 0}, {0, 1}}, -1)), Vals({-1, -1, -1, -1, 0, 1, 2, -1, 3, 4, 5, -1}));
  EXPECT_EQ(Eval(x.Pad({{0, 0}, {-1, 1}})), Vals({1, 2, 0, 4, 5, 0}));
  EXPECT_EQ(Eval(Tensor::Cat({x, x * 10}, 1)), Vals({0, 1, 2, 0, 10, 20, 3, 4, 5, 30, 40, 50}));
  EXPECT_EQ(Eval(Tensor::Stack({x.Slice({SliceArg::Index(0)}), x.Slice({SliceArg::Index(1)})}, 1)),
            Vals({0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(Eval(Tensor::Arange(2).Repeat({2, 2})), Vals({0, 1, 0, 1, 0, 1, 0, 1}));
  Tensor idx = Tensor::Arange(6).Mul(2).Mod(3).Reshape({2, 3});  // [[0,2,1],[0,2,1]]
  EXPECT_EQ(Eval(x.Gather(1, idx)), Vals({0, 2, 1, 3, 5, 4}));
  EXPECT_EQ(Eval(Tensor::Arange(3).OneHot(3).Cast(dtypes::kInt32)), Vals({1, 0, 0, 0, 1, 0, 0, 0, 1}));
}

TEST(TensorValuesTest, ElementwiseValues) {
  Tensor x = Data({11});
  Vals xs = Eval(x), want;
  auto map = [&](auto f) {
    Vals r;
    for (double v : xs) r.push_back(f(v));
    return r;
  };
  ExpectNear(Eval(x.Exp()), map([](double v) { return std::exp(v); }));
  ExpectNear(Eval(x.Abs().Add(1).Log()), map([](double v) { return std::log(std::fabs(v) + 1); }));
  ExpectNear(Eval(x.Cos()), map([](double v) { return std::cos(v); }), 1e-4);
  ExpectNear(Eval(x.Sigmoid()), map([](double v) { return 1 / (1 + std::exp(-v)); }));
  ExpectNear(Eval(x.Tanh()), map([](double v) { return std::tanh(v); }), 1e-4);
  ExpectNear(Eval(x.Relu()), map([](double v) { return v > 0 ? v : 0; }));
  ExpectNear(Eval(x.Sign()), map([](double v) { return v > 0 ? 1 : v < 0 ? -1 : 0; }));
  ExpectNear(Eval(x.Abs()), map([](double v) { return std::fabs(v); }));
  ExpectNear(Eval(x.Div(2.5).Floor()), map([](double v) { return std::floor(v / 2.5); }));
  ExpectNear(Eval(x.Div(2.5).Ceil()), map([](double v) { return std::ceil(v / 2.5); }));
  ExpectNear(Eval(x.Div(2).Round()), map([](double v) { return std::nearbyint(v / 2); }));
  ExpectNear(Eval(x.Mod(3)), map([](double v) { return v - 3 * std::floor(v / 3); }));
  ExpectNear(Eval(x.Clip(-2, 3)), map([](double v) { return std::min(std::max(v, -2.0), 3.0); }));
  ExpectNear(Eval(x.Minimum(1)), map([](double v) { return std::min(v, 1.0); }));
  ExpectNear(Eval(x.Pow(3)), map([](double v) { return v * v * v; }));
  ExpectNear(Eval(x.Pow(2.0)), map([](double v) { return v * v; }));
  ExpectNear(Eval(x.Pow(x)), map([](double v) { return std::pow(v, v); }), 1e-4);  // negative bases, 0**0
  ExpectNear(Eval(x.Abs().Pow(0.5)), map([](double v) { return std::sqrt(std::fabs(v)); }));
  ExpectNear(Eval(x.Pow(1.5)), map([](double v) { return std::pow(v, 1.5); }), 1e-4);  // nan for v < 0
  ExpectNear(Eval(x.RPow(2.0)), map([](double v) { return std::exp2(v); }), 1e-4);
  ExpectNear(Eval(x.Le(0)), map([](double v) { return v <= 0; }));
  ExpectNear(Eval(x.Ge(1)), map([](double v) { return v >= 1; }));
  ExpectNear(Eval(x.Gelu()), map([](double v) {
               return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
             }), 1e-4);
  // ints: Python floor division and modulo, min via bitwise not
  Tensor i = x.Cast(dtypes::kInt32);
  ExpectNear(Eval(i.FloorDiv(3)), map([](double v) { return std::floor(v / 3); }));
  ExpectNear(Eval(i % -3), map([](double v) { return v - (-3) * std::floor(v / -3); }));
  ExpectNear(Eval(i.Minimum(-1)), map([](double v) { return std::min(v, -1.0); }));
  ExpectNear(Eval(-i), map([](double v) { return -v; }));
  ExpectNear(Eval(i.Pow(2)), map([](double v) { return v * v; }));
  ExpectNear(Eval(Tensor::Arange(4).Cast(dtypes::kUInt8) - 1), {255, 0, 1, 2});
  ExpectNear(Eval(~Tensor::Arange(3)), {-1, -2, -3});
}

TEST(TensorValuesTest, ReductionValues) {
  Tensor x = Data({3, 4});
  Vals xs = Eval(x);
  Vals rows(3, 0), cols(4, 0), rmax(3, -1e9), cmin(4, 1e9);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) {
      double v = xs[r * 4 + c];
      rows[r] += v;
      cols[c] += v;
      rmax[r] = std::max(rmax[r], v);
      cmin[c] = std::min(cmin[c], v);
    }
  }
  ExpectNear(Eval(x.Sum(1)), rows);
  ExpectNear(Eval(x.Sum(0)), cols);
  ExpectNear(Eval(x.Max(1)), rmax);
  ExpectNear(Eval(x.Min(0)), cmin);
  double total = 0;
  for (double v : rows) total += v;
  ExpectNear(Eval(x.Mean()), {total / 12});
  double var = 0;
  for (double v : xs) var += (v - total / 12) * (v - total / 12);
  ExpectNear(Eval(x.Var()), {var / 11});
  ExpectNear(Eval(x.Std({}, false, 0)), {std::sqrt(var / 12)});
  ExpectNear(Eval(x.Cast(dtypes::kInt32).Min(0)), cmin);
  // argmax/argmin: first occurrence
  Tensor a = Tensor::Full({5}, 1.0).Pad({{0, 0}}).Add(Tensor::Arange(5).Mod(2));  // [1,2,1,2,1]
  EXPECT_EQ(Eval(a.Argmax()), Vals({1}));
  EXPECT_EQ(Eval(a.Argmin()), Vals({0}));
  Vals am = Eval(x.Argmax(1)), an = Eval(x.Argmin(0));
  for (int r = 0; r < 3; ++r) {
    int best = 0;
    for (int c = 1; c < 4; ++c) best = xs[r * 4 + c] > xs[r * 4 + best] ? c : best;
    EXPECT_EQ(am[r], best);
  }
  for (int c = 0; c < 4; ++c) {
    int best = 0;
    for (int r = 1; r < 3; ++r) best = xs[r * 4 + c] < xs[best * 4 + c] ? r : best;
    EXPECT_EQ(an[c], best);
  }
  Vals sm = Eval(x.Softmax());
  for (int r = 0; r < 3; ++r) EXPECT_NEAR(sm[r * 4] + sm[r * 4 + 1] + sm[r * 4 + 2] + sm[r * 4 + 3], 1.0, 1e-5);
  Vals ls = Eval(x.LogSoftmax()), smv = Eval(x.Softmax());
  for (size_t k = 0; k < ls.size(); ++k) EXPECT_NEAR(std::exp(ls[k]), smv[k], 1e-5);
}

TEST(TensorValuesTest, MatmulMatchesNaive) {
  Tensor a = Data({2, 3, 4}), b = Data({4, 5}).Mul(0.5);
  Vals av = Eval(a), bv = Eval(b), want;
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) {
        double s = 0;
        for (int k = 0; k < 4; ++k) s += av[n * 12 + i * 4 + k] * bv[k * 5 + j];
        want.push_back(s);
      }
  ExpectNear(Eval(a.Matmul(b)), want);
}

struct ConvValueCase {
  int64_t cin, h, w, cout, k, stride, pad, dil, groups;
};

TEST(TensorValuesTest, Conv2dMatchesNaive) {
  const ConvValueCase cases[] = {
      {2, 5, 5, 2, 3, 1, 0, 1, 1},
      {2, 6, 7, 4, 3, 2, 1, 1, 2},
      {3, 7, 7, 3, 2, 3, 1, 2, 3},
      {1, 6, 6, 2, 3, 1, 2, 2, 1},
      {4, 5, 4, 2, 1, 2, 0, 1, 2},
      // padding wider than the kernel: reduce windows that are empty at the borders
      {2, 4, 5, 2, 2, 1, 3, 1, 1},
      {1, 5, 5, 2, 3, 2, 4, 1, 1}};
  for (const ConvValueCase& c : cases) {
    int64_t cg = c.cin / c.groups, og = c.cout / c.groups;
    Tensor x = Data({1, c.cin, c.h, c.w}), w = Data({c.cout, cg, c.k, c.k}).Mul(0.25), bias = Tensor::Arange(c.cout);
    Tensor y = x.Conv2d(w, bias.Cast(dtypes::kFloat32), {{c.stride}, {c.pad}, {c.dil}, c.groups, std::nullopt});
    Vals xv = Eval(x), wv = Eval(w), want;
    int64_t oh = (c.h + 2 * c.pad - c.dil * (c.k - 1) - 1) / c.stride + 1;
    int64_t ow = (c.w + 2 * c.pad - c.dil * (c.k - 1) - 1) / c.stride + 1;
    ASSERT_EQ(Sh(y), V({1, c.cout, oh, ow}));
    for (int64_t o = 0; o < c.cout; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = static_cast<double>(o);
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ki = 0; ki < c.k; ++ki)
              for (int64_t kj = 0; kj < c.k; ++kj) {
                int64_t yy = i * c.stride - c.pad + ki * c.dil, xx = j * c.stride - c.pad + kj * c.dil;
                if (yy < 0 || yy >= c.h || xx < 0 || xx >= c.w) continue;
                int64_t in_c = (o / og) * cg + ci;
                s += xv[(in_c * c.h + yy) * c.w + xx] * wv[((o * cg + ci) * c.k + ki) * c.k + kj];
              }
          want.push_back(s);
        }
    ExpectNear(Eval(y), want);
  }
}

TEST(TensorValuesTest, PoolsMatchNaive) {
  Tensor x = Data({1, 1, 5, 5});
  Vals xv = Eval(x), mx, av;
  // 3x3, stride 2, padding 1
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double m = -INFINITY, s = 0;
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) {
          int yy = 2 * i - 1 + a, xx = 2 * j - 1 + b;
          if (yy < 0 || yy >= 5 || xx < 0 || xx >= 5) continue;
          m = std::max(m, xv[yy * 5 + xx]);
          s += xv[yy * 5 + xx];
        }
      mx.push_back(m);
      av.push_back(s / 9);
    }
  ExpectNear(Eval(x.MaxPool2d({3, 3}, {{2}, {1}, {1}, true})), mx);
  ExpectNear(Eval(x.AvgPool2d({3, 3}, {{2}, {1}, {1}, true})), av);
}

uint32_t Fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  return h ^ (h >> 16);
}

TEST(TensorValuesTest, RandomValues) {
  Tensor::ManualSeed(7);
  Vals u = Eval(Tensor::Rand({4000}));
  double mean = 0;
  for (double v : u) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    mean += v / u.size();
  }
  EXPECT_NEAR(mean, 0.5, 0.03);
  // the documented generator: bits(i) = fmix32(fmix32(i ^ k0) + k1), value = (bits >> 8) / 2^24
  Tensor::ManualSeed(7);
  uint32_t c = 0, seed = 7;
  uint32_t k0 = Fmix32(seed ^ Fmix32(c + 0x9e3779b9u)), k1 = Fmix32(0u ^ Fmix32(0u + k0));
  for (uint32_t i = 0; i < 16; ++i) {
    uint32_t bits = Fmix32(Fmix32(i ^ k0) + k1);
    EXPECT_EQ(u[i], static_cast<double>(bits >> 8) / 16777216.0) << i;
  }
  Vals n = Eval(Tensor::Randn({4000}));
  double m = 0, s = 0;
  for (double v : n) m += v / n.size();
  for (double v : n) s += (v - m) * (v - m) / n.size();
  EXPECT_NEAR(m, 0.0, 0.08);
  EXPECT_NEAR(std::sqrt(s), 1.0, 0.08);
  Vals h = Eval(Tensor::Rand({256}, dtypes::kFloat16));
  for (double v : h) ASSERT_LT(v, 1.0);
}

}  // namespace
}  // namespace kiln
