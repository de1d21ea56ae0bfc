// Matmul and elementwise add on every executing device kiln has here (CPU, and CL where an OpenCL device exists; CUDA
// on GPU machines), side by side. Each iteration realizes the op on fresh inputs (so the realize memo never answers)
// and reports the device's own kernel time (CUDA events, OpenCL profiling, CPU wall) as manual time; counters give
// GFLOP/s and GB/s. Devices that are absent are skipped with a message.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/realize/realize.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/tensor.h"

namespace kiln {
namespace {

bool HasDevice(benchmark::State& state, const std::string& dev) {
  backends::RegisterAllBackends();
  if (runtime::GetDevice(dev).ok()) return true;
  state.SkipWithError((dev + " device not available").c_str());
  return false;
}

// Realizes `make()` once per iteration; the kernel seconds of that realize are the iteration's time.
template <typename Make>
void Loop(benchmark::State& state, Make make) {
  for (auto _ : state) {
    state.PauseTiming();
    Tensor t = make();
    state.ResumeTiming();
    if (!t.Realize().ok()) {
      state.SkipWithError("realize failed");
      return;
    }
    double secs = 0;
    for (const KernelLaunch& l : LastRealizeStats().launches) secs += l.seconds;
    state.SetIterationTime(secs);
  }
}

void BM_Matmul(benchmark::State& state, const std::string& dev) {
  if (!HasDevice(state, dev)) return;
  const int64_t n = state.range(0);
  std::vector<float> a(n * n), b(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>(i % 17) * 0.1f;
    b[i] = static_cast<float>(i % 13) * 0.1f;
  }
  int salt = 0;
  Loop(state, [&] {
    a[0] = static_cast<float>(++salt);  // fresh contents: a new buffer every iteration
    Tensor ta = Tensor::FromVector(a, {n, n}, dev), tb = Tensor::FromVector(b, {n, n}, dev);
    (void)ta.Realize();
    (void)tb.Realize();
    return ta.Matmul(tb);
  });
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * n * n * n * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_Add(benchmark::State& state, const std::string& dev) {
  if (!HasDevice(state, dev)) return;
  const int64_t n = state.range(0);
  std::vector<float> a(n, 1.5f), b(n, 2.5f);
  Loop(state, [&] {
    Tensor ta = Tensor::FromVector(a, {n}, dev), tb = Tensor::FromVector(b, {n}, dev);
    (void)ta.Realize();
    (void)tb.Realize();
    return ta + tb;
  });
  state.counters["GB/s"] =
      benchmark::Counter(12.0 * n * state.iterations(), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_Matmul, CPU, std::string("CPU"))
    ->Arg(256)
    ->Arg(512)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Matmul, CL, std::string("CL"))
    ->Arg(256)
    ->Arg(512)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Matmul, CUDA, std::string("CUDA"))
    ->Arg(1024)
    ->Arg(4096)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Add, CPU, std::string("CPU"))
    ->Arg(1 << 22)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Add, CL, std::string("CL"))
    ->Arg(1 << 22)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Add, CUDA, std::string("CUDA"))
    ->Arg(1 << 24)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kiln
