// llvm renderer: text structure, constants, no user strings, error paths. (Execution is tested in tests/backends/cpu.)
#include "engine/codegen/render/llvm_ir.h"

#include <cstring>

#include <cmath>
#include <limits>

#include "engine/codegen/render/llvm_ir_emitter.h"
#include "gtest/gtest.h"
#include "tests/engine/codegen/render/test_programs.h"

namespace kiln::codegen {
namespace {

using namespace kiln::testprog;  // NOLINT

TEST(LlvmIrTest, ElementwiseSignatureAndTrampoline) {
  auto src = LlvmIrRenderer().Render(ElementwiseAdd(16));
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_NE(src->find("define internal void @E_16(ptr noalias align 32 %buf0, ptr noalias align 32 %buf1, "
                      "ptr noalias align 32 %buf2, i32 %core_id)"),
            std::string::npos)
      << *src;
  EXPECT_NE(src->find("define void @E_16.entry(ptr %bufs, ptr %vars, i32 %core_id)"), std::string::npos);
  EXPECT_NE(src->find("@E_16.info = constant [2 x i32] [i32 3, i32 0]"), std::string::npos);
  EXPECT_NE(src->find("fadd contract float"), std::string::npos);
  EXPECT_NE(src->find("phi i32"), std::string::npos);
  EXPECT_EQ(src->find("fast"), std::string::npos);
}

TEST(LlvmIrTest, LargeElementwiseOutputsUseStreamingStores) {
  auto small = LlvmIrRenderer().Render(ElementwiseAdd(16));
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->find("nontemporal"), std::string::npos);
  auto big = LlvmIrRenderer().Render(ElementwiseAdd(int64_t{1} << 22));  // 16 MiB of float32 output
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_NE(big->find("store float %"), std::string::npos) << *big;
  EXPECT_NE(big->find(", !nontemporal !0"), std::string::npos) << *big;
  EXPECT_NE(big->find("!0 = !{i32 1}"), std::string::npos);
}

// A padded copy (loads gated by a window) writes its outputs with plain stores, however large: LLVM stores the lanes
// it knows are 0 with 8-byte streaming stores and the loaded ones with plain stores into the same cache lines.
TEST(LlvmIrTest, GatedLoadsKeepPlainStores) {
  const int64_t n = int64_t{1} << 22;  // 16 MiB of float32 output, as in LargeElementwiseOutputsUseStreamingStores
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32);
  UOpPtr r = Range(I32(n), 0);
  UOpPtr in_window = Alu(Op::CMPLT, {r, I32(n - 64)});
  UOpPtr v = Load(IndexGated(a, r, in_window));
  UOpPtr e = End({Store(Index(out, r), v), r});
  auto src = LlvmIrRenderer().Render(
      FromRoots("E_padded", {e}, {Buf(0, dtypes::kFloat32, n, true), Buf(1, dtypes::kFloat32, n, false)}));
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_NE(src->find("store float %"), std::string::npos) << *src;
  EXPECT_EQ(src->find("nontemporal"), std::string::npos) << *src;
}

// out[i] = float(a[16 i .. 16 i + 15]) summed, with a as 16-lane vector loads of `d`.
codegen::Program VectorByteRows(DType d) {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, d);
  UOpPtr r = Range(I32(64), 0);
  UOpPtr v = CastTo(Load(IndexVec(a, Alu(Op::MUL, {r, I32(16)}), 16)), dtypes::kFloat32.Vec(16));
  UOpPtr s = UOp::Make(Op::GEP, dtypes::kFloat32, {v}, Arg(std::vector<int64_t>{0}));
  for (int64_t k = 1; k < 16; ++k)
    s = Alu(Op::ADD, {s, UOp::Make(Op::GEP, dtypes::kFloat32, {v}, Arg(std::vector<int64_t>{k}))});
  UOpPtr e = End({Store(Index(out, r), s), r});
  return FromRoots("r_64_16", {e}, {Buf(0, dtypes::kFloat32, 64, true), Buf(1, d, 1024, false)});
}

// Vector loads of one-byte integers (quantized weights) prefetch 2 KiB ahead; float and bool loads do not.
TEST(LlvmIrTest, ByteVectorLoadsPrefetchAhead) {
  for (DType d : {dtypes::kUInt8, dtypes::kInt8}) {
    auto src = LlvmIrRenderer().Render(VectorByteRows(d));
    ASSERT_TRUE(src.ok()) << src.status();
    const size_t pf = src->find("call void @llvm.prefetch.p0(ptr ");
    ASSERT_NE(pf, std::string::npos) << *src;
    EXPECT_NE(src->find(", i64 2048\n"), std::string::npos) << *src;
    EXPECT_LT(pf, src->find("= load <16 x i8>")) << *src;
    EXPECT_NE(src->find("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)"), std::string::npos);
  }
  for (DType d : {dtypes::kFloat32, dtypes::kBool}) {
    auto src = LlvmIrRenderer().Render(VectorByteRows(d));
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_EQ(src->find("llvm.prefetch"), std::string::npos) << *src;
  }
}

// out[i] = the sum of a[i * step .. i * step + lanes - 1], a as one float vector load per step of the loop.
codegen::Program FloatRowsApart(int64_t step, int lanes) {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32);
  UOpPtr r = Range(I32(64), 0);
  UOpPtr v = Load(IndexVec(a, Alu(Op::MUL, {r, I32(step)}), lanes));
  UOpPtr s = UOp::Make(Op::GEP, dtypes::kFloat32, {v}, Arg(std::vector<int64_t>{0}));
  for (int64_t k = 1; k < lanes; ++k)
    s = Alu(Op::ADD, {s, UOp::Make(Op::GEP, dtypes::kFloat32, {v}, Arg(std::vector<int64_t>{k}))});
  UOpPtr e = End({Store(Index(out, r), s), r});
  return FromRoots("r_64_rows", {e}, {Buf(0, dtypes::kFloat32, 64, true), Buf(1, dtypes::kFloat32, 64 * step, false)});
}

// Float vector loads >= 1 KiB apart per loop step (a conv's input rows along its channel loop) prefetch their lines
// 8 steps ahead, one prefetch per 64-byte line; loads closer together are left to the hardware prefetchers.
TEST(LlvmIrTest, FloatVectorLoadsRowsApartPrefetchEightStepsAhead) {
  auto far = LlvmIrRenderer().Render(FloatRowsApart(784, 16));  // 3136 bytes per step: 25088 bytes ahead
  ASSERT_TRUE(far.ok()) << far.status();
  const size_t pf = far->find("call void @llvm.prefetch.p0(ptr ");
  ASSERT_NE(pf, std::string::npos) << *far;
  EXPECT_NE(far->find(", i64 25088\n"), std::string::npos) << *far;
  EXPECT_LT(pf, far->find("= load <16 x float>")) << *far;
  auto two_lines = LlvmIrRenderer().Render(FloatRowsApart(256, 32));  // 1 KiB per step, 128-byte loads
  ASSERT_TRUE(two_lines.ok()) << two_lines.status();
  EXPECT_NE(two_lines->find(", i64 8192\n"), std::string::npos) << *two_lines;
  EXPECT_NE(two_lines->find(", i64 8256\n"), std::string::npos) << *two_lines;
  auto near = LlvmIrRenderer().Render(FloatRowsApart(128, 16));  // 512 bytes per step
  ASSERT_TRUE(near.ok()) << near.status();
  EXPECT_EQ(near->find("llvm.prefetch"), std::string::npos) << *near;
}

// out[r0 * 64 + r1] = a[r1] where m[r0] != 0 (a KV cache's write under a one-hot mask of positions); with
// `ungated`, also an ungated store of 0 to out2[r0].
codegen::Program MaskedRows(bool ungated) {
  UOpPtr out = Param(0, dtypes::kFloat32), m = Param(1, dtypes::kInt32), a = Param(2, dtypes::kFloat32);
  UOpPtr out2 = Param(3, dtypes::kFloat32);
  UOpPtr r0 = Range(I32(8), 0);
  UOpPtr g = Alu(Op::CMPNE, {Load(Index(m, r0)), I32(0)});
  UOpPtr r1 = Range(I32(64), 1);
  UOpPtr st = StoreGated(Index(out, Alu(Op::ADD, {Alu(Op::MUL, {r0, I32(64)}), r1})), Load(Index(a, r1)), g);
  UOpPtr e1 = End({st, r1});
  std::vector<UOpPtr> order{out, m, a, out2, r0, g, r1, st, e1};
  if (ungated) order.push_back(Store(Index(out2, r0), F32(0.0)));
  order.push_back(End({order.back(), r0}));
  codegen::Program p;
  p.name = "E_8_64";
  p.uops = Complete(order);
  p.buffers = {Buf(0, dtypes::kFloat32, 512, true), Buf(1, dtypes::kInt32, 8, false),
               Buf(2, dtypes::kFloat32, 64, false), Buf(3, dtypes::kFloat32, 8, true)};
  return p;
}

// When every store of a kernel is gated by one value computed outside a loop, that loop is entered only where the
// gate holds (its entry test is the loop's own and the gate); one ungated store and nothing is skipped.
TEST(LlvmIrTest, LoopsUnderTheStoresOneGateAreSkippedWhereItIsOff) {
  auto src = LlvmIrRenderer().Render(MaskedRows(false));
  ASSERT_TRUE(src.ok()) << src.status();
  const size_t gate = src->find("= icmp ne i32");
  const size_t both = src->find("= and i1 ");
  ASSERT_NE(gate, std::string::npos) << *src;
  ASSERT_NE(both, std::string::npos) << *src;
  EXPECT_LT(gate, both);
  EXPECT_LT(both, src->find("L1.body:")) << *src;
  EXPECT_EQ(src->find("= and i1 ", both + 1), std::string::npos) << *src;  // the outer loop is not gated
  auto mixed = LlvmIrRenderer().Render(MaskedRows(true));
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->find("= and i1 "), std::string::npos) << *mixed;
}

TEST(LlvmIrTest, DeterministicText) {
  auto a = LlvmIrRenderer().Render(RowSum(4, 8));
  auto b = LlvmIrRenderer().Render(RowSum(4, 8));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, *b);
  EXPECT_NE(a->find("alloca float, i64 1, align 32"), std::string::npos) << *a;
}

TEST(LlvmIrTest, NoUserStrings) {
  UOpPtr out = Param(0, dtypes::kInt32);
  UOpPtr n = UOp::Make(Op::DEFINE_VAR, dtypes::kInt32, {}, Arg(VarArg{"evil\"; call @system", 1, 64}));
  UOpPtr r = Range(n, 0);
  UOpPtr e = End({Store(Index(out, r), r), r});
  auto p = FromRoots("E_n", {e}, {Buf(0, dtypes::kInt32, 64, true)}, {n});
  auto src = LlvmIrRenderer().Render(p);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(src->find("evil"), std::string::npos);
  EXPECT_EQ(src->find("system"), std::string::npos);
  EXPECT_NE(src->find("i32 %var0"), std::string::npos);
}

TEST(LlvmIrTest, RejectsBadKernelName) {
  auto p = ElementwiseAdd(4);
  p.name = "E_4(); declare void @x";
  auto src = LlvmIrRenderer().Render(p);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), absl::StatusCode::kInvalidArgument);
  p.name = "";
  EXPECT_FALSE(LlvmIrRenderer().Render(p).ok());
}

TEST(LlvmIrTest, RejectsIndexDtypeAndMissingVar) {
  UOpPtr out = Param(0, dtypes::kInt32);
  UOpPtr r = Range(UOp::ConstInt(4), 0);  // index dtype: codegen must lower it
  UOpPtr e = End({Store(Index(out, r), CastTo(r, dtypes::kInt32)), r});
  auto src = LlvmIrRenderer().Render(FromRoots("E_4", {e}, {Buf(0, dtypes::kInt32, 4, true)}));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("index dtype"), std::string::npos);

  UOpPtr n = UOp::Make(Op::DEFINE_VAR, dtypes::kInt32, {}, Arg(VarArg{"n", 1, 4}));
  UOpPtr r2 = Range(n, 0);
  UOpPtr e2 = End({Store(Index(out, r2), r2), r2});
  auto src2 = LlvmIrRenderer().Render(FromRoots("E_n", {e2}, {Buf(0, dtypes::kInt32, 4, true)}));  // vars empty
  ASSERT_FALSE(src2.ok());
  EXPECT_NE(src2.status().message().find("DEFINE_VAR"), std::string::npos);
}

TEST(LlvmIrTest, UnclosedRangeIsAnError) {
  UOpPtr out = Param(0, dtypes::kInt32);
  UOpPtr r = Range(I32(4), 0);
  codegen::Program p;
  p.name = "E_4";
  p.uops = {out, r, Index(out, r), Store(Index(out, r), r)};
  EXPECT_FALSE(LlvmIrRenderer().Render(p).ok());
}

TEST(LlvmIrTest, ConstantsBitExact) {
  using llvm_internal::ConstLiteral;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(ConstLiteral(dtypes::kFloat32, Arg(ConstFloat(1.0))), "0x3FF0000000000000");
  EXPECT_EQ(ConstLiteral(dtypes::kFloat32, Arg(ConstFloat(0.1))), "0x3FB99999A0000000");  // (float)0.1
  EXPECT_EQ(ConstLiteral(dtypes::kFloat64, Arg(ConstFloat(0.1))), "0x3FB999999999999A");
  EXPECT_EQ(ConstLiteral(dtypes::kFloat32, Arg(ConstFloat(nan))), "0x7FF8000000000000");
  EXPECT_EQ(ConstLiteral(dtypes::kFloat32, Arg(ConstFloat(inf))), "0x7FF0000000000000");
  EXPECT_EQ(ConstLiteral(dtypes::kFloat64, Arg(ConstFloat(-inf))), "0xFFF0000000000000");
  EXPECT_EQ(ConstLiteral(dtypes::kFloat32, Arg(ConstFloat(-0.0))), "0x8000000000000000");
  EXPECT_EQ(ConstLiteral(dtypes::kFloat16, Arg(ConstFloat(1.0))), "0xH3C00");
  EXPECT_EQ(ConstLiteral(dtypes::kFloat16, Arg(ConstFloat(nan))), "0xH7E00");
  EXPECT_EQ(ConstLiteral(dtypes::kFloat16, Arg(ConstFloat(-inf))), "0xHFC00");
  EXPECT_EQ(ConstLiteral(dtypes::kFloat16, Arg(ConstFloat(65520.0))), "0xH7C00");  // rounds to inf
  EXPECT_EQ(ConstLiteral(dtypes::kBFloat16, Arg(ConstFloat(1.0))), "0xR3F80");
  EXPECT_EQ(ConstLiteral(dtypes::kBFloat16, Arg(ConstFloat(nan))), "0xR7FC0");
  EXPECT_EQ(ConstLiteral(dtypes::kInt32, Arg(int64_t{-5})), "-5");
  EXPECT_EQ(ConstLiteral(dtypes::kUInt32, Arg(int64_t{0xFFFFFFFF})), "-1");  // same bits as i32
  EXPECT_EQ(ConstLiteral(dtypes::kUInt8, Arg(int64_t{200})), "-56");
  EXPECT_EQ(ConstLiteral(dtypes::kBool, Arg(true)), "true");
  EXPECT_EQ(ConstLiteral(dtypes::kFloat32.Vec(2), Arg(ConstFloat(2.0))),
            "<float 0x4000000000000000, float 0x4000000000000000>");
}

TEST(LlvmIrTest, HalfRoundingMatchesFloat16) {
  const double vals[] = {0.0, -0.0, 1.0, 0.1, 1.0 / 3.0, 65504.0, 65519.99, 6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1e-10,
                         -2.5, 1024.5, 2049.0, 2051.0, 1e6};
  for (double v : vals) {
    _Float16 h = static_cast<_Float16>(v);
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    EXPECT_EQ(DoubleToHalfBits(v), bits) << v;
  }
}

TEST(LlvmIrTest, BFloat16Rounding) {
  EXPECT_EQ(DoubleToBFloat16Bits(1.0), 0x3F80);
  EXPECT_EQ(DoubleToBFloat16Bits(1.00390625), 0x3F80);   // tie -> even
  EXPECT_EQ(DoubleToBFloat16Bits(1.01171875), 0x3F82);   // tie -> even (up)
  EXPECT_EQ(DoubleToBFloat16Bits(-3.0e38), 0xFF62);
  EXPECT_EQ(DoubleToBFloat16Bits(3.5e38), 0x7F80);       // overflow -> inf
}

TEST(LlvmIrTest, DivisionIsGuarded) {
  UOpPtr out = Param(0, dtypes::kInt32), a = Param(1, dtypes::kInt32), b = Param(2, dtypes::kInt32);
  UOpPtr r = Range(I32(4), 0);
  UOpPtr d = Alu(Op::CDIV, {Load(Index(a, r)), Load(Index(b, r))});
  UOpPtr e = End({Store(Index(out, r), d), r});
  auto src = LlvmIrRenderer().Render(FromRoots("E_4", {e}, {}));
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_NE(src->find("icmp eq i32"), std::string::npos);
  EXPECT_NE(src->find("select i1"), std::string::npos);
  // A known nonzero constant divisor needs no guard.
  UOpPtr d2 = Alu(Op::CDIV, {Load(Index(a, r)), I32(3)});
  UOpPtr e2 = End({Store(Index(out, r), d2), r});
  auto src2 = LlvmIrRenderer().Render(FromRoots("E_4", {e2}, {}));
  ASSERT_TRUE(src2.ok());
  EXPECT_EQ(src2->find("icmp eq i32"), std::string::npos) << *src2;
}

}  // namespace
}  // namespace kiln::codegen
