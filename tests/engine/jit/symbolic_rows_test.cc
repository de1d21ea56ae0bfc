// A symbolic batch dim (Tensor::Rows): a graph over a tensor whose row count is a bound Variable computes only those
// rows, with kernels that take the count at run time, so one TinyJit capture serves every count in the Variable's
// range. The reference for each count is the same graph without the bound, realized the ordinary way (every row),
// whose first rows must be bit-equal: the kernels differ only in their row loop's bound.
// On the CPU backend, or on $KILN_TEST_DEVICE (INTERP, CL; CMakeLists.txt also runs it with JIT=2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/base/status.h"
#include "engine/jit/tiny_jit.h"
#include "tests/engine/jit/jit_test_fixture.h"
#include "engine/runtime/registry.h"
#include "engine/symbolic/variable.h"

namespace kiln::jit {
namespace {

constexpr int64_t kMaxRows = 8;

class SymbolicRowsTest : public DeviceTest {
 protected:
  SymbolicRowsTest() : DeviceTest(77) {}
  static UOpPtr Rows(int64_t n) {
    absl::StatusOr<UOpPtr> b = Bind(UOp::Variable("rows", 1, kMaxRows), n);
    EXPECT_TRUE(b.ok()) << b.status();
    return *b;
  }
};

// A small CNN head: conv, relu, 2x2 max pool, flatten, linear, softmax (every kind of op a served model has).
struct Net {
  Tensor w1, b1, w2, b2;
  Tensor operator()(const Tensor& x) const {
    Tensor h = x.Conv2d(w1, b1, {.padding = {1}}).Relu().MaxPool2d({2, 2});
    return h.Flatten(1).Matmul(w2).Add(b2).Softmax(1);
  }
};

TEST_F(SymbolicRowsTest, RealizeComputesTheFirstRowsExactly) {
  Net net{RandT({4, 3, 3, 3}), RandT({4}), RandT({4 * 3 * 3, 5}), RandT({5})};
  Tensor x = RandT({kMaxRows, 3, 6, 6});
  const std::vector<float> full = Vals(net(x));
  ASSERT_EQ(full.size(), static_cast<size_t>(kMaxRows * 5));
  for (int64_t n : {1, 3, 8}) {
    const std::vector<float> got = Vals(net(x.Rows(Rows(n))));
    ASSERT_EQ(got.size(), full.size());
    for (int64_t i = 0; i < n * 5; ++i) EXPECT_EQ(got[i], full[i]) << "n=" << n << " i=" << i;
  }
}

TEST_F(SymbolicRowsTest, OneCaptureServesEveryRowCount) {
  Net net{RandT({4, 3, 3, 3}), RandT({4}), RandT({4 * 3 * 3, 5}), RandT({5})};
  int calls = 0;
  TinyJit jit([&](const JitArgs& a) -> absl::StatusOr<std::vector<Tensor>> {
    ++calls;
    KILN_ASSIGN_OR_RETURN(UOpPtr rows, Bind(UOp::Variable("rows", 1, kMaxRows), a.vars.at("rows")));
    return std::vector<Tensor>{net(a.positional[0].Rows(rows))};
  });
  std::vector<float> prev;
  // Counts in an order that grows and shrinks: each replay must use its own count, not the capture's.
  for (int64_t n : {3, 5, 8, 1, 6, 2, 8, 7, 4}) {
    Tensor x = RandT({kMaxRows, 3, 6, 6});
    const std::vector<float> want = Vals(net(x));
    absl::StatusOr<std::vector<Tensor>> out = jit.Call(JitArgs{{x}, {}, {{"rows", n}}});
    ASSERT_TRUE(out.ok()) << out.status();
    const std::vector<float> got = Vals((*out)[0]);
    ASSERT_EQ(got.size(), want.size());
    for (int64_t i = 0; i < n * 5; ++i) EXPECT_EQ(got[i], want[i]) << "n=" << n << " i=" << i;
    // From the capture on, the output buffer is the plan's: rows past n keep what an earlier run left there, which
    // shows the kernels stopped at row n.
    if (jit.cnt() > 2 && !prev.empty())
      for (size_t i = static_cast<size_t>(n * 5); i < got.size(); ++i) EXPECT_EQ(got[i], prev[i]) << "n=" << n;
    prev = got;
  }
  EXPECT_EQ(calls, 2);  // the plain first call and the capture; every other count replayed
  ASSERT_TRUE(jit.captured());
  ASSERT_EQ(jit.plan()->variables().size(), 1u);
  EXPECT_EQ(jit.plan()->variables()[0].name, "rows");
  EXPECT_EQ(jit.plan()->VariableValues()[0], 4);

  // A count outside the Variable's range, or none, is refused and the next call works.
  Tensor x = RandT({kMaxRows, 3, 6, 6});
  absl::StatusOr<std::vector<Tensor>> bad = jit.Call(JitArgs{{x}, {}, {{"rows", kMaxRows + 1}}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("outside [1, 8]"), std::string::npos) << bad.status();
  bad = jit.Call(JitArgs{{x}, {}, {}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("no value for Variable rows"), std::string::npos) << bad.status();
  absl::StatusOr<std::vector<Tensor>> ok = jit.Call(JitArgs{{x}, {}, {{"rows", 2}}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  const std::vector<float> want = Vals(net(x));
  const std::vector<float> got = Vals((*ok)[0]);
  for (int64_t i = 0; i < 2 * 5; ++i) EXPECT_EQ(got[i], want[i]) << i;
}

TEST_F(SymbolicRowsTest, RowPreservingViewsAndReducesAreAllowed) {
  Tensor x = RandT({kMaxRows, 4, 6});
  Tensor w = RandT({8, 3});
  Tensor c = RandT({kMaxRows, 8});  // unbounded, of the full shape: its first rows are read
  Tensor v = RandT({1, 8});         // broadcast over the rows
  // Inner dims permuted, padded, shrunk, flipped and reshaped with dim 0 kept; reduces over inner axes; a matmul.
  auto f = [&](const Tensor& t) {
    Tensor a = t.Permute({0, 2, 1}).Pad({{0, 0}, {1, 1}, {0, 0}}).Flip({1}).Reshape({kMaxRows, 32});
    Tensor s = a.Sum(1, /*keepdim=*/true);
    Tensor m = (a - s).Reshape({kMaxRows, 8, 4}).Max(2);
    return ((m + c) * v).Shrink({{0, kMaxRows}, {1, 7}}).Pad({{0, 0}, {1, 1}}).Matmul(w).Exp();
  };
  const std::vector<float> full = Vals(f(x));
  for (int64_t n : {1, 5, 8}) {
    const std::vector<float> got = Vals(f(x.Rows(Rows(n))));
    ASSERT_EQ(got.size(), full.size());
    for (int64_t i = 0; i < n * 3; ++i) EXPECT_EQ(got[i], full[i]) << "n=" << n << " i=" << i;
  }
}

// Random row-preserving graphs: chains of elementwise ops, inner reduces (kept and reshaped away), inner permutes,
// pads, shrinks, flips, reshapes that keep dim 0, broadcasts of unbounded tensors and matmuls, realized with and
// without the bound. The bounded result's first n rows must be bit-equal to the full one's on the CPU and INTERP
// (only the row loop's bound differs); on devices with work-groups (CL) within 1e-5: their opts size work-groups and
// split reduces from the launch dims, which the symbolic row axis (a loop, not a launch dim) changes.
TEST_F(SymbolicRowsTest, RandomRowPreservingGraphsMatchTheFullComputation) {
  std::mt19937 pick(2026);
  auto coin = [&](int n) { return static_cast<int>(pick() % static_cast<uint32_t>(n)); };
  int checked = 0;
  const bool exact = TestDevice() == "CPU" || TestDevice() == "INTERP";
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t cols = 2 + coin(5), inner = 2 + coin(4);
    Tensor x = RandT({kMaxRows, cols, inner});
    // Unbounded operands by shape, made on first use, so both runs of f read the same ones: of the full shape (their
    // first rows are read) or of one row (broadcast over the rows).
    std::map<std::vector<int64_t>, Tensor> consts;
    auto operand = [&](const Shape& d, bool one_row) {
      std::vector<int64_t> shape(d.begin(), d.end());
      if (one_row) shape[0] = 1;
      auto it = consts.find(shape);
      if (it == consts.end()) it = consts.emplace(shape, RandT(shape)).first;
      return one_row ? it->second.Expand(d) : it->second;
    };
    std::vector<int> steps;
    for (int k = 0; k < 6; ++k) steps.push_back(coin(9));
    auto f = [&](const Tensor& t) {
      Tensor h = t;
      int c = 0;
      for (int step : steps) {
        const Shape s = h.shape();
        if (s.size() != 3) h = h.Reshape({kMaxRows, s[1], -1});
        const Shape& d = h.shape();
        switch (step) {
          case 0: h = (h * operand(d, (c++ % 2) == 0)).Exp(); break;
          case 1: h = h.Sum(2, /*keepdim=*/true) + h; break;
          case 2: h = h.Max(1, /*keepdim=*/true).Expand(d) - h.Relu(); break;
          case 3: h = h.Permute({0, 2, 1}); break;
          case 4: h = h.Pad({{0, 0}, {1, 0}, {0, 2}}).Flip({2}); break;
          case 5: h = d[2] > 1 ? h.Shrink({{0, d[0]}, {0, d[1]}, {1, d[2]}}) : h.Sqrt(); break;
          case 6: h = h.Reshape({kMaxRows, d[1] * d[2], 1}); break;
          case 7: h = h.Matmul(Tensor::Ones({d[2], 3}, dtypes::kFloat32, TestDevice()) * 0.5f); break;
          default: h = h.Softmax(1); break;
        }
      }
      return h.Sum(2);
    };
    const Tensor full_t = f(x);
    ASSERT_TRUE(full_t.ok()) << full_t.status();
    const std::vector<float> full = Vals(full_t);
    const int64_t n = 1 + coin(kMaxRows);
    const std::vector<float> got = Vals(f(x.Rows(Rows(n))));
    ASSERT_EQ(got.size(), full.size()) << "trial " << trial;
    const size_t row = full.size() / kMaxRows;
    for (size_t i = 0; i < static_cast<size_t>(n) * row; ++i) {
      if (std::isnan(full[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << "trial " << trial << " n=" << n << " i=" << i;
      } else if (exact) {
        ASSERT_EQ(got[i], full[i]) << "trial " << trial << " n=" << n << " i=" << i;
      } else {
        ASSERT_NEAR(got[i], full[i], 1e-5 * std::max(1.0f, std::fabs(full[i]))) << "trial " << trial << " i=" << i;
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 40);
}

// Graphs whose first rows would read the unspecified ones are refused at realize, naming the op.
TEST_F(SymbolicRowsTest, RowMixingGraphsAreRefused) {
  Tensor x = RandT({kMaxRows, 6});
  Tensor b = x.Rows(Rows(3));
  struct Case {
    const char* what;
    Tensor t;
  };
  const Case cases[] = {
      {"sum over the rows", b.Sum(0)},
      {"max over everything", b.Max()},
      {"transpose", b.Transpose().Contiguous()},
      {"flip of dim 0", b.Flip({0})},
      {"pad of dim 0", b.Pad({{1, 0}, {0, 0}})},
      {"shrink of dim 0", b.Shrink({{1, kMaxRows}, {0, 6}}).Contiguous()},
      {"reshape into another dim 0", b.Reshape({kMaxRows * 2, 3}).Contiguous()},
      {"rows broadcast into an inner dim", b.Reshape({1, kMaxRows, 6}).Expand({2, kMaxRows, 6}).Contiguous()},
      {"two row counts", b + x.Rows(Rows(4))},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(c.t.ok()) << c.what << ": " << c.t.status();
    absl::StatusOr<std::vector<float>> v = c.t.ToVector<float>();
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_TRUE(v.status().message().find("Tensor::Rows") != std::string::npos) << c.what << ": " << v.status();
  }
  // A bound whose Variable does not range over [1, dim 0] is an error tensor.
  absl::StatusOr<UOpPtr> wrong = Bind(UOp::Variable("rows", 1, kMaxRows - 1), 2);
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(x.Rows(*wrong).status().code(), absl::StatusCode::kInvalidArgument);
  // The same tensor without the bound still computes.
  EXPECT_TRUE(x.Sum(0).ToVector<float>().ok());
}

}  // namespace
}  // namespace kiln::jit
