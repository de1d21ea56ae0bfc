// Conformance: the same lowered programs on CPU (LLVM) and INTERP must produce identical bytes (the programs fix the
// order of every float operation, so even sums agree bit for bit). The LLVM renderer runs with fp_contract off here:
// FMA fusion (on in production) rounds once where the interpreter rounds twice. Built only when the CPU backend is.
#include <limits>
#include <memory>

#include "backends/cpu/cpu_device.h"
#include "engine/base/env.h"
#include "engine/codegen/render/llvm_ir.h"
#include "gtest/gtest.h"
#include "tests/backends/interp/kernel_builders.h"

namespace kiln {
namespace {

using namespace kiln::testing;  // NOLINT

absl::Status RunOn(runtime::Device& dev, const codegen::Renderer& renderer, const codegen::Program& p,
                   std::vector<std::vector<uint8_t>>& bufs) {
  KILN_ASSIGN_OR_RETURN(std::string src, renderer.Render(p));
  KILN_ASSIGN_OR_RETURN(std::string bin, dev.compiler().Compile(src, p.name));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Program> prog, dev.Load(bin, p.name));
  std::vector<runtime::DeviceMemory> mem;
  for (const auto& b : bufs) {
    KILN_ASSIGN_OR_RETURN(runtime::DeviceMemory m, dev.allocator().Alloc(b.size()));
    KILN_RETURN_IF_ERROR(dev.allocator().CopyIn(m, b.data(), b.size()));
    mem.push_back(m);
  }
  runtime::LaunchDims dims;
  dims.threads = p.threads;
  absl::StatusOr<double> r = prog->Launch(mem, {}, dims, false);
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (r.ok()) KILN_RETURN_IF_ERROR(dev.allocator().CopyOut(bufs[i].data(), mem[i], bufs[i].size()));
    dev.allocator().Free(mem[i]);
  }
  return r.status();
}

struct Case {
  const char* what;
  UOpPtr ast;
  std::vector<std::vector<uint8_t>> bufs;
};

std::vector<float> Pattern(size_t n, int mod, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (static_cast<float>((i * 7919) % mod) - mod / 2.0f) * scale;
  return v;
}

std::vector<Case> Cases() {
  std::vector<Case> c;
  c.push_back({"add", AddKernel(64, 48), {Bytes(std::vector<float>(64 * 48)), Bytes(Pattern(64 * 48, 97, 0.37f)),
                                          Bytes(Pattern(64 * 48, 89, 1.1f))}});
  c.push_back({"broadcast", BroadcastKernel(32, 24), {Bytes(std::vector<float>(32 * 24)), Bytes(Pattern(32 * 24, 31, 0.3f)),
                                                      Bytes(Pattern(24, 13, 0.7f))}});
  c.push_back({"sum", ReduceKernel(Op::ADD, 48, 96), {Bytes(std::vector<float>(48)), Bytes(Pattern(48 * 96, 101, 0.013f))}});
  // Big enough (2^18 multiply-adds) for the heuristic's vector-accumulator split (ACC) with threads on.
  c.push_back({"long sum (ACC lanes)", ReduceKernel(Op::ADD, 512, 512),
               {Bytes(std::vector<float>(512)), Bytes(Pattern(512 * 512, 1009, 0.013f))}});
  c.push_back({"long max (ACC lanes)", ReduceKernel(Op::MAX, 512, 512),
               {Bytes(std::vector<float>(512)), Bytes(Pattern(512 * 512, 1013, -0.25f))}});
  c.push_back({"max", ReduceKernel(Op::MAX, 24, 20), {Bytes(std::vector<float>(24)), Bytes(Pattern(24 * 20, 53, -0.25f))}});
  c.push_back({"matmul", MatmulKernel(32, 64, 48), {Bytes(std::vector<float>(32 * 64)), Bytes(Pattern(32 * 48, 41, 0.11f)),
                                                    Bytes(Pattern(48 * 64, 37, 0.09f))}});
  c.push_back({"tiled matmul",
               MatmulKernel(64, 64, 64),
               {Bytes(std::vector<float>(64 * 64)), Bytes(Pattern(64 * 64, 43, 0.07f)),
                Bytes(Pattern(64 * 64, 47, 0.05f))}});
  c.push_back({"big add (threads)", AddKernel(512, 512),
               {Bytes(std::vector<float>(512 * 512)), Bytes(Pattern(512 * 512, 1013, 0.5f)),
                Bytes(Pattern(512 * 512, 997, 0.25f))}});
  c.push_back({"pad", PadKernel(), {Bytes(std::vector<float>(12)), Bytes(Pattern(8, 11, 1.5f))}});
  std::vector<int32_t> a = {7, -7, 5, 0, INT32_MIN, INT32_MIN, 9, -9, 100, -100, 3, 1};
  std::vector<int32_t> b = {2, 2, 0, 0, -1, 0, -4, 4, 7, -1, 3, 0};
  c.push_back({"int div", IntDivKernel(12), {Bytes(std::vector<int32_t>(12)), Bytes(std::vector<int32_t>(12)), Bytes(a),
                                             Bytes(b)}});
  c.push_back({"two reduces", TwoReduceKernel(), {Bytes(std::vector<float>(6)), Bytes(Pattern(48, 17, 0.5f))}});
  c.push_back({"full reduce", FullReduceKernel(40), {Bytes(std::vector<float>(1)), Bytes(std::vector<float>(40)),
                                                      Bytes(Pattern(40, 23, 0.3f))}});
  return c;
}

class InterpVsCpuTest : public ::testing::TestWithParam<int> {};

TEST_P(InterpVsCpuTest, SameBytes) {
  absl::StatusOr<std::unique_ptr<backends::CpuDevice>> cpu = backends::CpuDevice::Create();
  if (!cpu.ok()) GTEST_SKIP() << "no LLVM JIT for this host: " << cpu.status();
  backends::InterpDevice interp;
  codegen::LlvmIrRenderer llvm(/*fp_contract=*/false);
  codegen::InterpTextRenderer text;
  const int mode = GetParam();  // 0 NOOPT, 1 heuristic, 2 heuristic with threads
  codegen::Target t;
  t.has_threads = mode == 2;
  t.max_threads = mode == 2 ? 8 : 1;
  t.supports_vectors = mode != 0;  // as the CPU backend's target: "vectorize loads" on
  Context ctx({{Knob::kNoOpt, mode == 0 ? 1 : 0}});
  for (Case& c : Cases()) {
    absl::StatusOr<codegen::Program> p = codegen::LowerKernel(c.ast, t, {});
    ASSERT_TRUE(p.ok()) << c.what << ": " << p.status();
    std::vector<std::vector<uint8_t>> on_cpu = c.bufs, on_interp = c.bufs;
    absl::Status s1 = RunOn(**cpu, llvm, *p, on_cpu);
    ASSERT_TRUE(s1.ok()) << c.what << " on CPU: " << s1;
    absl::Status s2 = RunOn(interp, text, *p, on_interp);
    ASSERT_TRUE(s2.ok()) << c.what << " on INTERP: " << s2;
    for (size_t i = 0; i < on_cpu.size(); ++i) EXPECT_EQ(on_cpu[i], on_interp[i]) << c.what << " buffer " << i << " " << p->name;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, InterpVsCpuTest, ::testing::Values(0, 1, 2));

// "vectorize loads" (Target::supports_vectors, as the CPU backend's target has): a 2x2 max pool's window rows become
// vector loads whose lanes the outputs take at stride 2. The vectorized program on the CPU must give the bytes of the
// scalar program (the pass off) on INTERP, ties, signed zeros and NaN included.
TEST(InterpVsCpuVectorLoadsTest, MaxPoolMatchesScalarProgram) {
  absl::StatusOr<std::unique_ptr<backends::CpuDevice>> cpu = backends::CpuDevice::Create();
  if (!cpu.ok()) GTEST_SKIP() << "no LLVM JIT for this host: " << cpu.status();
  backends::InterpDevice interp;
  codegen::LlvmIrRenderer llvm(/*fp_contract=*/false);
  codegen::InterpTextRenderer text;
  for (int64_t w : {20, 6}) {
    const int64_t n = 48, h = 8;
    const UOpPtr ast = MaxPoolKernel(n, h, w);
    codegen::Target scalar;
    scalar.has_threads = true;
    scalar.max_threads = 2;
    codegen::Target vec = scalar;
    vec.supports_vectors = true;
    absl::StatusOr<codegen::Program> pv = codegen::LowerKernel(ast, vec, {});
    absl::StatusOr<codegen::Program> ps = codegen::LowerKernel(ast, scalar, {});
    ASSERT_TRUE(pv.ok()) << pv.status();
    ASSERT_TRUE(ps.ok()) << ps.status();
    int vector_loads = 0, geps = 0;
    for (const UOpPtr& u : pv->uops) {
      vector_loads += u->op() == Op::LOAD && u->dtype().count > 1;
      geps += u->op() == Op::GEP;
    }
    EXPECT_GT(vector_loads, 0) << pv->name;
    EXPECT_EQ(geps, 4 * (w / 2)) << pv->name;  // every window element of one output row
    for (const UOpPtr& u : ps->uops)
      EXPECT_FALSE(u->op() == Op::LOAD && u->dtype().count > 1) << ps->name;
    std::vector<float> in = Pattern(n * h * w, 7, 0.5f);  // many ties
    in[0] = -0.0f;
    in[1] = 0.0f;
    in[w] = -0.0f;
    in[w + 1] = -0.0f;
    in[3 * w + 2] = std::numeric_limits<float>::quiet_NaN();
    std::vector<std::vector<uint8_t>> on_cpu = {Bytes(std::vector<float>(n * h * w / 4)),
                                                Bytes(in)};
    std::vector<std::vector<uint8_t>> on_interp = on_cpu;
    absl::Status s1 = RunOn(**cpu, llvm, *pv, on_cpu);
    ASSERT_TRUE(s1.ok()) << s1;
    absl::Status s2 = RunOn(interp, text, *ps, on_interp);
    ASSERT_TRUE(s2.ok()) << s2;
    EXPECT_EQ(on_cpu[0], on_interp[0]) << pv->name;
  }
}

}  // namespace
}  // namespace kiln
