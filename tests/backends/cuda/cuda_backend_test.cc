// CUDA backend: NVRTC compiles rendered kernels without a GPU (skipped without the toolkit), compile errors carry the
// NVRTC log, the registry has "CUDA" exactly when a GPU is visible, and (only on a machine with a GPU) a kernel runs
// and matches the CPU backend. Every conformance kernel is compiled with NVRTC by the conformance_nvrtc CTest.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cuda_api.h"
#include "backends/cuda/cuda_device.h"
#include "backends/interp/alu.h"
#include "backends/interp/interp_backend.h"
#include "backends/null/null_device.h"
#include "engine/runtime/compile_cache.h"
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

// Runs only where a GPU exists: a CUDA graph of two kernels replays, and UpdateBuffers re-points a node
// (cuGraphExecKernelNodeSetParams) without re-recording.
TEST(CudaDevice, GraphReplaysAndUpdatesBuffers) {
  RegisterAllBackends();
  if (CountCudaDevices() == 0) GTEST_SKIP() << "no CUDA GPU";
  auto dev = runtime::GetDevice("CUDA");
  ASSERT_TRUE(dev.ok()) << dev.status();
  runtime::Device& d = **dev;
  const std::string src =
      "extern \"C\" __global__ void add1(float* out, float* in) { int i = threadIdx.x; out[i] = in[i] + 1.0f; }\n";
  auto bin = d.compiler().Compile(src, "add1");
  ASSERT_TRUE(bin.ok()) << bin.status();
  auto prog = d.Load(*bin, "add1");
  ASSERT_TRUE(prog.ok()) << prog.status();
  std::vector<runtime::DeviceMemory> m;
  for (int i = 0; i < 4; ++i) {
    auto b = d.allocator().Alloc(32 * sizeof(float));
    ASSERT_TRUE(b.ok());
    m.push_back(*b);
  }
  std::vector<float> a(32), a2(32), out(32);
  for (int i = 0; i < 32; ++i) a[i] = static_cast<float>(i), a2[i] = 100.0f + i;
  ASSERT_TRUE(d.allocator().CopyIn(m[0], a.data(), 32 * sizeof(float)).ok());
  ASSERT_TRUE(d.allocator().CopyIn(m[3], a2.data(), 32 * sizeof(float)).ok());
  runtime::LaunchDims dims;
  dims.local[0] = 32;
  std::vector<runtime::GraphItem> items(2);
  items[0] = {prog->get(), {m[1], m[0]}, {}, dims};  // m1 = m0 + 1
  items[1] = {prog->get(), {m[2], m[1]}, {}, dims};  // m2 = m1 + 1
  auto g = d.CreateGraph(items);
  ASSERT_TRUE(g.ok()) << g.status();
  for (int rep = 0; rep < 2; ++rep) {
    ASSERT_TRUE((*g)->Launch().ok());
    ASSERT_TRUE(d.Synchronize().ok());
    ASSERT_TRUE(d.allocator().CopyOut(out.data(), m[2], 32 * sizeof(float)).ok());
    for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], a[i] + 2) << i;
  }
  const runtime::DeviceMemory upd[] = {m[1], m[3]};
  ASSERT_TRUE((*g)->UpdateBuffers(0, upd).ok());
  ASSERT_TRUE((*g)->Launch().ok());
  ASSERT_TRUE(d.Synchronize().ok());
  ASSERT_TRUE(d.allocator().CopyOut(out.data(), m[2], 32 * sizeof(float)).ok());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], a2[i] + 2) << i;
  g->reset();
  for (auto& x : m) d.allocator().Free(x);
}

// Tensor cores through the whole engine: a half / bfloat16 Tensor matmul is scheduled, lowered for the CUDA
// renderer's declared tensor cores (the heuristic applies TC first), rendered as CUDA C by the NULL backend (which
// "compiles" to the source) and compiled with NVRTC to PTX and to an sm_80 cubin. The same TC program runs on
// INTERP's emulated warp and must match a float64 matmul of the 16-bit inputs (exact products, as tensor cores
// compute them) to float32 accuracy; the CPU backend's result (this AST rounds each product to the 16-bit dtype)
// matches the same reference within that rounding.
TEST(TensorCores, TensorMatmulTakesTcRendersThroughNullAndMatchesCpu) {
  NeedNvrtc();
  RegisterAllBackends();
  for (DType dt : {dtypes::kFloat16, dtypes::kBFloat16}) {
    std::vector<float> a(64 * 32), b(32 * 48);
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(static_cast<float>(i) * 0.37f);
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(static_cast<float>(i) * 0.11f);
    Tensor x = Tensor::FromVector<float>(a, {64, 32}, "CPU").Cast(dt);
    Tensor w = Tensor::FromVector<float>(b, {32, 48}, "CPU").Cast(dt);
    ASSERT_TRUE(x.Realize().ok() && w.Realize().ok());
    Tensor y = x.Matmul(w, dtypes::kFloat32);
    auto sched = CreateSchedule({y.uop()});
    ASSERT_TRUE(sched.ok()) << sched.status();
    UOpPtr ast;
    for (const ScheduleItem& it : sched->items)
      if (it.kind == ScheduleItem::Kind::kKernel) ast = it.ast;
    ASSERT_NE(ast, nullptr);
    codegen::Target t;
    t.renderer = "cuda";
    t.has_local = true;
    t.max_local_size = 1024;
    t.tensor_cores = (*codegen::RendererFor("cuda"))->caps().tensor_cores;
    ASSERT_FALSE(t.tensor_cores.empty()) << "the CUDA renderer declares no tensor cores";
    auto prog = codegen::LowerKernel(ast, t);
    ASSERT_TRUE(prog.ok()) << prog.status();
    ASSERT_FALSE(prog->applied_opts.empty());
    EXPECT_EQ(prog->applied_opts[0], "TC(0,-1)") << dt.Name();
    NullDevice null_cuda("NULL", "cuda");
    auto ck = runtime::CompileKernel(null_cuda, *prog);
    ASSERT_TRUE(ck.ok()) << ck.status();
    EXPECT_NE(ck->source.find("mma.sync.aligned.m16n8k16"), std::string::npos);
    NvrtcCompiler c("80");
    auto ptx = c.Compile(ck->source, prog->name);
    ASSERT_TRUE(ptx.ok()) << ptx.status() << "\n" << ck->source;
    auto cubin = c.CompileCubin(ck->source, prog->name);
    if (cubin.status().code() != absl::StatusCode::kUnimplemented) { ASSERT_TRUE(cubin.ok()) << cubin.status(); }
    // Run the TC program on INTERP (emulated warps) with the realized inputs; compare with the CPU matmul.
    auto want = y.ToVector<float>();
    ASSERT_TRUE(want.ok()) << want.status();
    InterpDevice interp;
    auto ick = runtime::CompileKernel(interp, *prog);
    ASSERT_TRUE(ick.ok()) << ick.status();
    std::vector<std::vector<uint8_t>> host = {std::vector<uint8_t>(64 * 48 * 4)};
    std::vector<std::vector<float>> vals;
    for (const Tensor* in : {&x, &w}) {
      auto v = in->Cast(dtypes::kFloat32).ToVector<float>();
      ASSERT_TRUE(v.ok());
      vals.push_back(*v);
      std::vector<uint8_t> bytes(v->size() * 2);
      // Re-encode as the 16-bit dtype (the values are exactly representable: they came from it).
      for (size_t i = 0; i < v->size(); ++i) {
        uint32_t bits;
        std::memcpy(&bits, &(*v)[i], 4);
        uint16_t h = dt == dtypes::kBFloat16 ? static_cast<uint16_t>(bits >> 16) : interp::FloatToHalfBits((*v)[i]);
        std::memcpy(&bytes[2 * i], &h, 2);
      }
      host.push_back(std::move(bytes));
    }
    ASSERT_EQ(prog->buffers.size(), 3u);
    std::vector<runtime::DeviceMemory> mem;
    for (auto& h : host) {
      auto m = interp.allocator().Alloc(h.size());
      ASSERT_TRUE(m.ok());
      ASSERT_TRUE(interp.allocator().CopyIn(*m, h.data(), h.size()).ok());
      mem.push_back(*m);
    }
    runtime::LaunchDims dims;
    for (int i = 0; i < 3; ++i) {
      dims.global[i] = prog->global_size[i];
      dims.local[i] = prog->local_size[i];
    }
    ASSERT_TRUE(ick->program->Launch(mem, {}, dims, false).ok());
    std::vector<float> got(64 * 48);
    ASSERT_TRUE(interp.allocator().CopyOut(got.data(), mem[0], got.size() * 4).ok());
    for (auto& m : mem) interp.allocator().Free(m);
    const double ulp = dt == dtypes::kBFloat16 ? 1.0 / 256 : 1.0 / 2048;
    for (int64_t m = 0; m < 64; ++m)
      for (int64_t n = 0; n < 48; ++n) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < 32; ++k) {
          ref += static_cast<double>(vals[0][m * 32 + k]) * vals[1][k * 48 + n];
          mag += std::abs(static_cast<double>(vals[0][m * 32 + k]) * vals[1][k * 48 + n]);
        }
        EXPECT_NEAR(got[m * 48 + n], ref, 1e-5 * (1 + mag)) << dt.Name() << " TC on INTERP at " << m << "," << n;
        EXPECT_NEAR((*want)[m * 48 + n], ref, ulp * mag + 1e-5) << dt.Name() << " CPU at " << m << "," << n;
      }
  }
}

}  // namespace
}  // namespace kiln::backends
