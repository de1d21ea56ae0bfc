// PrecompileKernels' two rounds (issue #21 item 3): realize_internal::GetKernel with a CompileOrder hands a kernel
// whose lowered program carries an SLP cap (codegen::Program::slp_max_vf) back lowered and uncompiled, compiles it from
// that program on the second call (no second lowering), and compiles an uncapped kernel at once; a realize whose
// schedule mixes both computes what a host loop computes.
#include <cmath>
#include <vector>

#include "backends/register_all.h"
#include "engine/base/env.h"
#include "engine/realize/realize.h"
#include "engine/realize/realize_internal.h"
#include "engine/rewrite/rewrite_stats.h"
#include "engine/runtime/device.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

std::vector<float> Ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(scale * static_cast<float>(i)) * 0.5f;
  return v;
}

struct Found {
  int64_t m = 0, k = 0, n = 0;
  UOpPtr ast;
};

// The first matmul [m, k] @ [k, n] among a few row and lane counts whose kernel the host's heuristic caps: a tile of
// rows x lanes whose accumulator count is not 2^a + 2^b is capped at one register (7 rows: 7 x 32 lanes at AVX-512,
// 7 x 8 at AVX2, where 7 rows of two vectors exceed the accumulator budget).
Found CappedMatmul(runtime::Device& dev) {
  const codegen::Target target = realize_internal::TargetFor(dev);
  for (int64_t m : {7, 49}) {
    for (int64_t n : {32, 64}) {
      const int64_t k = 512;
      Tensor a = Tensor::FromVector(Ramp(m * k, 0.37f), {m, k});
      Tensor b = Tensor::FromVector(Ramp(k * n, 0.11f), {k, n});
      absl::StatusOr<Schedule> s = CreateSchedule({a.Matmul(b).uop()});
      if (!s.ok()) continue;
      for (const ScheduleItem& it : s->items) {
        if (it.kind != ScheduleItem::Kind::kKernel) continue;
        absl::StatusOr<codegen::Program> p = codegen::LowerKernel(it.ast, target, {});
        if (p.ok() && p->slp_max_vf > 0) return Found{m, k, n, it.ast};
      }
    }
  }
  return {};
}

TEST(PrecompileOrderTest, CappedKernelIsLoweredFirstAndCompiledFromItsProgram) {
  backends::RegisterAllBackends();
  Context no_cache({{Knob::kCacheLevel, 0}});  // lowered here, not read back from the program cache
  absl::StatusOr<runtime::Device*> dev = runtime::GetDevice("CPU");
  ASSERT_TRUE(dev.ok()) << dev.status();
  const Found capped = CappedMatmul(**dev);
  ASSERT_NE(capped.ast, nullptr) << "no matmul shape tried here gets an SLP-capped tile on this host";

  RealizeContext ctx;
  ScopedRealizeContext scope(ctx);
  realize_internal::CompileOrder order;
  RealizeStats stats;
  absl::StatusOr<std::shared_ptr<realize_internal::LoadedKernel>> first =
      realize_internal::GetKernel(ctx, **dev, capped.ast, &stats, &order);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, nullptr);
  ASSERT_TRUE(order.program.has_value());
  EXPECT_GT(order.program->slp_max_vf, 0);
  EXPECT_EQ(stats.compiled, 0);
  const std::string name = order.program->name;

  ctx.rewrite_stats().Clear();
  absl::StatusOr<std::shared_ptr<realize_internal::LoadedKernel>> second =
      realize_internal::GetKernel(ctx, **dev, capped.ast, &stats, &order);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_NE(*second, nullptr);
  EXPECT_EQ((*second)->program.name, name);
  EXPECT_FALSE(order.program.has_value());
  EXPECT_EQ(stats.compiled, 1);
  EXPECT_FALSE(ctx.rewrite_stats().Ran("expand upcasts")) << "lowered again: " << ctx.rewrite_stats().Format();

  // An uncapped kernel compiles at once under the same order.
  Tensor x = Tensor::FromVector(Ramp(256, 0.3f), {256});
  absl::StatusOr<Schedule> s = CreateSchedule({(x * 2.0f + 1.0f).uop()});
  ASSERT_TRUE(s.ok()) << s.status();
  for (const ScheduleItem& it : s->items) {
    if (it.kind != ScheduleItem::Kind::kKernel) continue;
    realize_internal::CompileOrder plain;
    absl::StatusOr<std::shared_ptr<realize_internal::LoadedKernel>> k =
        realize_internal::GetKernel(ctx, **dev, it.ast, &stats, &plain);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_NE(*k, nullptr);
    EXPECT_FALSE(plain.program.has_value());
  }
}

TEST(PrecompileOrderTest, MixedScheduleComputesTheHostResult) {
  backends::RegisterAllBackends();
  Context no_cache({{Knob::kCacheLevel, 0}});
  absl::StatusOr<runtime::Device*> dev = runtime::GetDevice("CPU");
  ASSERT_TRUE(dev.ok()) << dev.status();
  const Found f = CappedMatmul(**dev);
  ASSERT_NE(f.ast, nullptr) << "no matmul shape tried here gets an SLP-capped tile on this host";
  const std::vector<float> av = Ramp(f.m * f.k, 0.37f), bv = Ramp(f.k * f.n, 0.11f), cv = Ramp(f.n, 0.7f);
  RealizeContext ctx;
  ScopedRealizeContext scope(ctx);
  Tensor a = Tensor::FromVector(av, {f.m, f.k});
  Tensor b = Tensor::FromVector(bv, {f.k, f.n});
  Tensor c = Tensor::FromVector(cv, {1, f.n});
  // The capped matmul, then uncapped kernels after it: (a @ b) stored, plus c, summed over rows.
  absl::StatusOr<std::vector<float>> got = (a.Matmul(b).Contiguous() + c).Exp().Sum({0}).ToVector<float>();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), static_cast<size_t>(f.n));
  for (int64_t j = 0; j < f.n; ++j) {
    double want = 0;
    for (int64_t i = 0; i < f.m; ++i) {
      double dot = 0;
      for (int64_t q = 0; q < f.k; ++q) dot += static_cast<double>(av[i * f.k + q]) * bv[q * f.n + j];
      want += std::exp(dot + cv[j]);
    }
    EXPECT_NEAR((*got)[j], want, 1e-4 * std::abs(want)) << "column " << j;
  }
}

}  // namespace
}  // namespace kiln
