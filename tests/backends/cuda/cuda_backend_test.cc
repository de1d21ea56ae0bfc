// CUDA backend: NVRTC compiles rendered kernels without a GPU (skipped without the toolkit), compile errors carry the
// NVRTC log, the registry has "CUDA" exactly when a GPU is visible, and (only on a machine with a GPU) a kernel runs
// and matches the CPU backend. Every conformance kernel is compiled with NVRTC by the conformance_nvrtc CTest.
#include <cmath>
#include <string>
#include <vector>

#include "backends/cuda/cuda_api.h"
#include "backends/cuda/cuda_device.h"
#include "backends/register_all.h"
#include "engine/codegen/codegen.h"
#include "engine/codegen/render/renderer.h"
#include "engine/runtime/registry.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln::backends {
namespace {

void NeedNvrtc() {
  if (!cuda::Nvrtc().ok()) GTEST_SKIP() << "NVRTC not available: " << cuda::Nvrtc().status();
}

TEST(Nvrtc, CompilesARenderedKernelWithLocalsAndHalf) {
  NeedNvrtc();
  RegisterAllBackends();
  // A grouped reduce (local memory, barrier, gated store) over float16 input, lowered for a CUDA target.
  Tensor x = Tensor::FromVector<float>(std::vector<float>(16 * 256, 0.5f), {16, 256}, "CPU")
                 .Cast(dtypes::kFloat16);
  ASSERT_TRUE(x.Realize().ok());
  auto sched = CreateSchedule({x.Sum(1).uop()});
  ASSERT_TRUE(sched.ok()) << sched.status();
  UOpPtr ast;
  for (const ScheduleItem& it : sched->items)
    if (it.kind == ScheduleItem::Kind::kKernel) ast = it.ast;
  ASSERT_NE(ast, nullptr);
  codegen::Target t;
  t.renderer = "cuda";
  t.has_local = true;
  t.max_local_size = 1024;
  codegen::LowerOptions lo;
  lo.use_explicit_opts = true;
  lo.opts = {{codegen::OptOp::kLocal, 0, 4}, {codegen::OptOp::kGroupTop, 0, 16}};
  auto prog = codegen::LowerKernel(ast, t, lo);
  ASSERT_TRUE(prog.ok()) << prog.status();
  auto src = (*codegen::RendererFor("cuda"))->Render(*prog);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_NE(src->find("__shared__ float"), std::string::npos) << *src;
  EXPECT_NE(src->find("__syncthreads();"), std::string::npos) << *src;
  EXPECT_NE(src->find("kiln_h2f"), std::string::npos) << *src;
  NvrtcCompiler c("80");
  auto ptx = c.Compile(*src, prog->name);
  ASSERT_TRUE(ptx.ok()) << ptx.status() << "\n" << *src;
  EXPECT_NE(ptx->find(".entry " + prog->name), std::string::npos);
  EXPECT_NE(ptx->find("bar.sync"), std::string::npos);
  EXPECT_EQ(PtxParamCount(*ptx, prog->name), 2) << "two buffers, no vars";
  EXPECT_EQ(PtxParamCount(*ptx, "no_such_kernel"), -1);
}

TEST(Nvrtc, CompileErrorCarriesTheLog) {
  NeedNvrtc();
  NvrtcCompiler c("80");
  auto bin = c.Compile("extern \"C\" __global__ void broken(float* a) { a[0] = undefined_name; }",
                       "broken");
  ASSERT_FALSE(bin.ok());
  EXPECT_EQ(bin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bin.status().message().find("undefined_name"), std::string::npos) << bin.status();
  EXPECT_NE(c.CacheKey().find("compute_80"), std::string::npos) << c.CacheKey();
}

// "CUDA" is registered exactly when the driver sees a GPU; without one, nothing crashes and the kind is absent.
TEST(CudaRegistry, PresentIffAGpuIsVisible) {
  RegisterAllBackends();
  const int gpus = CountCudaDevices();
  EXPECT_EQ(runtime::BackendRegistry::Global().HasKind("CUDA"), gpus > 0);
  if (gpus == 0) {
    EXPECT_FALSE(runtime::GetDevice("CUDA").ok());
    GTEST_SKIP() << "no CUDA GPU here: "
                 << (cuda::Driver().ok() ? "driver loaded, no device" : "no libcuda");
  }
}

// Runs only where a GPU exists (tests/gpu/run_gpu_checks.sh): values and a matmul against the CPU backend.
TEST(CudaDevice, KernelsMatchCpu) {
  RegisterAllBackends();
  if (CountCudaDevices() == 0) GTEST_SKIP() << "no CUDA GPU";
  std::vector<float> a(64 * 48), b(48 * 80);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(static_cast<float>(i) * 0.1f);
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(static_cast<float>(i) * 0.05f);
  auto run = [&](const std::string& d) {
    Tensor r = (Tensor::FromVector<float>(a, {64, 48}, d)
                    .Matmul(Tensor::FromVector<float>(b, {48, 80}, d)) *
                0.5f)
                   .Relu()
                   .Sum(1);
    auto v = r.ToVector<float>();
    EXPECT_TRUE(v.ok()) << d << ": " << v.status();
    return v.ok() ? *v : std::vector<float>{};
  };
  std::vector<float> want = run("CPU"), got = run("CUDA");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::abs(want[i])) << i;
}

}  // namespace
}  // namespace kiln::backends
