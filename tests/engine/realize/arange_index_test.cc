// Tensor::Arange builds its index from bit planes (engine/tensor/creation.cc), and the scheduler lowers that sum,
// read flat, to the flat index itself (engine/schedule/kernel_builder.cc, IsBitPlaneIota). Checked here: the values
// on CPU and INTERP against the index computed in the test, through reshapes, permutes and flips; the kernel of a
// random weight (rand(32, 32, 5, 5)) has no integer division or remainder left, neither in its AST nor once lowered
// for the CPU (the opts merge its four axes into one upcast loop, whose index the hash reads as a value); and a plane sum that is not the
// index (planes in the other order) is still computed as written.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backends/register_all.h"
#include "engine/codegen/codegen.h"
#include "engine/realize/realize.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/tensor.h"
#include "tests/engine/cpu_target.h"

namespace kiln {
namespace {

class ArangeIndexTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { backends::RegisterAllBackends(); }
  const std::string& device() const { return GetParam(); }
};

// The values of `t`, computed on its device: a graph of constants alone has no device and would be computed on the
// default one (engine/schedule, "Constant-only subgraphs"), so a zero read from a buffer on the device joins it.
std::vector<int32_t> Values(const Tensor& t) {
  Tensor zero = Tensor::FromVector(std::vector<int32_t>{0}, {1}, t.device());
  Tensor u = t.Add(zero.Reshape(std::vector<int64_t>(t.ndim(), 1)).Expand(t.shape()));
  const absl::Status st = u.Realize();
  EXPECT_TRUE(st.ok()) << st;
  auto v = u.ToVector<int32_t>();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<int32_t>{};
}

TEST_P(ArangeIndexTest, EveryLength) {
  for (int64_t n : {1, 2, 3, 7, 64, 1000, 1025, 65539}) {
    Tensor t = Tensor::Arange(0, n, 1, dtypes::kInt32, device());
    EXPECT_EQ(t.device(), device());
    std::vector<int32_t> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = static_cast<int32_t>(i);
    EXPECT_EQ(Values(t), want) << "n = " << n;
  }
}

TEST_P(ArangeIndexTest, ThroughViews) {
  // [3, 4, 5] permuted to [5, 3, 4]: element (c, a, b) holds a*20 + b*5 + c.
  Tensor p = Tensor::Arange(0, 60, 1, dtypes::kInt32, device()).Reshape({3, 4, 5}).Permute({2, 0, 1}).Add(1);
  std::vector<int32_t> want;
  for (int c = 0; c < 5; ++c)
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 4; ++b) want.push_back(a * 20 + b * 5 + c + 1);
  EXPECT_EQ(Values(p), want);
  // Flipped and strided: arange(100)[::-3].
  Tensor f = Tensor::Arange(0, 100, 1, dtypes::kInt32, device()).Flip({0}).Reshape({25, 4}).Shrink({{0, 25}, {0, 1}});
  want.clear();
  for (int i = 0; i < 25; ++i) want.push_back(99 - 4 * i);
  EXPECT_EQ(Values(f.Contiguous()), want);
  // With start and step.
  EXPECT_EQ(Values(Tensor::Arange(5, 40, 7, dtypes::kInt32, device())), (std::vector<int32_t>{5, 12, 19, 26, 33}));
}

TEST_P(ArangeIndexTest, OtherPlaneSumsAreComputedAsWritten) {
  // Planes of the index of a (2, 2) view but with the constants swapped: value(i0, i1) = i0 + 2 i1, not the index.
  auto plane = [&](int64_t c, IntVec shape) {
    return Tensor::Full({1}, c, dtypes::kInt32, device()).Pad({{1, 0}}).Reshape(shape).Expand({2, 2});
  };
  Tensor t = plane(1, {2, 1}).Add(plane(2, {1, 2})).Reshape({4});
  EXPECT_EQ(Values(t.Contiguous()), (std::vector<int32_t>{0, 2, 1, 3}));
  // The index's own planes (2, then 1) do give the index.
  Tensor u = plane(2, {2, 1}).Add(plane(1, {1, 2})).Reshape({4});
  EXPECT_EQ(Values(u.Contiguous()), (std::vector<int32_t>{0, 1, 2, 3}));
}

INSTANTIATE_TEST_SUITE_P(Devices, ArangeIndexTest, ::testing::Values("CPU", "INTERP"));

TEST(ArangeIndexKernel, RandomWeightHasNoDivisions) {
  Tensor w = Tensor::Rand({32, 32, 5, 5}, dtypes::kFloat32, "CPU");
  ASSERT_TRUE(w.ok()) << w.status();
  auto s = CreateSchedule({w.uop()});
  ASSERT_TRUE(s.ok()) << s.status();
  int kernels = 0;
  for (const ScheduleItem& it : s->items) {
    if (it.kind != ScheduleItem::Kind::kKernel) continue;
    ++kernels;
    for (const UOp* u : Toposort(it.ast))
      EXPECT_TRUE(u->op() != Op::CDIV && u->op() != Op::CMOD) << "integer " << OpName(u->op()) << " in the kernel";
    // Lowered as for a 2-core AVX-512 CPU: UPCAST(0, 16) over the merged axes, lanes i*16 + j.
    const codegen::Target cpu = test_util::Avx512TwoCoreLlvm();
    auto p = codegen::LowerKernel(it.ast, cpu, {});
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_FALSE(p->applied_opts.empty());
    for (const UOpPtr& u : p->uops)
      EXPECT_TRUE(u->op() != Op::CDIV && u->op() != Op::CMOD)
          << "integer " << OpName(u->op()) << " in the lowered " << p->name;
  }
  EXPECT_EQ(kernels, 1);
}

}  // namespace
}  // namespace kiln
