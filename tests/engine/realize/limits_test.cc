// Bounded work (issue #17 item 3, issue #26 item 2): the estimates of a schedule, the refusals
// that happen before anything is allocated or launched, the deadline and cancellation checks
// between kernels (realize and JIT replay), the global memory budget, and the byte bounds of the
// loaded-kernel and JIT trace caches. Expected figures come from the operation counts of the
// computations (2*M*N*K for a matmul, N for an N-element add), not from the estimator.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/jit/trace_cache.h"
#include "engine/realize/estimate.h"
#include "engine/realize/realize.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/registry.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/tensor.h"

namespace kiln {
namespace {

class LimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice("CPU").ok()) GTEST_SKIP() << "CPU backend not available";
  }
};

Tensor Input(int64_t n, float value = 1.0f) {
  Tensor t = Tensor::FromVector(std::vector<float>(static_cast<size_t>(n), value), {n});
  EXPECT_TRUE(t.ok()) << t.status();
  return t;
}

WorkEstimate EstimateOf(const Tensor& t) {
  absl::StatusOr<Schedule> s = CreateSchedule({t.uop()});
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? EstimateSchedule(*s) : WorkEstimate{};
}

TEST_F(LimitsTest, ElementwiseEstimate) {
  const int64_t n = 1000;
  Tensor a = Input(n), b = Input(n);
  WorkEstimate e = EstimateOf(a + b);
  EXPECT_EQ(e.kernels, 1);
  EXPECT_EQ(e.flops, n);                 // one add per element
  EXPECT_EQ(e.bytes_moved, 3 * n * 4);   // a, b read; the sum written
  EXPECT_EQ(e.held_bytes, 2 * n * 4);    // a and b exist
  EXPECT_EQ(e.new_bytes, n * 4);         // the sum is allocated
  EXPECT_EQ(e.peak_bytes(), 3 * n * 4);
}

TEST_F(LimitsTest, MatmulEstimateIsTwoMNK) {
  const int64_t m = 24, k = 40, n = 16;
  Tensor a = Tensor::FromVector(std::vector<float>(m * k, 1.0f), {m, k});
  Tensor b = Tensor::FromVector(std::vector<float>(k * n, 1.0f), {k, n});
  WorkEstimate e = EstimateOf(a.Matmul(b));
  EXPECT_EQ(e.flops, 2 * m * n * k);  // a multiply and an accumulate per (i, j, l)
  EXPECT_EQ(e.new_bytes, m * n * 4);
}

TEST_F(LimitsTest, TwoToTheFortySumIsRefusedBeforeLaunch) {
  // Full(2^40).Sum() itself is folded to 2^40 on the host (a reduce of a constant needs no kernel,
  // issue #17 item 4), and a reduce over a broadcast axis folds to a multiply, so the 2^40 terms
  // here are exp(a_i * a_j) over a realized 2^20-vector, which nothing can fold.
  const int64_t n = int64_t{1} << 20;
  Tensor a = Input(n);
  const size_t bytes_before = runtime::BufferTable::Global().total_bytes();
  Tensor s = (a.Reshape({n, 1}) * a.Reshape({1, n})).Exp().Sum();
  absl::Status st = s.Realize();
  ASSERT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_NE(std::string(st.message()).find("max_flops"), std::string::npos) << st;
  EXPECT_NE(std::string(st.message()).find("274877906944 FLOPs per run"), std::string::npos) << st;
  EXPECT_TRUE(LastRealizeStats().launches.empty());
  EXPECT_GE(LastRealizeStats().estimate.flops, int64_t{1} << 40);
  EXPECT_EQ(runtime::BufferTable::Global().total_bytes(), bytes_before);
}

TEST_F(LimitsTest, MemoryAndBytesMovedLimits) {
  Tensor a = Input(4096), b = Input(4096);
  const size_t bytes_before = runtime::BufferTable::Global().total_bytes();
  RunControl c;
  c.limits.max_memory_bytes = 3 * 4096 * 4 - 1;  // one byte short of a, b and the sum
  absl::StatusOr<std::vector<UOpPtr>> r = Realize({(a + b).uop()}, c);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("49152 bytes of memory (32768 held, 16384 new)"),
            std::string::npos)
      << r.status();
  EXPECT_EQ(runtime::BufferTable::Global().total_bytes(), bytes_before);  // nothing allocated
  c.limits.max_memory_bytes = 3 * 4096 * 4;
  c.limits.max_bytes_moved = 3 * 4096 * 4 - 1;
  r = Realize({(a + b).uop()}, c);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("max_bytes_moved"), std::string::npos);
  c.limits.max_bytes_moved = 3 * 4096 * 4;
  r = Realize({(a + b).uop()}, c);
  ASSERT_TRUE(r.ok()) << r.status();
}

TEST_F(LimitsTest, GlobalBudgetReservesAndReleases) {
  Tensor a = Input(1024);
  MemoryBudget budget(static_cast<int64_t>(runtime::BufferTable::Global().total_bytes()) + 1024 * 4 - 1);
  RunControl c;
  c.memory_budget = &budget;
  absl::StatusOr<std::vector<UOpPtr>> r = Realize({(a * 2).uop()}, c);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("global memory budget"), std::string::npos);
  EXPECT_EQ(budget.reserved(), 0);
  MemoryBudget roomy(0);  // no cap
  c.memory_budget = &roomy;
  r = Realize({(a * 3).uop()}, c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(roomy.reserved(), 0);  // released when the Realize returned
}

// Three kernels: each CONTIGUOUS realizes its own buffer.
Tensor ThreeKernels(const Tensor& x) { return (((x + 1).Contiguous() * 2).Contiguous() - 3).Contiguous(); }

TEST_F(LimitsTest, DeadlineInThePastRunsNothing) {
  Tensor x = Input(256);
  RunControl c;
  c.deadline = absl::Now() - absl::Seconds(1);
  absl::StatusOr<std::vector<UOpPtr>> r = Realize({ThreeKernels(x).uop()}, c);
  ASSERT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("after 0 of 3"), std::string::npos) << r.status();
  EXPECT_TRUE(LastRealizeStats().launches.empty());
}

TEST_F(LimitsTest, CancellationStopsBetweenKernels) {
  Tensor x = Input(256, 5.0f);
  auto token = std::make_shared<CancellationToken>();
  RunControl c;
  c.cancellation = token;
  c.progress = [&](int done, int total) {
    EXPECT_EQ(total, 3);
    if (done == 1) token->Cancel();  // cancelled while kernel 1's results are in
  };
  absl::StatusOr<std::vector<UOpPtr>> r = Realize({ThreeKernels(x).uop()}, c);
  ASSERT_TRUE(absl::IsCancelled(r.status())) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("after 1 of 3"), std::string::npos) << r.status();
  EXPECT_EQ(LastRealizeStats().launches.size(), 1u);
  // The same computation without cancellation: all three kernels, the right values.
  Tensor y = ThreeKernels(x);
  ASSERT_TRUE(y.Realize().ok());
  EXPECT_EQ(LastRealizeStats().launches.size(), 3u);
  EXPECT_EQ(*y.ToVector<float>(), std::vector<float>(256, (5.0f + 1) * 2 - 3));
}

absl::StatusOr<std::vector<Tensor>> Steps(const jit::JitArgs& a) {
  return std::vector<Tensor>{ThreeKernels(a.positional[0])};
}

jit::JitArgs Args(float value) {
  jit::JitArgs a;
  a.positional.push_back(Input(512, value));
  return a;
}

TEST_F(LimitsTest, JitReplayObeysTheControl) {
  jit::TraceCache cache(4);
  for (float v : {1.0f, 2.0f, 3.0f}) ASSERT_TRUE(cache.Run("m", Args(v), Steps).ok());  // run, capture, replay
  {
    RunControl c;
    c.deadline = absl::Now() - absl::Seconds(1);
    ScopedRunControl scope(c);
    absl::StatusOr<std::vector<Tensor>> r = cache.Run("m", Args(4.0f), Steps);
    ASSERT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
    EXPECT_NE(std::string(r.status().message()).find("after 0 of"), std::string::npos) << r.status();
  }
  {
    RunControl c;
    c.limits.max_flops = 100;  // a replay of 3 x 512 adds, multiplies, subtracts
    ScopedRunControl scope(c);
    absl::StatusOr<std::vector<Tensor>> r = cache.Run("m", Args(4.0f), Steps);
    ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
    EXPECT_NE(std::string(r.status().message()).find("1536 FLOPs"), std::string::npos) << r.status();
  }
  absl::StatusOr<std::vector<Tensor>> r = cache.Run("m", Args(4.0f), Steps);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*(*r)[0].ToVector<float>(), std::vector<float>(512, (4.0f + 1) * 2 - 3));
}

TEST_F(LimitsTest, TraceCacheIsBoundedByBytes) {
  // Each captured plan allocates its intermediates and output: 3 x n floats.
  jit::TraceCache cache(64, /*max_bytes=*/3 * 512 * 4);
  auto three_calls = [&](int64_t n) {
    for (int i = 0; i < 3; ++i) {
      jit::JitArgs a;
      a.positional.push_back(Input(n, 1.0f));
      absl::StatusOr<std::vector<Tensor>> r = cache.Run("m", a, Steps);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(*(*r)[0].ToVector<float>(), std::vector<float>(static_cast<size_t>(n), 1.0f));
    }
  };
  three_calls(512);
  jit::TraceCacheStats s = cache.stats();
  EXPECT_EQ(s.size, 1);
  EXPECT_EQ(s.bytes, 3 * 512 * 4);
  EXPECT_EQ(s.max_bytes, 3 * 512 * 4);
  three_calls(256);  // a second signature: the first trace no longer fits with it
  s = cache.stats();
  EXPECT_EQ(s.size, 1);
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(s.bytes, 3 * 256 * 4);
}

TEST_F(LimitsTest, KernelCacheIsBoundedByBytes) {
  const KernelCacheStats before = GetKernelCacheStats();
  SetKernelCacheLimits(2048, 1);  // every loaded kernel is over the bound: only the newest stays
  for (float k : {11.0f, 12.0f, 13.0f}) {
    Tensor y = (Input(64, 1.0f) * k + k).Contiguous();
    ASSERT_TRUE(y.Realize().ok());
    EXPECT_EQ(*y.ToVector<float>(), std::vector<float>(64, k + k));
  }
  const KernelCacheStats after = GetKernelCacheStats();
  EXPECT_EQ(after.entries, 1);
  EXPECT_GT(after.bytes, 0);
  EXPECT_GE(after.evictions - before.evictions, 2);
  SetKernelCacheLimits(static_cast<size_t>(before.max_entries), static_cast<size_t>(before.max_bytes));
}

}  // namespace
}  // namespace kiln
