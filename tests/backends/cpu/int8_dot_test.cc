// The CPU's integer tensor core (AVX-512 VNNI vpdpbusd, codegen/program.h CpuVnniTensorCores; the TC opt's m1n16k4
// layout in codegen/tc.cc): 8-bit matmul kernels, uint8 x int8 and int8 x uint8 summed in int32, lowered with the
// tensor core declared, are run on INTERP (whose WMMA evaluates the instruction's definition) and, where the host has
// AVX-512 VNNI, compiled and run on the CPU; each output is compared for equality with an int64 triple loop over the
// same inputs. The LLVM IR must call the instruction, and kernels the opt cannot take keep the plain lowering.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/backends/cpu/cpu_test_util.h"
#include "engine/base/env.h"
#include "engine/codegen/codegen.h"
#include "gtest/gtest.h"
#include "tests/backends/interp/kernel_builders.h"

namespace kiln::backends {
namespace {

using namespace kiln::testing;  // NOLINT(build/namespaces)

struct Case {
  DType a, b;          // operand dtypes (one uint8, one int8; or both float32 for the refusal cases)
  int64_t B, M, N, K;  // M == 0: a matrix-vector product (out[b, n], no M axis)
};

// out[(b*M + m)*N + n] = sum_k int32(a[(b*M + m)*K + k]) * int32(b[(b*K + k)*N + n]).
UOpPtr Int8Matmul(const Case& c) {
  UOpPtr out = Param(0, dtypes::kInt32), a = Param(1, c.a), b = Param(2, c.b);
  const int64_t M = std::max<int64_t>(1, c.M);
  UOpPtr rb = UOp::Range(c.B, 0), rn = UOp::Range(c.N, 2), rk = UOp::Range(c.K, 3, AxisType::kReduce);
  UOpPtr row = c.M > 0 ? rb * M + UOp::Range(c.M, 1) : rb;
  UOpPtr la = Ld(Idx(a, row * c.K + rk)), lb = Ld(Idx(b, (rb * c.K + rk) * c.N + rn));
  UOpPtr prod = UOp::Make(Op::MUL, dtypes::kInt32,
                          {UOp::Make(Op::CAST, dtypes::kInt32, {la}), UOp::Make(Op::CAST, dtypes::kInt32, {lb})});
  UOpPtr acc = Red(Op::ADD, prod, {rk});
  if (c.M > 0) return Kernel({End(St(Idx(out, row * c.N + rn), acc), {rb, row->src(1), rn})});
  return Kernel({End(St(Idx(out, rb * c.N + rn), acc), {rb, rn})});
}

codegen::Target VnniTarget() {
  codegen::Target t;
  t.renderer = "llvm";
  t.has_threads = true;
  t.max_threads = 2;
  t.supports_vectors = true;
  t.vector_bytes = 64;
  t.wide_index = true;
  t.tensor_cores = codegen::CpuVnniTensorCores();
  return t;
}

bool HostHasVnni() {
  return codegen::RendererFor("llvm").ok() && !(*codegen::RendererFor("llvm"))->caps().tensor_cores.empty();
}

bool HasWmma(const codegen::Program& p) {
  for (const UOpPtr& u : p.uops)
    if (u->op() == Op::WMMA) return true;
  return false;
}

class Int8DotTest : public CpuTest, public ::testing::WithParamInterface<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    const int64_t M = std::max<int64_t>(1, c.M);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> byte(0, 255);
    a_.resize(c.B * M * c.K);
    b_.resize(c.B * c.K * c.N);
    // Extremes included: 255 x -128 products and long runs of them exercise the exact sums.
    for (auto& x : a_) x = static_cast<uint8_t>(byte(rng));
    for (auto& x : b_) x = static_cast<uint8_t>(byte(rng));
    for (size_t i = 0; i < 16 && i < a_.size(); ++i) a_[i] = c.a == dtypes::kUInt8 ? 255 : 0x80;
    for (size_t i = 0; i < 16 && i < b_.size(); ++i) b_[i] = c.b == dtypes::kUInt8 ? 255 : 0x80;
    auto val = [](DType d, uint8_t x) -> int64_t { return d == dtypes::kInt8 ? static_cast<int8_t>(x) : x; };
    ref_.assign(c.B * M * c.N, 0);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < c.N; ++n) {
          int64_t s = 0;
          for (int64_t k = 0; k < c.K; ++k)
            s += val(c.a, a_[(b * M + m) * c.K + k]) * val(c.b, b_[(b * c.K + k) * c.N + n]);
          ref_[(b * M + m) * c.N + n] = static_cast<int32_t>(s);
        }
  }

  std::vector<int32_t> OnInterp(const codegen::Program& p) {
    std::vector<std::vector<uint8_t>> bufs = {std::vector<uint8_t>(ref_.size() * 4), a_, b_};
    absl::Status st = RunOnInterp(p, bufs);
    EXPECT_TRUE(st.ok()) << st;
    return As<int32_t>(bufs[0]);
  }

  std::vector<uint8_t> a_, b_;
  std::vector<int32_t> ref_;
};

TEST_P(Int8DotTest, HeuristicTakesTheTensorCoreAndMatchesOnInterp) {
  absl::StatusOr<codegen::Program> p = codegen::LowerKernel(Int8Matmul(GetParam()), VnniTarget());
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_FALSE(p->applied_opts.empty());
  EXPECT_EQ(p->applied_opts[0], "TC(0,-1)");
  EXPECT_TRUE(HasWmma(*p));
  EXPECT_EQ(OnInterp(*p), ref_);
  // The accumulators are the instruction's own operand (no add after it), and the IR calls it.
  absl::StatusOr<std::string> ir = codegen::LlvmIrRenderer().Render(*p);
  ASSERT_TRUE(ir.ok()) << ir.status();
  EXPECT_NE(ir->find("@llvm.x86.avx512.vpdpbusd.512"), std::string::npos);
}

TEST_P(Int8DotTest, BareTcOptMatchesTheNonTcKernelOnInterp) {
  codegen::LowerOptions tc_only{.use_explicit_opts = true, .opts = {{codegen::OptOp::kTc, 0, -1}}};
  absl::StatusOr<codegen::Program> tc = codegen::LowerKernel(Int8Matmul(GetParam()), VnniTarget(), tc_only);
  ASSERT_TRUE(tc.ok()) << tc.status();
  EXPECT_TRUE(HasWmma(*tc));
  EXPECT_EQ(OnInterp(*tc), ref_);
  absl::StatusOr<codegen::Program> plain =
      codegen::LowerKernel(Int8Matmul(GetParam()), codegen::Target{}, {.use_explicit_opts = true, .opts = {}});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(HasWmma(*plain));
  EXPECT_EQ(OnInterp(*plain), ref_);
}

TEST_P(Int8DotTest, RunsOnTheCpuWhereTheHostHasVnni) {
  if (!HostHasVnni())
    GTEST_SKIP() << "this host has no AVX-512 VNNI (or kiln compiles below 512 bits): the CPU declares no integer "
                    "tensor core, and the INTERP tests above cover the opt";
  const Case& c = GetParam();
  absl::StatusOr<codegen::Program> p = codegen::LowerKernel(Int8Matmul(c), VnniTarget());
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(HasWmma(*p));
  auto out = Make<int32_t>(dtypes::kInt32, std::vector<int32_t>(ref_.size(), -1));
  auto a = Make<uint8_t>(c.a, a_);
  auto b = Make<uint8_t>(c.b, b_);
  ASSERT_TRUE(Run(*p, {out, a, b}, {}, p->threads).ok());
  EXPECT_EQ(Read<int32_t>(out), ref_);
  EXPECT_NE(last_source_.find("vpdpbusd"), std::string::npos);
}

TEST_P(Int8DotTest, TcZeroKeepsThePlainLowering) {
  Context knobs({{Knob::kTc, 0}});
  absl::StatusOr<codegen::Program> p = codegen::LowerKernel(Int8Matmul(GetParam()), VnniTarget());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(HasWmma(*p));
  EXPECT_EQ(OnInterp(*p), ref_);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Int8DotTest,
    ::testing::Values(Case{dtypes::kUInt8, dtypes::kInt8, 1, 8, 32, 16}, Case{dtypes::kUInt8, dtypes::kInt8, 1, 64, 64, 128},
                      Case{dtypes::kInt8, dtypes::kUInt8, 1, 24, 48, 36}, Case{dtypes::kUInt8, dtypes::kInt8, 3, 4, 16, 8}, Case{dtypes::kUInt8, dtypes::kInt8, 1, 4, 16, 8},
                      Case{dtypes::kUInt8, dtypes::kInt8, 3, 4, 32, 8}, Case{dtypes::kUInt8, dtypes::kInt8, 1, 8, 16, 4},
                      Case{dtypes::kUInt8, dtypes::kInt8, 1, 0, 96, 64}, Case{dtypes::kInt8, dtypes::kUInt8, 2, 0, 32, 1024}),
    [](const ::testing::TestParamInfo<Case>& i) {
      const Case& c = i.param;
      return std::string(c.a == dtypes::kUInt8 ? "u8s8_" : "s8u8_") + (c.B > 1 ? std::to_string(c.B) + "x" : "") +
             (c.M > 0 ? std::to_string(c.M) : std::string("vec")) + "x" + std::to_string(c.N) + "x" +
             std::to_string(c.K);
    });

TEST(Int8Dot, RefusesWhatItCannotDo) {
  codegen::LowerOptions tc{.use_explicit_opts = true, .opts = {{codegen::OptOp::kTc, 0, -1}}};
  // N = 24 is not a multiple of 16, K = 6 not of 4; both int8 (the instruction takes one unsigned operand).
  for (const Case& c : {Case{dtypes::kUInt8, dtypes::kInt8, 1, 8, 24, 16}, Case{dtypes::kUInt8, dtypes::kInt8, 1, 8, 32, 6},
                        Case{dtypes::kInt8, dtypes::kInt8, 1, 8, 32, 16}}) {
    absl::StatusOr<codegen::Program> p = codegen::LowerKernel(Int8Matmul(c), VnniTarget(), tc);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.N << " " << c.K;
    // The heuristic then lowers it without the tensor core.
    p = codegen::LowerKernel(Int8Matmul(c), VnniTarget());
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_FALSE(HasWmma(*p));
  }
}

}  // namespace
}  // namespace kiln::backends
