// An ASSIGN whose value is where(c, x, target) read at the element being written (a KV cache updated as
// where(row == pos, new_row, cache)) becomes a gated store (engine/schedule/kernel_builder.cc, InPlaceWhere): the
// kernel stores x where c holds and neither reads nor writes the rest. Checked on CPU, INTERP and CL: the values
// against the update computed here element by element, for both orders of the where and for a where whose "old"
// operand is the target read elsewhere (a flip: no gate, the value computed as written); and that the in-place
// kernel's store is gated and no load reads the target; with the gate along the innermost axis (a transposed cache),
// the lowered loops put the axes the gate does not read innermost.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/container/flat_hash_set.h"

#include "backends/register_all.h"
#include "engine/codegen/codegen.h"
#include "engine/runtime/registry.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/tensor.h"
#include "tests/engine/cpu_target.h"

namespace kiln {
namespace {

constexpr int64_t S = 3, H = 2, M = 8, D = 16;

class InPlaceWhereTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(device()).ok()) GTEST_SKIP() << device() << " backend not available";
  }
  const std::string& device() const { return GetParam(); }

  std::vector<float> Random(int64_t n) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& f : v) f = dist(rng_);
    return v;
  }
  // Row pos[s] of slot s is written; slot 1 writes nothing (pos -1), as in a batched decode step.
  std::vector<int32_t> WriteMask(const std::vector<int64_t>& pos) {
    std::vector<int32_t> w(S * M, 0);
    for (int64_t s = 0; s < S; ++s)
      if (pos[s] >= 0) w[s * M + pos[s]] = 1;
    return w;
  }

  std::mt19937 rng_{7};
};

// cache[s, h, m, d] after the update: new[s, h, d] where the mask is set, else the old value.
std::vector<float> Expected(const std::vector<float>& cache, const std::vector<float>& fresh,
                            const std::vector<int32_t>& mask) {
  std::vector<float> out = cache;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t d = 0; d < D; ++d)
          if (mask[s * M + m] == 1) out[((s * H + h) * M + m) * D + d] = fresh[(s * H + h) * D + d];
  return out;
}

TEST_P(InPlaceWhereTest, WritesOnlyTheMaskedRows) {
  const std::vector<float> c0 = Random(S * H * M * D), fresh = Random(S * H * D);
  const std::vector<int32_t> mask = WriteMask({5, -1, 0});
  Tensor cache = Tensor::FromVector(c0, {S, H, M, D}, device());
  ASSERT_TRUE(cache.Realize().ok());
  const Tensor write = Tensor::FromVector(mask, {S, 1, M, 1}, device()).Eq(1);
  const Tensor x = Tensor::FromVector(fresh, {S, H, 1, D}, device());

  Tensor target = cache;  // Assign replaces its tensor's UOp: `cache` stays the buffer, read back below
  Tensor updated = target.Assign(write.Where(x * 2.0f, cache));
  auto s = CreateSchedule({updated.uop()});
  ASSERT_TRUE(s.ok()) << s.status();
  int gated = 0;
  for (const ScheduleItem& it : s->items) {
    if (it.kind != ScheduleItem::Kind::kKernel) continue;
    for (const UOp* u : Toposort(it.ast)) {
      if (u->op() == Op::STORE && u->src(0)->num_src() == 3) ++gated;
      if (u->op() != Op::LOAD) continue;
      const int64_t slot = std::get<int64_t>(u->src(0)->src(0)->arg());
      EXPECT_NE(it.buffers[slot], it.buffers[0]) << "the in-place kernel reads its target";
    }
  }
  EXPECT_EQ(gated, 1);

  ASSERT_TRUE(updated.Realize().ok());
  std::vector<float> twice(fresh.size());
  for (size_t i = 0; i < fresh.size(); ++i) twice[i] = 2.0f * fresh[i];
  auto got = cache.ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Expected(c0, twice, mask));

  // The other order, where(keep, cache, x), and a second step on the updated cache.
  const std::vector<int32_t> mask2 = WriteMask({6, 2, -1});
  std::vector<int32_t> keep(mask2.size());
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = 1 - mask2[i];
  Tensor k = Tensor::FromVector(keep, {S, 1, M, 1}, device()).Eq(1);
  target = cache;
  Tensor again = target.Assign(k.Where(cache, x));
  const absl::Status st = again.Realize();
  ASSERT_TRUE(st.ok()) << st;
  got = cache.ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Expected(Expected(c0, twice, mask), fresh, mask2));
}

TEST_P(InPlaceWhereTest, TargetReadElsewhereIsComputedAsWritten) {
  const std::vector<float> c0 = Random(S * H * M * D), fresh = Random(S * H * D);
  const std::vector<int32_t> mask = WriteMask({1, 4, 7});
  Tensor cache = Tensor::FromVector(c0, {S, H, M, D}, device());
  ASSERT_TRUE(cache.Realize().ok());
  const Tensor write = Tensor::FromVector(mask, {S, 1, M, 1}, device()).Eq(1);
  const Tensor x = Tensor::FromVector(fresh, {S, H, 1, D}, device());
  // where(c, x, cache flipped along m): every element is written, the unmasked ones from the mirrored row.
  Tensor target = cache;
  ASSERT_TRUE(target.Assign(write.Where(x, cache.Flip({2}))).Realize().ok());
  std::vector<float> want(c0.size());
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t d = 0; d < D; ++d)
          want[((s * H + h) * M + m) * D + d] = mask[s * M + m] == 1 ? fresh[(s * H + h) * D + d]
                                                                     : c0[((s * H + h) * M + (M - 1 - m)) * D + d];
  auto got = cache.ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, want);
}

// The transposed layout (a K cache kept [S, H, D, M]): the gate varies along the innermost axis. Values as above;
// and, lowered for a 2-core AVX-512 CPU, the loops the gate does not read (h, d) are the innermost, so the gate is
// invariant there (codegen's heuristic reorders them; with m innermost every element tested the gate).
TEST_P(InPlaceWhereTest, GateAlongTheInnermostAxis) {
  const std::vector<float> c0 = Random(S * H * D * M), fresh = Random(S * H * D);
  const std::vector<int32_t> mask = WriteMask({3, -1, 7});
  Tensor cache = Tensor::FromVector(c0, {S, H, D, M}, device());
  ASSERT_TRUE(cache.Realize().ok());
  const Tensor write = Tensor::FromVector(mask, {S, 1, 1, M}, device()).Eq(1);
  const Tensor x = Tensor::FromVector(fresh, {S, H, D, 1}, device());
  Tensor target = cache;
  Tensor updated = target.Assign(write.Where(x, cache));
  auto programs = test_util::LowerScheduledKernels(updated.uop(), test_util::Avx512TwoCoreLlvm());
  ASSERT_TRUE(programs.ok()) << programs.status();
  for (const codegen::Program& prog : *programs) {
    const codegen::Program* p = &prog;
    // One gate for every store of the body (upcast lanes along m would each test their own), and not one that reads
    // the innermost loop.
    const UOp* innermost = nullptr;
    const UOp* store = nullptr;
    absl::flat_hash_set<const UOp*> gates;
    for (const UOpPtr& u : p->uops) {
      if (u->op() == Op::RANGE && store == nullptr) innermost = u.get();
      if (u->op() == Op::STORE && u->num_src() == 3) {
        store = u.get();
        gates.insert(u->src(2).get());
      }
    }
    ASSERT_NE(store, nullptr) << "the store is not gated";
    ASSERT_NE(innermost, nullptr);
    EXPECT_EQ(gates.size(), 1u) << "the lanes of " << p->name << " test their own gates";
    for (const UOp* g : Toposort(store->src(2)))
      EXPECT_NE(g, innermost) << "the gate reads the innermost loop of " << p->name;
  }
  EXPECT_EQ(programs->size(), 1u);
  ASSERT_TRUE(updated.Realize().ok());
  std::vector<float> want = c0;
  for (int64_t b = 0; b < S; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d)
        for (int64_t m = 0; m < M; ++m)
          if (mask[b * M + m] == 1) want[((b * H + h) * D + d) * M + m] = fresh[(b * H + h) * D + d];
  auto got = cache.ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, want);
}

INSTANTIATE_TEST_SUITE_P(Devices, InPlaceWhereTest, ::testing::Values("CPU", "INTERP", "CL"));

}  // namespace
}  // namespace kiln
