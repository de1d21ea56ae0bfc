// kiln matmul throughput on one device, for tests/gpu/run_gpu_checks.sh:
//
//   gpu_matmul_bench [--device CUDA] [--n 4096] [--dtype float32|float16] [--iters 5] [--check sample|all]
//
// Multiplies two random n x n matrices (fresh input buffers every iteration, so the realize memo never answers),
// times the matmul kernel by the device's own timer (LastRealizeStats launch seconds: CUDA events, CL profiling), and
// prints one line `RESULT matmul <dtype> n=<n> best_ms=<ms> tflops=<x>`. float16 inputs accumulate in float32.
// Checks 32 sampled entries of the result against a float64 dot product on the host and exits 1 on a mismatch
// (relative 2e-2 for float16 inputs, 1e-3 for float32), so a fast wrong kernel never reports a number. `--check all`
// compares every entry instead (for the tensor-core correctness check at a smaller n). TC=0 in the environment turns
// tensor cores off (float16 on CUDA uses them by default); DEBUG=3 prints the applied opts (TC(...) first when used).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/realize/realize.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/tensor.h"

int main(int argc, char** argv) {
  std::string device = "CUDA", dtype = "float32";
  int64_t n = 4096;
  int iters = 5;
  bool check_all = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--device")
      device = v;
    else if (a == "--n")
      n = std::atoll(v.c_str());
    else if (a == "--dtype")
      dtype = v;
    else if (a == "--iters")
      iters = std::atoi(v.c_str());
    else if (a == "--check" && (v == "all" || v == "sample"))
      check_all = v == "all";
    else {
      std::fprintf(stderr, "usage: %s [--device D] [--n N] [--dtype float32|float16] [--iters K]\n",
                   argv[0]);
      return 2;
    }
  }
  if (n <= 0 || iters <= 0 || (dtype != "float32" && dtype != "float16")) return 2;
  kiln::backends::RegisterAllBackends();
  if (auto d = kiln::runtime::GetDevice(device); !d.ok()) {
    std::fprintf(stderr, "device %s: %s\n", device.c_str(),
                 std::string(d.status().message()).c_str());
    return 1;
  }
  const kiln::DType dt = dtype == "float16" ? kiln::dtypes::kFloat16 : kiln::dtypes::kFloat32;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(n * n), b(n * n);
  double best = 1e30;
  std::vector<float> c;
  for (int it = 0; it < iters; ++it) {
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    if (dt == kiln::dtypes::kFloat16) {  // the values the device sees
      for (float& x : a) x = static_cast<float>(static_cast<_Float16>(x));
      for (float& x : b) x = static_cast<float>(static_cast<_Float16>(x));
    }
    kiln::Tensor ta = kiln::Tensor::FromVector<float>(a, {n, n}, device).Cast(dt);
    kiln::Tensor tb = kiln::Tensor::FromVector<float>(b, {n, n}, device).Cast(dt);
    if (!ta.Realize().ok() || !tb.Realize().ok()) return 1;
    kiln::Tensor tc = ta.Matmul(tb, kiln::dtypes::kFloat32);
    if (absl::Status st = tc.Realize(); !st.ok()) {
      std::fprintf(stderr, "matmul: %s\n", std::string(st.message()).c_str());
      return 1;
    }
    double secs = 0;
    for (const kiln::KernelLaunch& l : kiln::LastRealizeStats().launches) secs += l.seconds;
    if (secs > 0 && secs < best) best = secs;
    if (it == iters - 1) {
      auto v = tc.Cast(kiln::dtypes::kFloat32).ToVector<float>();
      if (!v.ok()) return 1;
      c = *v;
    }
  }
  const double tol = dt == kiln::dtypes::kFloat16 ? 2e-2 : 1e-3;
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  int bad = 0;
  const int64_t checks = check_all ? n * n : 32;
  for (int64_t s = 0; s < checks; ++s) {
    const int64_t i = check_all ? s / n : pick(rng), j = check_all ? s % n : pick(rng);
    double want = 0, mag = 0;
    for (int64_t k = 0; k < n; ++k) {
      want += static_cast<double>(a[i * n + k]) * b[k * n + j];
      mag += std::abs(static_cast<double>(a[i * n + k]) * b[k * n + j]);
    }
    if (std::abs(c[i * n + j] - want) > tol * mag) {
      std::fprintf(stderr, "MISMATCH matmul %s C[%lld,%lld] = %g, want %g\n", dtype.c_str(),
                   static_cast<long long>(i), static_cast<long long>(j), c[i * n + j], want);
      if (++bad >= 20) break;
    }
  }
  const double tflops = best < 1e30 ? 2.0 * n * n * n / best * 1e-12 : 0.0;
  std::printf("RESULT matmul %s n=%lld best_ms=%.3f tflops=%.2f checked=%lld\n", dtype.c_str(),
              static_cast<long long>(n), best * 1e3, tflops, static_cast<long long>(checks));
  return bad == 0 ? 0 : 1;
}
