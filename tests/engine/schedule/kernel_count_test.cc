// Kernel counts of the scheduler (reference/tinygrad.md §10.4), on tensor graphs built with UOp factories.
// Nothing runs: CreateSchedule only.
#include <pthread.h>

#include <gtest/gtest.h>

#include "engine/rewrite/rewrite_stats.h"
#include "engine/schedule/schedule.h"
#include "tests/engine/schedule/graph_builder.h"

namespace kiln {
namespace {

using namespace kiln::testing;  // NOLINT(build/namespaces)

int Kernels(std::vector<UOpPtr> roots) {
  auto s = CreateSchedule(roots);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return -1;
  int n = 0;
  for (const ScheduleItem& it : s->items) n += it.kind == ScheduleItem::Kind::kKernel;
  return n;
}
int Kernels(const UOpPtr& root) { return Kernels(std::vector<UOpPtr>{root}); }

TEST(KernelCount, AddChain) {
  UOpPtr a = Input({10}), b = Input({10}), c = Input({10}), d = Input({10});
  EXPECT_EQ(Kernels(Add(Add(a, b), c)), 1);
  EXPECT_EQ(Kernels(Add(Add(Add(a, b), c), d)), 1);
}

TEST(KernelCount, MulSum) {
  UOpPtr a = Input({10}), b = Input({10});
  EXPECT_EQ(Kernels(SumAll(Mul(a, b))), 1);
  EXPECT_EQ(Kernels(Relu(SumAll(Mul(a, b)))), 1);
}

TEST(KernelCount, ReshapeAndPermuteFuse) {
  UOpPtr a = Input({10}), b = Input({10}), c = Input({5, 2});
  EXPECT_EQ(Kernels(Add(Reshape(Add(a, b), {5, 2}), c)), 1);
  UOpPtr x = Input({4, 5}), y = Input({4, 5}), z = Input({5, 4});
  EXPECT_EQ(Kernels(Add(Permute(Add(x, y), {1, 0}), z)), 1);
}

TEST(KernelCount, ReduceThenElementwise) {
  UOpPtr a = Input({10, 10}), b = Input({10});
  EXPECT_EQ(Kernels(Add(Sum(a, {0}), b)), 1);
  UOpPtr c = Input({4, 5, 6}), d = Input({6, 5, 1});
  EXPECT_EQ(Kernels(Add(Permute(Sum(c, {0}, true), {2, 1, 0}), d)), 1);
}

TEST(KernelCount, ElementwiseIntoReduce) {
  UOpPtr a = Input({100}), b = Input({100}), c = Input({10, 10});
  EXPECT_EQ(Kernels(Sum(Add(Reshape(Add(a, b), {10, 10}), c), {0})), 1);
}

TEST(KernelCount, Diamond) {
  UOpPtr a = Input({10}), b = Input({10}), c = Input({10}), d = Input({10});
  UOpPtr ab = Add(a, b);
  EXPECT_EQ(Kernels(Add(Add(ab, c), Add(ab, d))), 1);
}

TEST(KernelCount, SharedReduce) {
  UOpPtr a = Input({10});
  EXPECT_EQ(Kernels(Add(SumAll(a), SumAll(a))), 1);
  UOpPtr img = Input({64, 64});
  EXPECT_EQ(Kernels(Relu(Add(Sum(img, {0}), Sum(img, {1})))), 1);
  UOpPtr x = Input({4, 8}), y = Input({4, 8});
  EXPECT_EQ(Kernels(Add(Sum(y, {-1}), Sum(x, {-1}))), 1);
  EXPECT_EQ(Kernels(Add(Sum(x, {-1}), MaxR(y, {-1}))), 1);
}

// Independent reduces of one input shape and axes that read a common input (a BatchNorm backward's per-channel
// sums) become one kernel; reduces with no input in common, or one that needs the other, do not.
TEST(KernelCount, SiblingReducesShareOneKernel) {
  UOpPtr x = Input({8, 16, 32}), g = Input({8, 16, 32}), h = Input({8, 16, 32});
  EXPECT_EQ(Kernels({Sum(g, {0, 2}), Sum(Mul(g, x), {0, 2})}), 1);
  EXPECT_EQ(Kernels({Sum(g, {0, 2}), Sum(Mul(g, x), {0, 2}), MaxR(x, {0, 2})}), 1);
  EXPECT_EQ(Kernels({Sum(g, {0, 2}), Sum(h, {0, 2})}), 2);  // nothing read in common
  EXPECT_EQ(Kernels({Sum(g, {0, 2}), Sum(g, {0, 1})}), 2);  // other axes
  UOpPtr mean = Sum(g, {0, 2}, true);
  EXPECT_EQ(Kernels({Sum(Mul(g, BroadcastTo(mean, {8, 16, 32})), {0, 2})}),
            2);  // one needs the other
}

TEST(KernelCount, TwoMatmuls) {
  UOpPtr a = Input({4, 8}), b = Input({8, 3}), c = Input({4, 5}), d = Input({5, 3});
  EXPECT_EQ(Kernels(Add(Matmul(a, b), Matmul(c, d))), 1);
}

TEST(KernelCount, RealizeAgainIsFree) {
  UOpPtr a = Input({10});
  EXPECT_EQ(Kernels(a), 0);
  EXPECT_EQ(Kernels(Reshape(a, {2, 5})), 0);
  EXPECT_EQ(Kernels(Contiguous(Reshape(a, {2, 5}))), 0);
  EXPECT_EQ(Kernels(Contiguous(Expand(Reshape(a, {1, 10}), {4, 10}))), 1);
}

TEST(KernelCount, BroadcastReduceRealizes) {
  UOpPtr a = Input({32, 16});
  EXPECT_EQ(Kernels(Sub(a, Mean(a, {0}, true))), 2);
  UOpPtr x = Input({4, 8});
  EXPECT_EQ(Kernels(Sum(Sub(x, MaxR(x, {-1}, true)), {-1})), 2);
  EXPECT_EQ(Kernels(Std(x, -1)), 2);
  EXPECT_EQ(Kernels(Sum(Add(x, Sum(x, {-1}, true)), {-1})), 2);
}

TEST(KernelCount, LayerNorm) {
  UOpPtr x = Input({4, 10, 10}), w = Input({10, 10}), b = Input({10, 10});
  EXPECT_EQ(Kernels(LayerNorm(x, {1, 2}, w, b)), 3);
}

TEST(KernelCount, Matmul) {
  UOpPtr a = Input({16, 32}), b = Input({32, 8});
  EXPECT_EQ(Kernels(Matmul(a, b)), 1);
}

TEST(KernelCount, Conv2dRelu) {
  UOpPtr x = Input({2, 3, 16, 16}), w = Input({16, 3, 3, 3}), b = Input({16});
  EXPECT_EQ(Kernels(Relu(Conv2d(x, w, b))), 1);
}

TEST(KernelCount, TwoConvsRelu) {
  UOpPtr x = Input({2, 3, 16, 16}), w1 = Input({8, 3, 3, 3}), b1 = Input({8}), w2 = Input({4, 8, 3, 3}),
         b2 = Input({4});
  EXPECT_EQ(Kernels(Relu(Conv2d(Relu(Conv2d(x, w1, b1)), w2, b2))), 2);
}

TEST(KernelCount, SharedReduceSeveralOutputs) {
  // tinygrad: 3 kernels; sharing the reduce's index lets the two sums share one kernel here.
  UOpPtr a = Input({10});
  UOpPtr out0 = AddC(SumAll(a), 2), out1 = AddC(SumAll(a), 4);
  int n = Kernels({out0, out1, Mul(out0, out1)});
  EXPECT_GE(n, 2);
  EXPECT_LE(n, 3);
}

TEST(KernelCount, SeveralRootsSharingElementwise) {
  UOpPtr a = Input({10}), b = Input({10});
  UOpPtr ab = Add(a, b);
  EXPECT_EQ(Kernels({AddC(ab, 1), AddC(ab, 2)}), 2);
}

TEST(KernelCount, ContiguousRealizes) {
  UOpPtr a = Input({10}), b = Input({10});
  EXPECT_EQ(Kernels(AddC(Contiguous(Add(a, b)), 1)), 2);
}

TEST(KernelCount, PadShrinkFlipFuse) {
  UOpPtr a = Input({4, 4}), b = Input({6, 6});
  EXPECT_EQ(Kernels(Add(Pad(Flip(a, {1, 0}), {1, 1, 1, 1}), b)), 1);
  EXPECT_EQ(Kernels(Add(Shrink(b, {1, 5, 1, 5}), a)), 1);
}

// A reduce read through a pad is stored at its own shape: inlined, its loop would run for every element of the padded
// view (the gradient of a stride-2 conv's input interleaves the gradient with zeros: 4x the multiply-adds).
TEST(KernelCount, ReduceReadThroughAPadIsRealized) {
  UOpPtr a = Input({8, 16}), b = Input({20});
  EXPECT_EQ(Kernels(Add(Pad(Sum(a, {0}), {2, 2}), b)), 2);
  EXPECT_EQ(Kernels(Add(Shrink(Sum(a, {0}), {2, 14}), Input({12}))), 1);  // a shrink reads inside: still fused
}

TEST(KernelCount, ReduceUsedAtTwoIndicesIsRealized) {
  UOpPtr a = Input({8, 8});
  UOpPtr s = Sum(a, {0});  // (8,)
  EXPECT_EQ(Kernels(Add(s, Flip(s, {1}))), 2);
}

TEST(KernelCount, DeepChainDoesNotOverflowTheStack) {
  UOpPtr y = Input({16});
  for (int i = 0; i < 20000; ++i) y = AddC(y, 1);
  EXPECT_EQ(Kernels(y), 1);
}

// The scheduler's recursions along the graph (kernel lowering, cost) keep their frames on the heap
// (engine/base/task.h): a 100,000-op chain of elementwise ops, movement ops and a reduce schedules on a thread with a
// 1 MiB stack, where one C++ frame per op would need tens of MiB.
TEST(KernelCount, DeepChainNeedsNoLargeStack) {
  UOpPtr y = Input({4, 4});
  for (int i = 0; i < 50000; ++i) y = Permute(AddC(y, 1), {1, 0});
  UOpPtr root = Sum(y, {1});
  struct Job {
    const UOpPtr* root;
    int kernels = -1;
  } job{&root};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t{1} << 20);
  pthread_t tid;
  auto body = [](void* p) -> void* {
    Job* j = static_cast<Job*>(p);
    j->kernels = Kernels(*j->root);
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&tid, &attr, body, &job), 0);
  pthread_attr_destroy(&attr);
  pthread_join(tid, nullptr);
  EXPECT_EQ(job.kernels, 1);
}

// The fusion decisions are named rules (schedule.cc: the "schedule realize" and "schedule fuse" tables) whose hits
// are counted per schedule: each graph below needs one particular decision, and its rule is the one counted.
int64_t Hits(std::vector<UOpPtr> roots, const char* pass, const char* rule, int* kernels = nullptr) {
  RewriteStats stats;
  ScheduleOptions o;
  o.stats = &stats;
  auto s = CreateSchedule(roots, o);
  EXPECT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(stats.Ran(pass)) << stats.Format();
  if (kernels != nullptr && s.ok()) *kernels = static_cast<int>(s->items.size());
  return stats.Hits(pass, rule);
}

TEST(KernelCount, FusionDecisionsAreNamedCountedRules) {
  UOpPtr a = Input({10}), b = Input({10});
  EXPECT_EQ(Hits({AddC(Contiguous(Add(a, b)), 1)}, "schedule realize", "contiguous -> realize"), 1);
  EXPECT_EQ(Hits({AddC(Add(a, b), 1)}, "schedule realize", "contiguous -> realize"), 0);
  UOpPtr x = Input({4, 8});
  EXPECT_EQ(Hits({Sum(Sub(x, MaxR(x, {-1}, true)), {-1})}, "schedule fuse",
                 "reduce broadcast back or nested and large -> store"),
            1);
  UOpPtr s = Sum(Input({8, 8}), {0});
  EXPECT_EQ(Hits({Add(s, Flip(s, {1}))}, "schedule fuse", "reduce used at two indices -> store"), 1);
  int kernels = 0;
  UOpPtr g = Input({8, 16, 32}), h = Input({8, 16, 32});
  EXPECT_EQ(Hits({Sum(g, {0, 2}), Sum(Mul(g, h), {0, 2})}, "schedule fuse",
                 "sibling reduces over one input -> one kernel", &kernels),
            1);
  EXPECT_EQ(kernels, 1);
  UOpPtr m = SumAll(a);
  EXPECT_EQ(Hits({AddC(m, 2), AddC(m, 4)}, "schedule fuse", "reduce shared by kernels of one index -> one kernel",
                 &kernels),
            1);
  EXPECT_EQ(kernels, 1);
  UOpPtr cx = Input({1, 32, 5, 5}), w1 = Input({32, 32, 1, 1}), b1 = Input({32}), w2 = Input({16, 32, 1, 1}),
         b2 = Input({16}), cs = Input({1, 24, 5, 5}), wd = Input({32, 24, 1, 1}), bd = Input({32});
  EXPECT_EQ(Hits({Conv2d(Relu(Conv2d(cx, w1, b1)), w2, b2)}, "schedule fuse",
                 "large reduce nested in another reduce -> store its epilogue", &kernels),
            1);
  EXPECT_EQ(kernels, 2);
  EXPECT_EQ(Hits({Relu(Add(Conv2d(cx, w1, b1), Conv2d(cs, wd, bd)))}, "schedule fuse",
                 "second large loop nest in one kernel -> store", &kernels),
            1);
  EXPECT_EQ(kernels, 2);
}

TEST(KernelCount, ConstOnlyGraphRunsOnTheDefaultDevice) {
  auto s = CreateSchedule({Scalar(3.0, {2, 2})});
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->items.size(), 1u);
  EXPECT_EQ(s->items[0].device, DefaultDevice());
}

TEST(KernelCount, NullRootIsAnError) {
  EXPECT_EQ(CreateSchedule({UOpPtr()}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Long float sums are split into partial sums of at most kSplitPartMax elements, whose sum is split again into groups
// of at most kSplitFanIn (engine/schedule/split_reduce.h): a kernel per stage.
TEST(KernelCount, LongFloatSumsAreSplit) {
  EXPECT_EQ(Kernels(SumAll(Input({1 << 20}))), 3);        // 256 partials of 4096, 4 of 64, their sum
  EXPECT_EQ(Kernels(SumAll(Input({1 << 28}))), 4);        // 65536 partials, 1024, 16, the sum
  EXPECT_EQ(Kernels(SumAll(Input({1 << 19}))), 3);        // 128 partials, 2, their sum
  EXPECT_EQ(Kernels(Sum(Input({1 << 19, 3}), {0})), 3);   // a column sum: partials per column
  EXPECT_EQ(Kernels(SumAll(Input({1000003}))), 3);        // a prime length: 245 zero-padded groups, 5, the sum
  EXPECT_EQ(Kernels(Sum(Input({512, 32, 20, 20}), {0, 2, 3})), 1);  // the training step's sums: not split
  EXPECT_EQ(Kernels(Sum(Input({512, 32, 24, 24}), {0, 2, 3})), 1);
  EXPECT_EQ(Kernels(SumAll(Input({(1 << 19) - 1}))), 1);  // below the threshold
  EXPECT_EQ(Kernels(SumAll(Input({1 << 20}, dtypes::kInt32))), 1);  // integer sums are exact: not split
  EXPECT_EQ(Kernels(MaxR(Input({1 << 20}), {0})), 1);     // a max does not round
}

// Found by the differential test (tests/differential/regressions/cycle-contiguous-matmul-broadcast-max.case): m is
// stored by a CONTIGUOUS and also used by the root, which subtracts it from the broadcast max of that CONTIGUOUS. The
// two users of m were merged into one kernel while the root's build still left the max out, so the max's kernel both
// needed and fed the merged one ("cycle detected"). Merges now wait for complete builds.
TEST(KernelCount, NoMergeAcrossABroadcastReduceStillPending) {
  UOpPtr a = Input({2, 4}), b = Input({4, 3});
  UOpPtr m = Matmul(a, b);
  UOpPtr root = Sub(BroadcastTo(MaxR(Contiguous(m), {0}, true), {2, 3}), m);
  auto s = CreateSchedule({root});
  ASSERT_TRUE(s.ok()) << s.status();
}

}  // namespace
}  // namespace kiln
