// The CPU's integer tensor core (AVX-512 VNNI vpdpbusd, codegen/program.h CpuVnniTensorCores; the TC opt's m1n16k4
// layout in codegen/tc.cc): 8-bit matmul kernels, uint8 x int8 and int8 x uint8 summed in int32, lowered with the
// tensor core declared, are run on INTERP (whose WMMA evaluates the instruction's definition) and, where the host has
// AVX-512 VNNI, compiled and run on the CPU; each output is compared for equality with an int64 triple loop over the
// same inputs. The LLVM IR must call the instruction, and kernels the opt cannot take keep the plain lowering.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/backends/cpu/cpu_test_util.h"
#include "engine/base/env.h"
#include "engine/codegen/codegen.h"
#include "gtest/gtest.h"
#include "tests/backends/interp/kernel_builders.h"
#include "tests/engine/cpu_target.h"

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
  codegen::Target t = test_util::Avx512TwoCoreLlvm();
  t.tensor_cores = codegen::CpuVnniTensorCores();
  return t;
}

bool HostHasVnni() {
  absl::StatusOr<const codegen::Renderer*> r = codegen::RendererFor("llvm");
  return r.ok() && !(*r)->caps().tensor_cores.empty();
}

bool HasWmma(const codegen::Program& p) {
  for (const UOpPtr& u : p.uops)
    if (u->op() == Op::WMMA) return true;
  return false;
}

// Whether some WMMA accumulates onto another WMMA's result (an unrolled pair of k-slices chained on the accumulators
// by "fold wmma accumulators").
bool HasChainedWmma(const codegen::Program& p) {
  for (const UOpPtr& u : p.uops)
    if (u->op() == Op::WMMA && u->src(2)->op() == Op::WMMA) return true;
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

// A block-scaled product (8-bit blocks of 32 along k, each with a float scale per row of a and per column of b, as
// llama.cpp's Q8_0 x Q8_0): out[m, n] = sum_b sa[m, b] * sb[b, n] * float(sum_i a[m, 32b + i] * w(32b + i, n)), w
// packed as [N/16][K/4][4][16] (each tensor-core B operand one 64-byte run). The tensor core takes the inner sum; the
// outer float sum stays a reduce around it, one accumulator per output lane. 8 x 3072 x 576 (SmolLM2's gate and up
// projections at 8 decode slots) ran in 27.5 us on a 2-core Emerald Rapids, 112 us with w row-major [K][N].
struct Blocked {
  DType a, w;
  int64_t M, N, K;  // M == 0: a matrix-vector product
};

UOpPtr BlockScaledMatmul(const Blocked& c) {
  const int64_t nb = c.K / 32;
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, c.a), w = Param(2, c.w), sa = Param(3, dtypes::kFloat32),
         sb = Param(4, dtypes::kFloat32);
  UOpPtr rn = UOp::Range(c.N, 1), rb = UOp::Range(nb, 2, AxisType::kReduce), ri = UOp::Range(32, 3, AxisType::kReduce);
  UOpPtr rm = c.M > 0 ? UOp::Range(c.M, 0) : UOp::ConstInt(0);
  UOpPtr kk = rb * 32 + ri;
  UOpPtr widx = ((rn / 16) * (c.K / 4) + kk / 4) * 64 + (kk % 4) * 16 + rn % 16;
  UOpPtr la = Ld(Idx(a, rm * c.K + rb * 32 + ri)), lw = Ld(Idx(w, widx));
  UOpPtr isum = Red(Op::ADD,
                    UOp::Make(Op::MUL, dtypes::kInt32,
                              {UOp::Make(Op::CAST, dtypes::kInt32, {la}), UOp::Make(Op::CAST, dtypes::kInt32, {lw})}),
                    {ri});
  UOpPtr scale = UOp::Make(Op::MUL, dtypes::kFloat32, {Ld(Idx(sa, rm * nb + rb)), Ld(Idx(sb, rb * c.N + rn))});
  UOpPtr term = UOp::Make(Op::MUL, dtypes::kFloat32, {scale, UOp::Make(Op::CAST, dtypes::kFloat32, {isum})});
  UOpPtr st = St(Idx(out, rm * c.N + rn), Red(Op::ADD, term, {rb}));
  return c.M > 0 ? Kernel({End(st, {rm, rn})}) : Kernel({End(st, {rn})});
}

using Int8BlockTest = CpuTest;

TEST_F(Int8BlockTest, BlockScaledProductTakesTheTensorCoreForItsInnerSum) {
  for (const Blocked& c : {Blocked{dtypes::kInt8, dtypes::kUInt8, 8, 64, 128}, Blocked{dtypes::kUInt8, dtypes::kInt8, 16, 48, 64},
                           Blocked{dtypes::kInt8, dtypes::kUInt8, 0, 96, 256}}) {
    const int64_t M = std::max<int64_t>(1, c.M), nb = c.K / 32;
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> unit(0.01f, 1.f);
    std::vector<uint8_t> a(M * c.K), w(c.K * c.N);
    std::vector<float> sa(M * nb), sb(nb * c.N);
    for (auto& x : a) x = static_cast<uint8_t>(byte(rng));
    for (auto& x : w) x = static_cast<uint8_t>(byte(rng));
    for (auto& x : sa) x = unit(rng);
    for (auto& x : sb) x = unit(rng);
    auto val = [](DType d, uint8_t x) -> int64_t { return d == dtypes::kInt8 ? static_cast<int8_t>(x) : x; };
    std::vector<float> ref(M * c.N);
    std::vector<double> mag(M * c.N);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        float acc = 0;
        for (int64_t b = 0; b < nb; ++b) {
          int64_t s = 0;
          for (int64_t i = 0; i < 32; ++i) {
            const int64_t k = b * 32 + i, wi = ((n / 16) * (c.K / 4) + k / 4) * 64 + (k % 4) * 16 + n % 16;
            s += val(c.a, a[m * c.K + k]) * val(c.w, w[wi]);
          }
          const float term = (sa[m * nb + b] * sb[b * c.N + n]) * static_cast<float>(s);
          acc += term;
          mag[m * c.N + n] += std::abs(static_cast<double>(term));
        }
        ref[m * c.N + n] = acc;
      }
    auto close = [&](const std::vector<float>& got, const char* what) {
      ASSERT_EQ(got.size(), ref.size());
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_LE(std::abs(got[i] - ref[i]), 1e-5 * mag[i] + 1e-6) << what << " element " << i << " M=" << c.M;
    };
    absl::StatusOr<codegen::Program> p = codegen::LowerKernel(BlockScaledMatmul(c), VnniTarget());
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_FALSE(p->applied_opts.empty());
    EXPECT_EQ(p->applied_opts[0], "TC(0,-1)");
    EXPECT_TRUE(HasWmma(*p));
    EXPECT_TRUE(HasChainedWmma(*p));  // the k-slices in pairs (tc.cc), each pair one chain on the int32 accumulators
    std::vector<std::vector<uint8_t>> bufs = {std::vector<uint8_t>(ref.size() * 4), a, w, Bytes(sa), Bytes(sb)};
    absl::Status st = RunOnInterp(*p, bufs);
    ASSERT_TRUE(st.ok()) << st;
    close(As<float>(bufs[0]), "INTERP");
    if (!HostHasVnni()) continue;  // (the CPU run; INTERP above covers the opt everywhere)
    auto out = Make<float>(dtypes::kFloat32, std::vector<float>(ref.size(), -1.f));
    ASSERT_TRUE(Run(*p, {out, Make<uint8_t>(c.a, a), Make<uint8_t>(c.w, w), Make<float>(dtypes::kFloat32, sa),
                         Make<float>(dtypes::kFloat32, sb)},
                    {}, p->threads)
                    .ok());
    close(Read<float>(out), "CPU");
    EXPECT_NE(last_source_.find("vpdpbusd"), std::string::npos);
  }
}

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
