// The scheduler's kernels compute what the tensor graph means: every schedule is executed by a test-only kernel-AST
// interpreter and compared with a reference evaluation of the graph (tests/engine/schedule/ast_eval.h).
#include <random>

#include <gtest/gtest.h>

#include "engine/schedule/schedule.h"
#include "tests/engine/schedule/ast_eval.h"
#include "tests/engine/schedule/graph_builder.h"

namespace kiln {
namespace {

using namespace kiln::testing;  // NOLINT(build/namespaces)

class Semantics : public ::testing::Test {
 protected:
  UOpPtr In(const Shape& shape) {
    UOpPtr x = Input(shape);
    const UOp* b = BufferOf(x.get());
    std::vector<double>& v = bufs_[b];
    v.resize(b->ArgInt());
    std::uniform_real_distribution<double> dist(-2.0, 2.0);
    for (double& d : v) d = static_cast<float>(dist(rng_));
    keep_.push_back(x);
    return x;
  }

  // Schedules `roots`, runs the kernels, compares each output element with the reference.
  void Check(std::vector<UOpPtr> roots, int expected_kernels = -1) {
    auto s = CreateSchedule(roots);
    ASSERT_TRUE(s.ok()) << s.status();
    if (expected_kernels >= 0) { EXPECT_EQ(static_cast<int>(s->items.size()), expected_kernels); }
    RunSchedule(*s, bufs_);
    ASSERT_EQ(s->outputs.size(), roots.size());
    for (size_t r = 0; r < roots.size(); ++r) {
      const UOp* b = BufferOf(s->outputs[r].get());
      ASSERT_NE(b, nullptr);
      const std::vector<double>& got = bufs_[b];
      const Shape& shape = roots[r]->shape();
      int64_t n = roots[r]->Numel();
      for (int64_t flat = 0; flat < n; ++flat) {
        std::vector<int64_t> idx(shape.size());
        int64_t f = flat;
        for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
          idx[i] = f % shape[i];
          f /= shape[i];
        }
        double want = RefEval(roots[r].get(), idx, bufs_);
        ASSERT_NEAR(got[flat], want, 1e-9 + 1e-9 * std::abs(want)) << "root " << r << " element " << flat;
      }
    }
  }

  std::mt19937 rng_{1234};
  HostBuffers bufs_;
  std::vector<UOpPtr> keep_;
};

TEST_F(Semantics, Elementwise) {
  UOpPtr a = In({10}), b = In({10}), c = In({10});
  Check({Add(Mul(a, b), c)}, 1);
}

TEST_F(Semantics, ReshapePermute) {
  UOpPtr a = In({12}), b = In({3, 4}), c = In({4, 3});
  Check({Add(Permute(Add(Reshape(a, {3, 4}), b), {1, 0}), c)}, 1);
  Check({Add(Reshape(Permute(b, {1, 0}), {2, 6}), Reshape(c, {2, 6}))}, 1);
}

TEST_F(Semantics, ExpandPadShrinkFlip) {
  UOpPtr a = In({4, 4}), b = In({6, 6}), c = In({1, 4});
  Check({Add(Pad(Flip(a, {1, 0}), {1, 1, 2, 0}), b)}, 1);
  Check({Add(Shrink(b, {1, 5, 0, 4}), Expand(c, {4, 4}))}, 1);
  Check({Pad(Add(a, a), {0, 2, 1, 1})}, 1);
}

TEST_F(Semantics, Reductions) {
  UOpPtr a = In({6, 5}), b = In({5});
  Check({Add(Sum(a, {0}), b)}, 1);
  Check({MaxR(a, {1})}, 1);
  Check({SumAll(Mul(a, a))}, 1);
  Check({Sub(a, Mean(a, {0}, true))}, 2);
  Check({Sum(Sub(a, MaxR(a, {-1}, true)), {-1})}, 2);
  Check({Std(a, -1)}, 2);
}

TEST_F(Semantics, LayerNorm) {
  UOpPtr x = In({3, 4, 5}), w = In({4, 5}), b = In({4, 5});
  Check({LayerNorm(x, {1, 2}, w, b)}, 3);
}

TEST_F(Semantics, MatmulAndConv) {
  UOpPtr a = In({4, 6}), b = In({6, 3});
  Check({Matmul(a, b)}, 1);
  UOpPtr x = In({2, 3, 6, 7}), w = In({4, 3, 3, 2}), bias = In({4});
  Check({Relu(Conv2d(x, w, bias))}, 1);
}

TEST_F(Semantics, SeveralOutputsAndIntermediates) {
  UOpPtr a = In({8}), b = In({8});
  UOpPtr out0 = AddC(SumAll(a), 2), out1 = AddC(SumAll(a), 4);
  Check({out0, out1, Mul(out0, out1)});
  UOpPtr c = Contiguous(Add(a, b));
  Check({AddC(c, 1), MulC(c, 3), Add(Sum(Reshape(c, {2, 4}), {1}), Sum(Reshape(b, {2, 4}), {1}))});
}

TEST_F(Semantics, SiblingReducesInOneKernel) {
  // Three sums over one loop nest in one kernel (the scheduler merges them: they share g and x).
  UOpPtr x = In({4, 6, 10}), g = In({4, 6, 10});
  Check({Sum(g, {0, 2}), Sum(Mul(g, x), {0, 2}), MaxR(Add(x, g), {0, 2})}, 1);
}

// A residual block whose output h = relu(conv(x) + bias + x) is made contiguous for the next conv and also read by
// the next residual add (ResNet-50's layout): h is stored once, in the conv's own kernel, and both readers load it.
// With only the CONTIGUOUS stored, the add recomputed h from a stored raw conv: 3 kernels.
TEST_F(Semantics, ResidualBlockStoresItsOutputWithTheConv) {
  UOpPtr x = In({1, 32, 5, 5}), w1 = In({32, 32, 1, 1}), b1 = In({32}), w2 = In({32, 32, 1, 1}), b2 = In({32});
  UOpPtr h = Relu(Add(Conv2d(x, w1, b1), x));
  Check({Add(Conv2d(Contiguous(h), w2, b2), h)}, 2);
}

// The same block with a conv on the shortcut (over another input, as ResNet's downsampling conv reads a strided
// copy): the two convs are two loop nests, so one of them is stored and the other runs with the epilogue; h is again
// stored once (4 kernels before: both convs raw, h, the next block).
TEST_F(Semantics, ResidualBlockWithAShortcutConvStoresOneConv) {
  UOpPtr x = In({1, 32, 5, 5}), w1 = In({32, 32, 1, 1}), b1 = In({32}), s = In({1, 24, 5, 5}),
         wd = In({32, 24, 1, 1}), bd = In({32}), w2 = In({32, 32, 1, 1}), b2 = In({32});
  UOpPtr h = Relu(Add(Conv2d(x, w1, b1), Conv2d(s, wd, bd)));
  Check({Add(Conv2d(Contiguous(h), w2, b2), h)}, 3);
}

// A conv read only by the next conv is stored with its bias and activation (the epilogue), not as raw sums that the
// next conv's loads would add the bias to and clamp per multiply-add.
TEST_F(Semantics, ConvFeedingAConvStoresItsEpilogue) {
  UOpPtr x = In({1, 32, 5, 5}), w1 = In({32, 32, 1, 1}), b1 = In({32}), w2 = In({16, 32, 1, 1}), b2 = In({16});
  UOpPtr y = Relu(Conv2d(x, w1, b1));
  auto s = CreateSchedule({Conv2d(y, w2, b2)});
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->items.size(), 2u);
  // The second kernel reads the first conv's output and nothing to redo its epilogue with: b1 is not among its
  // buffers, and the first kernel reads it.
  auto reads_b1 = [&](const ScheduleItem& it) {
    for (const UOpPtr& b : it.buffers)
      if (b.get() == BufferOf(b1.get())) return true;
    return false;
  };
  EXPECT_TRUE(reads_b1(s->items[0]));
  EXPECT_FALSE(reads_b1(s->items[1]));
  Check({Conv2d(y, w2, b2)}, 2);
}

TEST_F(Semantics, ReduceAtTwoIndices) {
  UOpPtr a = In({8, 8});
  UOpPtr s = Sum(a, {0});
  Check({Add(s, Flip(s, {1}))}, 2);
}

TEST_F(Semantics, MemoryPlanReusesBuffers) {
  // A chain of realized intermediates: each one's buffer can be reused two steps later.
  UOpPtr x = In({16});
  UOpPtr y = x;
  for (int i = 0; i < 6; ++i) y = Contiguous(AddC(y, 1));
  auto s = CreateSchedule({y});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->items.size(), 6u);
  EXPECT_LT(s->planned_bytes, s->intermediate_bytes);
  Check({y});
}

TEST_F(Semantics, Assign) {
  UOpPtr t = In({4, 4}), v = In({4, 4});
  UOpPtr as = UOp::Make(Op::ASSIGN, t->dtype(), {t, Add(t, v)});
  std::vector<double> before = bufs_[BufferOf(t.get())];
  auto s = CreateSchedule({as});
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->items.size(), 1u);
  RunSchedule(*s, bufs_);
  const std::vector<double>& after = bufs_[BufferOf(t.get())];
  const std::vector<double>& vv = bufs_[BufferOf(v.get())];
  for (int i = 0; i < 16; ++i) EXPECT_DOUBLE_EQ(after[i], before[i] + vv[i]);
}

TEST_F(Semantics, AssignWithHazardRealizesValue) {
  UOpPtr t = In({4, 4});
  UOpPtr as = UOp::Make(Op::ASSIGN, t->dtype(), {t, Permute(t, {1, 0})});
  std::vector<double> before = bufs_[BufferOf(t.get())];
  auto s = CreateSchedule({as});
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->items.size(), 2u);
  RunSchedule(*s, bufs_);
  const std::vector<double>& after = bufs_[BufferOf(t.get())];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_DOUBLE_EQ(after[i * 4 + j], before[j * 4 + i]);
}

TEST_F(Semantics, ReadersRunBeforeAssign) {
  UOpPtr t = In({8});
  UOpPtr old_plus = AddC(t, 1);
  UOpPtr as = UOp::Make(Op::ASSIGN, t->dtype(), {t, MulC(t, 2)});
  std::vector<double> before = bufs_[BufferOf(t.get())];
  auto s = CreateSchedule({as, old_plus});
  ASSERT_TRUE(s.ok()) << s.status();
  RunSchedule(*s, bufs_);
  const std::vector<double>& got = bufs_[BufferOf(s->outputs[1].get())];
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(got[i], before[i] + 1);
}

TEST_F(Semantics, DoubleContiguousRootKeepsItsBuffer) {
  UOpPtr a = In({8});
  UOpPtr c = Contiguous(AddC(a, 1));
  UOpPtr cc = Contiguous(c);
  // c is read by a later kernel; its buffer must not be reused for another intermediate while it is a result.
  UOpPtr d = Contiguous(MulC(c, 2));
  Check({cc, AddC(Contiguous(AddC(d, 1)), 1)});
}

TEST_F(Semantics, KernelAstShape) {
  UOpPtr a = In({4, 8});
  auto s = CreateSchedule({Sum(a, {1})});
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->items.size(), 1u);
  const UOpPtr& ast = s->items[0].ast;
  EXPECT_EQ(ast->op(), Op::SINK);
  EXPECT_EQ(ast->ArgStr(), "r_4_8");
  ASSERT_EQ(ast->src(0)->op(), Op::END);
  EXPECT_EQ(ast->src(0)->src(0)->op(), Op::STORE);
  // Range ids from 0 in order of first appearance.
  std::vector<int64_t> ids;
  for (const UOp* u : Toposort(ast))
    if (u->op() == Op::RANGE) ids.push_back(std::get<AxisArg>(u->arg()).id);
  EXPECT_EQ(ids, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(s->items[0].num_outputs, 1);
  EXPECT_EQ(s->items[0].buffers.size(), 2u);
}

TEST_F(Semantics, IdenticalKernelsHaveIdenticalAsts) {
  UOpPtr a = In({4, 8}), b = In({4, 8});
  auto s1 = CreateSchedule({AddC(a, 1)});
  auto s2 = CreateSchedule({AddC(b, 1)});
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(s1->items[0].ast, s2->items[0].ast);
}

}  // namespace
}  // namespace kiln
