// TinyJit replay overhead: a jitted function of 10 tiny kernels (16-element adds, each realized), replayed.
// Reports us_per_kernel (wall time of one jitted call / 10, real time). Target <= 2 us per kernel (tinygrad: about 14 us).
// BM_NoJit10Kernels runs the same function without the JIT (schedule + memo + cached compile per realize).
#include <benchmark/benchmark.h>

#include <cstdio>

#include "backends/register_all.h"
#include "engine/base/env.h"
#include "engine/jit/tiny_jit.h"
#include "engine/runtime/registry.h"

namespace kiln {
namespace {

constexpr int kKernels = 10;

absl::StatusOr<std::vector<Tensor>> TenKernels(const std::vector<Tensor>& in) {
  Tensor x = in[0];
  for (int i = 0; i < kKernels; ++i) {
    x = x + 1;
    if (absl::Status st = x.Realize(); !st.ok()) return st;
  }
  return std::vector<Tensor>{x};
}

bool Setup(benchmark::State& state) {
  backends::RegisterAllBackends();
  if (!runtime::GetDevice("CPU").ok()) {
    state.SkipWithError("CPU backend not available");
    return false;
  }
  return true;
}

void BM_JitReplay10Kernels(benchmark::State& state) {
  if (!Setup(state)) return;
  jit::TinyJit jit(TenKernels);
  std::vector<Tensor> in = {Tensor::FromVector(std::vector<float>(16, 0.0f), {16})};
  for (int i = 0; i < 3; ++i) {
    if (!jit(in).ok()) {
      state.SkipWithError("jit failed");
      return;
    }
  }
  if (jit.num_kernels() != kKernels) {
    state.SkipWithError("unexpected kernel count");
    return;
  }
  for (auto _ : state) {
    auto r = jit(in);
    benchmark::DoNotOptimize(r);
  }
  state.counters["us_per_kernel"] = benchmark::Counter(
      state.iterations() * kKernels, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_JitReplay10Kernels)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The plan alone (no input checks): the floor of the replay path.
void BM_ExecPlanRun10Kernels(benchmark::State& state) {
  if (!Setup(state)) return;
  jit::TinyJit jit(TenKernels);
  Tensor x = Tensor::FromVector(std::vector<float>(16, 0.0f), {16});
  for (int i = 0; i < 3; ++i) (void)jit({x});
  auto buf = runtime::BufferTable::Global().Lookup(BufferOf(x.uop().get()));
  std::vector<runtime::DeviceMemory> mem = {buf->memory()};
  ExecPlan* plan = const_cast<ExecPlan*>(jit.plan());
  for (auto _ : state) benchmark::DoNotOptimize(plan->Run(mem));
  state.counters["us_per_kernel"] = benchmark::Counter(
      state.iterations() * kKernels, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_ExecPlanRun10Kernels)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_NoJit10Kernels(benchmark::State& state) {
  if (!Setup(state)) return;
  std::vector<Tensor> in = {Tensor::FromVector(std::vector<float>(16, 0.0f), {16})};
  for (auto _ : state) {
    // fresh input values each call (an ASSIGN), so realize cannot answer from its memo
    Tensor x = in[0];
    x.Assign(x + 0);
    (void)x.Realize();
    auto r = TenKernels({x});
    benchmark::DoNotOptimize(r);
  }
  state.counters["us_per_kernel"] = benchmark::Counter(
      state.iterations() * kKernels, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_NoJit10Kernels)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace kiln
