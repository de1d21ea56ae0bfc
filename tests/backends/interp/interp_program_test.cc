// The INTERP oracle's own semantics: exact per-dtype ALU results, bounds checks, malformed programs.
#include <cmath>
#include <limits>

#include "backends/interp/alu.h"
#include "backends/interp/interp_program.h"
#include "gtest/gtest.h"
#include "tests/backends/interp/kernel_builders.h"

namespace kiln {
namespace {

using backends::interp::EvalAlu;
using backends::interp::EvalCast;
using backends::interp::FloatToHalfBits;
using backends::interp::HalfBitsToFloat;
using backends::interp::Lane;
using namespace kiln::testing;  // NOLINT

Lane I(int64_t v) { return Lane{.i = v}; }
Lane F(double v) { return Lane{.f = v}; }
int64_t Bin(Op op, ScalarType s, int64_t a, int64_t b) {
  Lane args[3] = {I(a), I(b), I(0)};
  return EvalAlu(op, s, args).i;
}

TEST(InterpAluTest, IntegerWraparoundAndDivision) {
  constexpr int64_t kMin32 = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(Bin(Op::ADD, ScalarType::kInt32, 2147483647, 1), kMin32);
  EXPECT_EQ(Bin(Op::ADD, ScalarType::kUInt8, 255, 1), 0);
  EXPECT_EQ(Bin(Op::MUL, ScalarType::kInt8, 64, 4), 0);
  EXPECT_EQ(Bin(Op::CDIV, ScalarType::kInt32, -7, 2), -3);
  EXPECT_EQ(Bin(Op::CMOD, ScalarType::kInt32, -7, 2), -1);
  EXPECT_EQ(Bin(Op::FLOORDIV, ScalarType::kInt32, -7, 2), -4);
  EXPECT_EQ(Bin(Op::FLOORMOD, ScalarType::kInt32, -7, 2), 1);
  EXPECT_EQ(Bin(Op::CDIV, ScalarType::kInt32, 5, 0), 0);
  EXPECT_EQ(Bin(Op::CMOD, ScalarType::kInt64, 5, 0), 0);
  EXPECT_EQ(Bin(Op::CDIV, ScalarType::kInt32, kMin32, -1), kMin32);
  EXPECT_EQ(Bin(Op::CDIV, ScalarType::kInt64, std::numeric_limits<int64_t>::min(), -1),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(Bin(Op::CMOD, ScalarType::kInt32, kMin32, -1), 0);
  EXPECT_EQ(Bin(Op::CDIV, ScalarType::kUInt32, 4294967295, 2), 2147483647);
  EXPECT_EQ(Bin(Op::CMPLT, ScalarType::kUInt32, 4294967295, 1), 0);
  EXPECT_EQ(Bin(Op::SHR, ScalarType::kInt32, -8, 1), -4);
  EXPECT_EQ(Bin(Op::SHL, ScalarType::kInt32, 1, 33), 2);  // amount modulo 32
  EXPECT_EQ(Bin(Op::MAX, ScalarType::kUInt8, 200, 100), 200);
}

TEST(InterpAluTest, FloatRoundingPerDType) {
  Lane args[3] = {F(1.0), F(std::ldexp(1.0, -11)), F(0)};
  // half: 1 + 2^-11 ties to even -> 1.0; float32 keeps it.
  EXPECT_EQ(EvalAlu(Op::ADD, ScalarType::kFloat16, args).f, 1.0);
  EXPECT_EQ(EvalAlu(Op::ADD, ScalarType::kFloat32, args).f, 1.0 + std::ldexp(1.0, -11));
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(65520.0f)), INFINITY);
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));
  EXPECT_EQ(EvalCast(ScalarType::kFloat32, ScalarType::kBFloat16, F(1.00390625)).f, 1.0);  // ties to even
  EXPECT_EQ(EvalCast(ScalarType::kFloat32, ScalarType::kInt32, F(NAN)).i, 0);
  EXPECT_EQ(EvalCast(ScalarType::kFloat32, ScalarType::kInt8, F(1000.0)).i, 127);
  EXPECT_EQ(EvalCast(ScalarType::kFloat32, ScalarType::kInt32, F(-2.7)).i, -2);
  EXPECT_EQ(EvalCast(ScalarType::kInt32, ScalarType::kUInt8, I(-1)).i, 255);
  EXPECT_EQ(EvalCast(ScalarType::kInt64, ScalarType::kFloat32, I(16777217)).f, 16777216.0);
  Lane nan_first[3] = {F(NAN), F(1.0), F(0)};
  EXPECT_TRUE(std::isnan(EvalAlu(Op::MAX, ScalarType::kFloat32, nan_first).f));
}

TEST(InterpProgramTest, OutOfBoundsIsAnErrorNotACrash) {
  // out[i] = a[i + 4] for i in [0, 8) with a of 8 elements: reads past the end.
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32);
  UOpPtr r0 = UOp::Range(8, 0);
  UOpPtr ast = Kernel({End(St(Idx(out, r0), Ld(Idx(a, r0 + 4))), {r0})});
  auto p = codegen::LowerKernel(ast, codegen::Target{}, {});
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(8)), Bytes(std::vector<float>(8, 1.0f))};
  absl::Status st = RunOnInterp(*p, bufs);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  EXPECT_NE(st.message().find("LOAD out of bounds"), std::string::npos) << st;
  // Too few buffers.
  std::vector<std::vector<uint8_t>> one = {Bytes(std::vector<float>(8))};
  EXPECT_EQ(RunOnInterp(*p, one).code(), absl::StatusCode::kInvalidArgument);
}

TEST(InterpProgramTest, RejectsMalformedPrograms) {
  codegen::Program p;
  p.name = "E_bad";
  UOpPtr r = UOp::Make(Op::RANGE, dtypes::kInt32, {UOp::Const(dtypes::kInt32, int64_t{4})}, AxisArg{0, AxisType::kLoop});
  p.uops = {r->src(0), r};  // RANGE without END
  EXPECT_EQ(backends::interp::InterpProgram::Create(p).status().code(), absl::StatusCode::kInvalidArgument);
  backends::InterpDevice dev;
  EXPECT_FALSE(dev.Load("not a program", "x").ok());
  EXPECT_FALSE(dev.compiler().Compile("# kiln-interp v1 name=E_1\n%0 = FOO int ()\nroots %0\n", "E_1").ok());
}

}  // namespace
}  // namespace kiln
