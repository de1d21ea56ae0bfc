// Realize end to end (schedule -> codegen -> render -> compile -> run) on every available executing backend, checked
// against a reference evaluation of the tensor graph; memoization; kernel counts on NULL; errors as Status.
#include "engine/realize/realize.h"

#include <random>

#include <gtest/gtest.h>

#include "backends/register_all.h"
#include "engine/base/env.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/registry.h"
#include "tests/engine/schedule/ast_eval.h"
#include "tests/engine/schedule/graph_builder.h"

namespace kiln {
namespace {

using namespace kiln::testing;  // NOLINT(build/namespaces)

class RealizeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    auto dev = runtime::GetDevice(GetParam());
    if (!dev.ok()) GTEST_SKIP() << GetParam() << " backend not available: " << dev.status();
  }

  // A realized float input with random values, also recorded for the reference evaluator.
  UOpPtr In(const Shape& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(n);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    for (float& f : v) f = dist(rng_);
    auto u = FromHost(v.data(), dtypes::kFloat32, shape, GetParam());
    EXPECT_TRUE(u.ok()) << u.status();
    const UOp* b = BufferOf(u->get());
    ref_[b] = std::vector<double>(v.begin(), v.end());
    keep_.push_back(*u);
    return *u;
  }

  std::vector<float> Read(const UOpPtr& realized) {
    std::vector<float> out(realized->Numel());
    absl::Status st = ToHost(realized, out.data(), out.size() * sizeof(float));
    EXPECT_TRUE(st.ok()) << st;
    return out;
  }

  // Realizes `root`, checks the kernel count (if >= 0) and every element against the reference.
  void Check(const UOpPtr& root, int kernels = -1, double tol = 1e-4) {
    auto r = Realize({root});
    ASSERT_TRUE(r.ok()) << r.status();
    if (kernels >= 0) { EXPECT_EQ(LastRealizeStats().kernels, kernels); }
    std::vector<float> got = Read((*r)[0]);
    const Shape& shape = root->shape();
    for (int64_t flat = 0; flat < root->Numel(); ++flat) {
      std::vector<int64_t> idx(shape.size());
      int64_t f = flat;
      for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
        idx[i] = f % shape[i];
        f /= shape[i];
      }
      double want = RefEval(root.get(), idx, ref_);
      ASSERT_NEAR(got[flat], want, tol * (1 + std::abs(want))) << "element " << flat;
    }
  }

  std::mt19937 rng_{42};
  HostBuffers ref_;
  std::vector<UOpPtr> keep_;
};

TEST_P(RealizeTest, HostRoundTrip) {
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  auto u = FromHost(v.data(), dtypes::kFloat32, {2, 3}, GetParam());
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ((*u)->shape(), (Shape{2, 3}));
  EXPECT_EQ(Read(*u), v);
  auto r = Realize({*u});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0], *u);
  EXPECT_EQ(LastRealizeStats().kernels, 0);
  std::vector<float> small(2);
  EXPECT_EQ(ToHost(*u, small.data(), 8).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(RealizeTest, Elementwise) {
  UOpPtr a = In({4, 5}), b = In({4, 5}), c = In({4, 5});
  Check(Add(Mul(a, b), c), 1);
  Check(Relu(Sub(a, Permute(Reshape(b, {5, 4}), {1, 0}))), 1);
}

TEST_P(RealizeTest, Reductions) {
  UOpPtr a = In({16, 33});
  Check(Sum(a, {1}), 1);
  Check(MaxR(a, {0}), 1);
  Check(SumAll(a), 1);
  Check(Sub(a, Mean(a, {0}, true)), 2);
  Check(Std(a, -1), 2);
}

TEST_P(RealizeTest, MatmulConvLayerNorm) {
  UOpPtr a = In({8, 12}), b = In({12, 5});
  Check(Matmul(a, b), 1);
  UOpPtr x = In({2, 3, 8, 9}), w = In({4, 3, 3, 3}), bias = In({4});
  Check(Relu(Conv2d(x, w, bias)), 1);
  UOpPtr y = In({3, 4, 5}), lw = In({4, 5}), lb = In({4, 5});
  Check(LayerNorm(y, {1, 2}, lw, lb), 3);
}

TEST_P(RealizeTest, PadFlipShrink) {
  UOpPtr a = In({5, 6}), b = In({7, 8});
  Check(Add(Pad(Flip(a, {1, 1}), {1, 1, 0, 2}), b), 1);
  Check(Shrink(Mul(b, b), {2, 5, 1, 7}), 1);
}

TEST_P(RealizeTest, SameExpressionTwiceIsFree) {
  UOpPtr a = In({10}), b = In({10});
  UOpPtr e = Add(a, b);
  auto r1 = Realize({e});
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(LastRealizeStats().kernels, 1);
  auto r2 = Realize({Add(a, b)});
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(LastRealizeStats().kernels, 0);
  EXPECT_EQ((*r2)[0], (*r1)[0]);
}

TEST_P(RealizeTest, MemoDoesNotKeepDeadResults) {
  UOpPtr a = In({10});
  size_t before = runtime::BufferTable::Global().size();
  {
    auto r = Realize({AddC(a, 7)});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(runtime::BufferTable::Global().size(), before + 1);
  }
  // The result died with its last reference; its memory is gone and realizing again computes it again.
  EXPECT_EQ(runtime::BufferTable::Global().size(), before);
  auto r = Realize({AddC(a, 7)});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(LastRealizeStats().kernels, 1);
}

TEST_P(RealizeTest, IntermediatesAreFreed) {
  UOpPtr x = In({64});
  size_t before = runtime::BufferTable::Global().size();
  UOpPtr y = x;
  for (int i = 0; i < 5; ++i) y = Contiguous(MulC(y, 2));
  auto r = Realize({y});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(LastRealizeStats().kernels, 5);
  EXPECT_EQ(runtime::BufferTable::Global().size(), before + 1);  // only the result stays
  std::vector<float> got = Read((*r)[0]);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(got[i], ref_[BufferOf(x.get())][i] * 32, 1e-4);
}

TEST_P(RealizeTest, AssignWritesTargetAndInvalidatesMemo) {
  UOpPtr t = In({8}), v = In({8});
  UOpPtr plus = AddC(t, 1);
  auto r1 = Realize({plus});
  ASSERT_TRUE(r1.ok());
  std::vector<float> old = Read((*r1)[0]);
  auto r2 = Realize({UOp::Make(Op::ASSIGN, t->dtype(), {t, Add(t, v)})});
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ((*r2)[0], t);
  auto r3 = Realize({AddC(t, 1)});
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(LastRealizeStats().kernels, 1);  // recomputed: t changed
  std::vector<float> now = Read((*r3)[0]);
  const std::vector<double>& vv = ref_[BufferOf(v.get())];
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(now[i], old[i] + vv[i], 1e-5);
}

TEST_P(RealizeTest, DebugOutputDoesNotBreak) {
  UOpPtr a = In({4, 4});
  Context ctx({{Knob::kDebug, 4}});
  Check(Sub(a, MaxR(a, {1}, true)), 2);
}

INSTANTIATE_TEST_SUITE_P(Backends, RealizeTest, ::testing::Values("CPU", "INTERP"));

TEST(RealizeErrors, UnknownDevice) {
  backends::RegisterAllBackends();
  float x = 1;
  auto u = FromHost(&x, dtypes::kFloat32, {1}, "NOSUCHDEVICE");
  EXPECT_FALSE(u.ok());
  EXPECT_EQ(Realize({UOpPtr()}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RealizeErrors, ToHostOfUnrealized) {
  UOpPtr b = NewBuffer(dtypes::kFloat32, 4, "CPU");
  float out[4];
  EXPECT_EQ(ToHost(AddC(b, 1), out, sizeof out).code(), absl::StatusCode::kFailedPrecondition);
}

// Kernel counts through Realize on the NULL device (compiles, never runs).
TEST(RealizeNull, KernelCounts) {
  backends::RegisterAllBackends();
  if (!runtime::GetDevice("NULL").ok()) GTEST_SKIP() << "NULL backend not available";
  UOpPtr x = Input({4, 10, 10}, dtypes::kFloat32, "NULL"), w = Input({10, 10}, dtypes::kFloat32, "NULL"),
         b = Input({10, 10}, dtypes::kFloat32, "NULL");
  auto r = Realize({LayerNorm(x, {1, 2}, w, b)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(LastRealizeStats().kernels, 3);
  r = Realize({LayerNorm(x, {1, 2}, w, b)});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(LastRealizeStats().kernels, 0);
}

}  // namespace
}  // namespace kiln
