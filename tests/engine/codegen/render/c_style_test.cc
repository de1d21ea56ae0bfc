// C-style renderers (OpenCL C, CUDA C): text structure per dialect, constants, half/bfloat helpers, division guards,
// launch specials, local memory, no user strings, error paths. Execution is tested in tests/backends/opencl (PoCL)
// and compilation of every conformance kernel as CUDA C by the conformance_nvrtc CTest.
#include "engine/codegen/render/c_style.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/engine/codegen/render/test_programs.h"

namespace kiln::codegen {
namespace {

using namespace kiln::testprog;  // NOLINT

std::string Render(CDialect d, const Program& p) {
  auto src = CStyleRenderer(d).Render(p);
  EXPECT_TRUE(src.ok()) << src.status();
  return src.ok() ? *src : "";
}

bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(CStyleTest, ElementwiseSignatures) {
  const std::string cl = Render(CDialect::kOpenCL, ElementwiseAdd(16));
  EXPECT_TRUE(Has(
      cl,
      "__kernel void E_16(__global float* data0, __global float* data1, __global float* data2) {"))
      << cl;
  EXPECT_TRUE(Has(cl, "for (int v")) << cl;
  const std::string cu = Render(CDialect::kCuda, ElementwiseAdd(16));
  EXPECT_TRUE(
      Has(cu,
          "extern \"C\" __global__ void __launch_bounds__(1) E_16(float* data0, float* data1, "
          "float* data2) {"))
      << cu;
  EXPECT_FALSE(Has(cu, "__global float")) << cu;
  EXPECT_EQ(CudaRenderer().name(), "cuda");
  EXPECT_EQ(OpenClRenderer().name(), "opencl");
  EXPECT_TRUE(OpenClRenderer().caps().has_local);
  EXPECT_FALSE(CudaRenderer().caps().has_threads);
}

TEST(CStyleTest, ReductionUsesAPrivateAccumulator) {
  const std::string cl = Render(CDialect::kOpenCL, RowSum(4, 8));
  EXPECT_TRUE(Has(cl, "float acc")) << cl;
  EXPECT_EQ(cl.find("__local"), std::string::npos) << cl;
}

// SPECIALs map to the dialect's work-group / work-item indices; locals and barriers likewise.
TEST(CStyleTest, LaunchSpecialsLocalMemoryAndBarrier) {
  UOpPtr out = Param(0, dtypes::kFloat32);
  UOpPtr g = UOp::Make(Op::SPECIAL, dtypes::kInt32, {I32(8)}, Arg(std::string("gidx0")));
  UOpPtr l = UOp::Make(Op::SPECIAL, dtypes::kInt32, {I32(4)}, Arg(std::string("lidx1")));
  UOpPtr tmp =
      UOp::Make(Op::DEFINE_LOCAL, dtypes::kFloat32.Ptr(AddrSpace::kLocal), {}, Arg(int64_t{4}));
  UOpPtr st = Store(Index(tmp, l), CastTo(g, dtypes::kFloat32));
  UOpPtr bar = UOp::Make(Op::BARRIER, dtypes::kVoid, {st});
  UOpPtr v = Load(Index(UOp::Make(Op::AFTER, tmp->dtype(), {tmp, bar}), I32(0)));
  UOpPtr fin = Store(Index(out, Alu(Op::ADD, {Alu(Op::MUL, {g, I32(4)}), l})), v);
  Program p = FromRoots("r_8_4", {fin}, {Buf(0, dtypes::kFloat32, 32, true)});
  p.global_size[0] = 8;
  p.local_size[1] = 4;
  // BARRIER must come after the local store: order the list by hand (FromRoots is a toposort, which keeps it).
  const std::string cl = Render(CDialect::kOpenCL, p);
  EXPECT_TRUE(Has(cl, "(int)get_group_id(0)")) << cl;
  EXPECT_TRUE(Has(cl, "(int)get_local_id(1)")) << cl;
  EXPECT_TRUE(Has(cl, "__local float temp")) << cl;
  EXPECT_TRUE(Has(cl, "barrier(CLK_LOCAL_MEM_FENCE);")) << cl;
  const std::string cu = Render(CDialect::kCuda, p);
  EXPECT_TRUE(Has(cu, "(int)blockIdx.x")) << cu;
  EXPECT_TRUE(Has(cu, "(int)threadIdx.y")) << cu;
  EXPECT_TRUE(Has(cu, "__shared__ float temp")) << cu;
  EXPECT_TRUE(Has(cu, "__syncthreads();")) << cu;
  EXPECT_TRUE(Has(cu, "__launch_bounds__(4)")) << cu;
  EXPECT_LT(cu.find("__syncthreads"), cu.rfind("= *")) << "the barrier precedes the local read";
}

TEST(CStyleTest, HalfAndBFloat16GoThroughBitHelpers) {
  for (DType d : {dtypes::kFloat16, dtypes::kBFloat16}) {
    UOpPtr a = Param(1, d), out = Param(0, d);
    UOpPtr r = Range(I32(8), 0);
    UOpPtr x = Load(Index(a, r));
    UOpPtr st = Store(Index(out, r), Alu(Op::MUL, {x, UOp::Const(d, 1.5)}));
    Program p = FromRoots("E_8", {End({st, r})}, {Buf(0, d, 8, true), Buf(1, d, 8, false)});
    for (CDialect dl : {CDialect::kOpenCL, CDialect::kCuda}) {
      const std::string s = Render(dl, p);
      const bool half = d == dtypes::kFloat16;
      EXPECT_TRUE(Has(s, half ? "kiln_h2f(*" : "kiln_b2f(*")) << s;
      EXPECT_TRUE(Has(s, half ? "kiln_f2h(" : "kiln_f2b(")) << s;
      EXPECT_TRUE(Has(s, half ? "kiln_rh(" : "kiln_rb(")) << "ALU results round back to 16 bits\n"
                                                          << s;
      EXPECT_TRUE(
          Has(s, dl == CDialect::kOpenCL ? "__global ushort* data0" : "unsigned short* data0"))
          << s;
      EXPECT_TRUE(Has(s, "(0x1.8p+0f)")) << "1.5 as an exact hex float\n" << s;
    }
  }
}

TEST(CStyleTest, ConstantsAreBitExact) {
  UOpPtr out = Param(0, dtypes::kFloat32);
  UOpPtr inf = UOp::Const(dtypes::kFloat32, std::numeric_limits<double>::infinity());
  UOpPtr nan = UOp::Const(dtypes::kFloat32, std::numeric_limits<double>::quiet_NaN());
  UOpPtr st = Store(Index(out, I32(0)), Alu(Op::ADD, {inf, nan}));
  Program p = FromRoots("E_1", {st}, {Buf(0, dtypes::kFloat32, 1, true)});
  const std::string cl = Render(CDialect::kOpenCL, p);
  EXPECT_TRUE(Has(cl, "as_float((uint)(0x7F800000u))")) << cl;
  EXPECT_TRUE(Has(cl, "as_float((uint)(0x7FC00000u))")) << cl;
  const std::string cu = Render(CDialect::kCuda, p);
  EXPECT_TRUE(Has(cu, "__uint_as_float((unsigned int)(0x7F800000u))")) << cu;
}

// Integer division by a value that may be 0 is guarded; by a non-zero constant it is not.
TEST(CStyleTest, IntegerDivisionIsGuarded) {
  UOpPtr out = Param(0, dtypes::kInt32), a = Param(1, dtypes::kInt32), b = Param(2, dtypes::kInt32);
  UOpPtr x = Load(Index(a, I32(0))), y = Load(Index(b, I32(0)));
  UOpPtr st =
      Store(Index(out, I32(0)), Alu(Op::ADD, {Alu(Op::CDIV, {x, y}), Alu(Op::CMOD, {x, I32(3)})}));
  Program p = FromRoots("E_1", {st},
                        {Buf(0, dtypes::kInt32, 1, true), Buf(1, dtypes::kInt32, 1, false),
                         Buf(2, dtypes::kInt32, 1, false)});
  const std::string cl = Render(CDialect::kOpenCL, p);
  EXPECT_TRUE(Has(cl, " == 0 ? (int)0 : ")) << cl;
  EXPECT_TRUE(Has(cl, " == (int)-1 ? ")) << "INT_MIN / -1 wraps instead of trapping\n" << cl;
  EXPECT_TRUE(Has(cl, "((int)(v")) << cl;
  EXPECT_TRUE(Has(cl, " % ((int)0x3u)))")) << "a non-zero constant divisor needs no guard\n" << cl;
}

TEST(CStyleTest, VariablesAreGeneratedNamesNotUserStrings) {
  UOpPtr out = Param(0, dtypes::kFloat32);
  UOpPtr n =
      UOp::Make(Op::DEFINE_VAR, dtypes::kInt32, {}, Arg(VarArg{"user_batch; evil()", 1, 64}));
  UOpPtr r = Range(n, 0);
  UOpPtr st = Store(Index(out, r), F32(1.0));
  Program p = FromRoots("E_n", {End({st, r})}, {Buf(0, dtypes::kFloat32, 64, true)});
  p.vars = {n};
  for (CDialect d : {CDialect::kOpenCL, CDialect::kCuda}) {
    const std::string s = Render(d, p);
    EXPECT_FALSE(Has(s, "user_batch")) << s;
    EXPECT_FALSE(Has(s, "evil")) << s;
    EXPECT_TRUE(Has(s, d == CDialect::kOpenCL ? "long var0" : "long long var0")) << s;
  }
}

TEST(CStyleTest, ErrorPaths) {
  Program bad = ElementwiseAdd(4);
  bad.name = "E_4(){}; void x";
  EXPECT_EQ(OpenClRenderer().Render(bad).status().code(), absl::StatusCode::kInvalidArgument);
  Program core = ElementwiseAdd(4);
  core.uops.insert(core.uops.begin(), CoreId(4));
  EXPECT_EQ(CudaRenderer().Render(core).status().code(), absl::StatusCode::kUnimplemented);
  Program open = ElementwiseAdd(4);
  open.uops.pop_back();  // drop the END
  EXPECT_EQ(OpenClRenderer().Render(open).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::codegen
