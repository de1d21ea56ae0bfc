// Kernel counts of graphs built through engine/tensor (reference/tinygrad.md §10.4). CreateSchedule only: nothing
// is compiled or run. Inputs are Tensor::Empty (realized BUFFERs).
#include <gtest/gtest.h>

#include "engine/schedule/schedule.h"
#include "engine/tensor/gradient.h"
#include "engine/tensor/tensor.h"

namespace kiln {
namespace {

int Kernels(std::vector<Tensor> ts) {
  std::vector<UOpPtr> roots;
  for (const Tensor& t : ts) {
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return -1;
    roots.push_back(t.uop());
  }
  auto s = CreateSchedule(roots);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return -1;
  int n = 0;
  for (const ScheduleItem& it : s->items) n += it.kind == ScheduleItem::Kind::kKernel;
  return n;
}
int Kernels(const Tensor& t) { return Kernels(std::vector<Tensor>{t}); }

Tensor E(std::initializer_list<int64_t> shape) { return Tensor::Empty(std::vector<int64_t>(shape)); }

TEST(TensorKernelCount, Elementwise) {
  Tensor a = E({10}), b = E({10}), c = E({10}), d = E({10});
  EXPECT_EQ(Kernels(a + b + c), 1);
  EXPECT_EQ(Kernels(a + b + c + d), 1);
  EXPECT_EQ(Kernels((a + b).Reshape({5, 2}) + c.Reshape({5, 2})), 1);
  Tensor m = E({4, 5}), n = E({4, 5}), p = E({5, 4});
  EXPECT_EQ(Kernels((m + n).Permute({1, 0}) + p), 1);
  Tensor ab = a + b;
  EXPECT_EQ(Kernels((ab + c) + (ab + d)), 1);
}

TEST(TensorKernelCount, Reductions) {
  Tensor a = E({10}), b = E({10});
  EXPECT_EQ(Kernels((a * b).Sum()), 1);
  EXPECT_EQ(Kernels((a * b).Sum().Relu()), 1);
  EXPECT_EQ(Kernels(a.Sum() + a.Sum()), 1);
  Tensor m = E({10, 10}), v = E({10});
  EXPECT_EQ(Kernels(m.Sum(0) + v), 1);
  EXPECT_EQ(Kernels(((a + b).Reshape({10, 1}).Expand({10, 10}) + m).Sum(0)), 1);
  Tensor img = E({64, 64});
  EXPECT_EQ(Kernels((img.Sum(0) + img.Sum(1)).Relu()), 1);
  Tensor x = E({4, 8}), y = E({4, 8});
  EXPECT_EQ(Kernels(y.Sum(-1) + x.Sum(-1)), 1);
  EXPECT_EQ(Kernels(x.Sum(-1) + y.Max(-1)), 1);
}

TEST(TensorKernelCount, BroadcastReductions) {
  Tensor a = E({32, 16});
  EXPECT_EQ(Kernels(a - a.Mean(0, true)), 2);
  Tensor x = E({4, 8});
  EXPECT_EQ(Kernels((x - x.Max(-1, true)).Sum(-1)), 2);
  EXPECT_EQ(Kernels(x.Std(-1)), 2);
  EXPECT_EQ(Kernels((x + x.Sum(-1, true)).Sum(-1)), 2);
}

TEST(TensorKernelCount, Nn) {
  Tensor x = E({4, 10, 10}), w = E({10, 10}), b = E({10, 10});
  EXPECT_EQ(Kernels(x.LayerNorm(2, w, b)), 3);
  Tensor a = E({16, 32}), m = E({32, 8}), c = E({16, 12}), d = E({12, 8});
  EXPECT_EQ(Kernels(a.Matmul(m)), 1);
  EXPECT_EQ(Kernels(a.Matmul(m) + c.Matmul(d)), 1);
  Tensor img = E({2, 3, 16, 16}), cw = E({16, 3, 3, 3}), cb = E({16});
  EXPECT_EQ(Kernels(img.Conv2d(cw, cb).Relu()), 1);
  Tensor cw2 = E({8, 16, 3, 3}), cb2 = E({8});
  EXPECT_EQ(Kernels(img.Conv2d(cw, cb).Relu().Conv2d(cw2, cb2).Relu()), 2);
}

// An elementwise value read by a matmul (broadcast over the matmul's output rows) that reads two whole inputs gets a
// kernel of its own once it has 2^16 elements (a residual block's relu(conv + identity) before the next conv);
// smaller, it stays fused, as in tinygrad. One whole input (the other a per-channel broadcast) stays fused too.
TEST(TensorKernelCount, LargeTwoInputElementwiseBeforeAMatmulIsRealized) {
  Tensor w = E({16, 64});
  Tensor x = E({64, 1024}), y = E({64, 1024}), bias = E({64, 1});
  EXPECT_EQ(Kernels(w.Matmul((x + y).Relu())), 2);
  EXPECT_EQ(Kernels(w.Matmul((x + bias).Relu())), 1);
  Tensor xs = E({64, 16}), ys = E({64, 16});
  EXPECT_EQ(Kernels(w.Matmul((xs + ys).Relu())), 1);
}

TEST(TensorKernelCount, RealizedViewsAndContiguous) {
  Tensor a = E({4});
  EXPECT_EQ(Kernels(a), 0);
  EXPECT_EQ(Kernels(a.Reshape({2, 2}).Contiguous()), 0);
  EXPECT_EQ(Kernels(a.Reshape({1, 4}).Expand({4, 4}).Contiguous()), 1);
  EXPECT_EQ(Kernels(a.Reshape({1, 4}).Expand({4, 4}).Contiguous().Contiguous()), 1);
}

TEST(TensorKernelCount, SeveralOutputs) {
  Tensor a = E({10});
  Tensor out0 = a.Sum() + 2, out1 = a.Sum() + 4;
  int n = Kernels({out0, out1, out0 * out1});
  EXPECT_GE(n, 2);  // tinygrad: 3; the shared reduce lets out0 and out1 share one kernel here
  EXPECT_LE(n, 3);
}

TEST(TensorKernelCount, Softmax) {
  Tensor x = E({4, 32});
  // max, then sum of exp; the final division fuses the exp again: 3 kernels (tinygrad's count).
  EXPECT_EQ(Kernels(x.Softmax(-1)), 3);
}


// Reduce ranges nest in order of their ids. A reduce whose innermost range is a 3-tap kernel axis gets its largest
// range (the channels) innermost instead (Builder::Finish): the input gradient of a padded 3x3 conv, a transposed conv
// over flipped weights, otherwise came out (ci, ky, kx), its register tile running 3 iterations per ci and ky.
TEST(TensorKernelOrder, ConvInputGradientReducesChannelsInnermost) {
  Tensor x = E({1, 32, 8, 8}), w = E({32, 32, 3, 3}), dy = E({1, 32, 8, 8});
  ConvOptions o;
  o.padding = {1};
  Tensor loss = (x.Conv2d(w, std::nullopt, o) * dy).Sum();
  auto g = Gradient(loss, {x});
  ASSERT_TRUE(g.ok()) << g.status();
  auto s = CreateSchedule({(*g)[0].uop()});
  ASSERT_TRUE(s.ok()) << s.status();
  int checked = 0;
  for (const ScheduleItem& it : s->items) {
    if (it.kind != ScheduleItem::Kind::kKernel) continue;
    for (const UOp* u : Toposort(it.ast)) {
      if (u->op() != Op::REDUCE || u->num_src() != 4) continue;
      std::vector<std::pair<int64_t, int64_t>> by_id;  // (id, size)
      for (size_t i = 1; i < u->num_src(); ++i)
        by_id.push_back({std::get<AxisArg>(u->src(i)->arg()).id, u->src(i)->src(0)->ArgInt()});
      std::sort(by_id.begin(), by_id.end());
      EXPECT_EQ(by_id.back().second, 32) << "the channel range is not innermost";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 1);
}

}  // namespace
}  // namespace kiln
