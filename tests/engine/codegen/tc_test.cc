// The TC opt (tensor cores): half/bfloat16 matmul kernels lowered with the CUDA m16n8k16 tensor cores declared are
// run on INTERP, whose WMMA emulates the warp's fragment layout (the emulated-TC idea of tinygrad's EMULATE_CUDA),
// and compared with a float64 reference computed here from the same 16-bit inputs and with the same kernel lowered
// without TC; the same programs are rendered as CUDA C and compiled with NVRTC (PTX and, when NVRTC can, a sm_XX
// cubin, so the inline-PTX mma.sync is assembled too). No GPU needed.
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_api.h"
#include "backends/cuda/cuda_device.h"
#include "backends/interp/alu.h"
#include "engine/base/env.h"
#include "engine/codegen/codegen.h"
#include "engine/codegen/render/c_style.h"
#include "gtest/gtest.h"
#include "tests/backends/interp/kernel_builders.h"

namespace kiln {
namespace {

using namespace kiln::testing;  // NOLINT(build/namespaces)
using backends::interp::BF16BitsToFloat;
using backends::interp::FloatToBF16Bits;
using backends::interp::FloatToHalfBits;
using backends::interp::HalfBitsToFloat;

enum class Form { kCastOperands, kCastProduct };

// out[(b*M + m)*N + n] = sum_k a[(b*M + m)*K + k] * b[(b*K + k)*N + n] (batch B), 16-bit inputs, float32 accumulate.
// kCastOperands: MUL(CAST(a), CAST(b)) in float32 and a float32 output. kCastProduct (tinygrad's matmul of halves):
// CAST(MUL(a, b)) and the output cast back to the input dtype.
UOpPtr TcMatmul(DType in, int64_t B, int64_t M, int64_t N, int64_t K, Form form) {
  const DType out_dt = form == Form::kCastOperands ? dtypes::kFloat32 : in;
  UOpPtr out = Param(0, out_dt), a = Param(1, in), b = Param(2, in);
  UOpPtr rb = UOp::Range(B, 0), rm = UOp::Range(M, 1), rn = UOp::Range(N, 2),
         rk = UOp::Range(K, 3, AxisType::kReduce);
  UOpPtr la = Ld(Idx(a, (rb * M + rm) * K + rk)), lb = Ld(Idx(b, (rb * K + rk) * N + rn));
  UOpPtr prod = form == Form::kCastOperands
                    ? UOp::Make(Op::MUL, dtypes::kFloat32,
                                {UOp::Make(Op::CAST, dtypes::kFloat32, {la}),
                                 UOp::Make(Op::CAST, dtypes::kFloat32, {lb})})
                    : UOp::Make(Op::CAST, dtypes::kFloat32, {UOp::Make(Op::MUL, in, {la, lb})});
  UOpPtr acc = Red(Op::ADD, prod, {rk});
  UOpPtr val = form == Form::kCastOperands ? acc : UOp::Make(Op::CAST, in, {acc});
  return Kernel({End(St(Idx(out, (rb * M + rm) * N + rn), val), {rb, rm, rn})});
}

codegen::Target TcTarget() {
  codegen::Target t;
  t.renderer = "cuda";
  t.has_local = true;
  t.max_local_size = 1024;
  t.global_max[0] = (int64_t{1} << 31) - 1;
  t.global_max[1] = t.global_max[2] = 65535;
  t.tensor_cores = codegen::CudaTensorCores();
  return t;
}

uint16_t Bits(DType in, float f) {
  return in == dtypes::kBFloat16 ? FloatToBF16Bits(f) : FloatToHalfBits(f);
}
float Value(DType in, uint16_t b) {
  return in == dtypes::kBFloat16 ? BF16BitsToFloat(b) : HalfBitsToFloat(b);
}

struct Case {
  DType in;
  int64_t B, M, N, K;
  Form form;
};

struct TcRun {
  codegen::Program program;
  std::vector<double> out;
};

class TcTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    a_.resize(c.B * c.M * c.K);
    b_.resize(c.B * c.K * c.N);
    for (auto& x : a_) x = Bits(c.in, dist(rng));
    for (auto& x : b_) x = Bits(c.in, dist(rng));
    // float64 reference from the 16-bit inputs.
    ref_.assign(c.B * c.M * c.N, 0.0);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < c.N; ++n) {
          double s = 0;
          for (int64_t k = 0; k < c.K; ++k) {
            double x = Value(c.in, a_[(b * c.M + m) * c.K + k]),
                   y = Value(c.in, b_[(b * c.K + k) * c.N + n]);
            // kCastProduct rounds each product to the input dtype before the float32 sum (the kernel's semantics
            // without TC); the tensor core multiplies exactly. The tolerance below covers the difference.
            s += x * y;
          }
          ref_[(b * c.M + m) * c.N + n] = s;
        }
  }

  // Lowers for the TC target (or, tc = false, for INTERP's own target: the conformance-checked non-TC path) and runs
  // the program on INTERP.
  absl::StatusOr<TcRun> Lower(const codegen::LowerOptions& opts, bool tc) {
    const Case& c = GetParam();
    TcRun r;
    KILN_ASSIGN_OR_RETURN(r.program,
                          codegen::LowerKernel(TcMatmul(c.in, c.B, c.M, c.N, c.K, c.form),
                                               tc ? TcTarget() : codegen::Target{}, opts));
    const DType out_dt = c.form == Form::kCastOperands ? dtypes::kFloat32 : c.in;
    std::vector<std::vector<uint8_t>> bufs = {
        std::vector<uint8_t>(c.B * c.M * c.N * out_dt.ItemSize()), Bytes(a_), Bytes(b_)};
    KILN_RETURN_IF_ERROR(RunOnInterp(r.program, bufs));
    if (out_dt == dtypes::kFloat32) {
      for (float f : As<float>(bufs[0])) r.out.push_back(f);
    } else {
      for (uint16_t h : As<uint16_t>(bufs[0])) r.out.push_back(Value(c.in, h));
    }
    return r;
  }

  // |x - ref| <= atol + rtol*|ref|: float32 accumulation of K products of values in [-1, 1]; 16-bit outputs are
  // rounded to the input dtype (half: 2^-11, bfloat16: 2^-8 relative).
  void ExpectClose(const std::vector<double>& got, const std::string& what) {
    const Case& c = GetParam();
    const bool out16 = c.form == Form::kCastProduct;
    const double ulp = c.in == dtypes::kBFloat16 ? 1.0 / 256 : 1.0 / 2048;
    const double rtol = out16 ? 2 * ulp : 1e-5;
    // kCastProduct without TC rounds every product to 16 bits: up to K * ulp/2 of absolute drift.
    const double atol = 1e-4 + (c.form == Form::kCastProduct ? c.K * ulp : 0.0);
    ASSERT_EQ(got.size(), ref_.size());
    int bad = 0;
    for (size_t i = 0; i < got.size() && bad < 5; ++i) {
      if (!(std::abs(got[i] - ref_[i]) <= atol + rtol * std::abs(ref_[i]))) {
        ADD_FAILURE() << what << " element " << i << ": got " << got[i] << " want " << ref_[i];
        ++bad;
      }
    }
  }

  std::vector<uint16_t> a_, b_;
  std::vector<double> ref_;
};

bool HasWmma(const codegen::Program& p) {
  for (const UOpPtr& u : p.uops)
    if (u->op() == Op::WMMA) return true;
  return false;
}

TEST_P(TcTest, HeuristicAppliesTcAndMatchesReferenceOnInterp) {
  absl::StatusOr<TcRun> r = Lower({}, true);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(r->program.applied_opts.empty());
  EXPECT_EQ(r->program.applied_opts[0], "TC(0,-1)");
  EXPECT_TRUE(HasWmma(r->program));
  EXPECT_EQ(r->program.local_size[0], 32) << "the warp lane must be lidx0";
  ExpectClose(r->out, "TC heuristic");
}

TEST_P(TcTest, BareTcOptMatchesTheNonTcKernel) {
  codegen::LowerOptions tc_only{.use_explicit_opts = true, .opts = {{codegen::OptOp::kTc, 0, -1}}};
  absl::StatusOr<TcRun> tc = Lower(tc_only, true);
  ASSERT_TRUE(tc.ok()) << tc.status();
  EXPECT_TRUE(HasWmma(tc->program));
  ExpectClose(tc->out, "bare TC");
  // The same kernel without TC (INTERP's own target, no opts) on INTERP.
  absl::StatusOr<TcRun> plain = Lower({.use_explicit_opts = true, .opts = {}}, false);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(HasWmma(plain->program));
  ExpectClose(plain->out, "non-TC");
}

TEST_P(TcTest, TcZeroDisablesItInTheHeuristic) {
  Context knobs({{Knob::kTc, 0}});
  const Case& c = GetParam();
  absl::StatusOr<codegen::Program> p =
      codegen::LowerKernel(TcMatmul(c.in, c.B, c.M, c.N, c.K, c.form), TcTarget());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(HasWmma(*p));
}

// The CUDA C of the TC kernels compiles with NVRTC: PTX (what the CUDA backend loads) and, where this NVRTC can
// produce one, a cubin for sm_<arch> (ptxas inside NVRTC assembles the inline mma.sync). $KILN_NVRTC_ARCH as in the
// conformance_nvrtc test (digits, default 80; mma.m16n8k16 needs 80 or above).
TEST_P(TcTest, CudaSourceCompilesWithNvrtc) {
  if (!backends::cuda::Nvrtc().ok())
    GTEST_SKIP() << "NVRTC not available: " << backends::cuda::Nvrtc().status();
  const char* env = std::getenv("KILN_NVRTC_ARCH");
  const std::string arch = env != nullptr && *env != '\0' ? env : "80";
  const Case& c = GetParam();
  codegen::CudaRenderer renderer;
  backends::NvrtcCompiler nvrtc(arch);
  for (bool heuristic : {true, false}) {
    codegen::LowerOptions o;
    if (!heuristic) o = {.use_explicit_opts = true, .opts = {{codegen::OptOp::kTc, 0, -1}}};
    absl::StatusOr<codegen::Program> p =
        codegen::LowerKernel(TcMatmul(c.in, c.B, c.M, c.N, c.K, c.form), TcTarget(), o);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE(HasWmma(*p));
    absl::StatusOr<std::string> src = renderer.Render(*p);
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_NE(
        src->find(c.in == dtypes::kBFloat16 ? "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
                                            : "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
        std::string::npos);
    absl::StatusOr<std::string> ptx = nvrtc.Compile(*src, p->name);
    ASSERT_TRUE(ptx.ok()) << ptx.status() << "\n" << *src;
    EXPECT_NE(ptx->find("mma.sync.aligned.m16n8k16"), std::string::npos);
    absl::StatusOr<std::string> cubin = nvrtc.CompileCubin(*src, p->name);
    if (cubin.status().code() == absl::StatusCode::kUnimplemented) continue;
    ASSERT_TRUE(cubin.ok()) << cubin.status() << "\n" << *src;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TcTest,
    ::testing::Values(Case{dtypes::kFloat16, 1, 16, 16, 16, Form::kCastOperands},
                      Case{dtypes::kFloat16, 1, 64, 64, 64, Form::kCastOperands},
                      Case{dtypes::kFloat16, 1, 128, 256, 64, Form::kCastOperands},
                      Case{dtypes::kFloat16, 1, 64, 64, 64, Form::kCastProduct},
                      Case{dtypes::kBFloat16, 1, 16, 16, 16, Form::kCastOperands},
                      Case{dtypes::kBFloat16, 1, 64, 64, 64, Form::kCastOperands},
                      Case{dtypes::kBFloat16, 1, 128, 256, 64, Form::kCastProduct},
                      Case{dtypes::kFloat16, 3, 32, 16, 48, Form::kCastOperands}),
    [](const ::testing::TestParamInfo<Case>& i) {
      const Case& c = i.param;
      return std::string(c.in == dtypes::kBFloat16 ? "bf16_" : "f16_") +
             (c.B > 1 ? std::to_string(c.B) + "x" : "") + std::to_string(c.M) + "x" +
             std::to_string(c.N) + "x" + std::to_string(c.K) +
             (c.form == Form::kCastProduct ? "_castprod" : "");
    });

TEST(TcOpt, RefusesWhatItCannotDo) {
  codegen::LowerOptions tc{.use_explicit_opts = true, .opts = {{codegen::OptOp::kTc, 0, -1}}};
  // N = 12 is not a multiple of 8.
  auto p = codegen::LowerKernel(TcMatmul(dtypes::kFloat16, 1, 16, 12, 16, Form::kCastOperands),
                                TcTarget(), tc);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("not multiples"), std::string::npos) << p.status();
  // float32 inputs: no tensor core for them.
  p = codegen::LowerKernel(MatmulKernel(32, 32, 32), TcTarget(), tc);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  // A target without tensor cores.
  codegen::Target no_tc = TcTarget();
  no_tc.tensor_cores.clear();
  p = codegen::LowerKernel(TcMatmul(dtypes::kFloat16, 1, 16, 16, 16, Form::kCastOperands), no_tc,
                           tc);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  // TC after another opt.
  codegen::LowerOptions late{
      .use_explicit_opts = true,
      .opts = {{codegen::OptOp::kUpcast, 0, 2}, {codegen::OptOp::kTc, 0, -1}}};
  p = codegen::LowerKernel(TcMatmul(dtypes::kFloat16, 1, 32, 16, 16, Form::kCastOperands),
                           TcTarget(), late);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln
