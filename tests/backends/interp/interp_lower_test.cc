// End to end: hand-built kernel ASTs -> LowerKernel (NOOPT, heuristic, explicit opts) -> interp text -> INTERP,
// compared with plain C++ loops.
#include <cmath>
#include <limits>
#include <random>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "engine/base/env.h"
#include "tests/backends/interp/kernel_builders.h"

namespace kiln {
namespace {

using codegen::LowerOptions;
using codegen::Opt;
using codegen::OptOp;
using codegen::Program;
using codegen::Target;
using namespace kiln::testing;  // NOLINT

Target Cpu(int threads = 8) {
  Target t;
  t.renderer = "interp";
  t.has_threads = threads > 1;
  t.max_threads = threads;
  return t;
}

LowerOptions Explicit(std::vector<Opt> opts) {
  LowerOptions o;
  o.use_explicit_opts = true;
  o.opts = std::move(opts);
  return o;
}

std::vector<float> Iota(size_t n, float scale = 1.0f, int mod = 7) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>(i * 13 % mod) - mod / 2) * scale;
  return v;
}

std::vector<float> RefMatmul(const std::vector<float>& a, const std::vector<float>& b, int n, int k, int kk) {
  std::vector<float> o(n * k);
  for (int i = 0; i < n; ++i)
    for (int l = 0; l < k; ++l) {
      float s = 0;
      for (int j = 0; j < kk; ++j) s += a[i * kk + j] * b[j * k + l];
      o[i * k + l] = s;
    }
  return o;
}

// ---- tests ----

TEST(InterpLowerTest, ElementwiseAddNoOpt) {
  Context ctx({{Knob::kNoOpt, 1}});
  std::vector<float> a = Iota(64), b = Iota(64, 0.5f, 11);
  std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(64)), Bytes(a), Bytes(b)};
  Program p;
  ASSERT_TRUE(LowerAndRun(AddKernel(4, 16), Cpu(), {}, bufs, &p).ok());
  EXPECT_EQ(p.name, "E_4_16");
  EXPECT_TRUE(p.applied_opts.empty());
  std::vector<float> out = As<float>(bufs[0]);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], a[i] + b[i]) << i;
  ASSERT_EQ(p.buffers.size(), 3u);
  EXPECT_TRUE(p.buffers[0].is_output);
  EXPECT_FALSE(p.buffers[1].is_output);
  EXPECT_EQ(p.buffers[1].size, 64);
  EXPECT_EQ(p.flops, 64);
}

TEST(InterpLowerTest, ElementwiseAddHeuristicMatchesNoOpt) {
  std::vector<float> a = Iota(64), b = Iota(64, 0.5f, 11);
  std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(64)), Bytes(a), Bytes(b)};
  Program p;
  ASSERT_TRUE(LowerAndRun(AddKernel(4, 16), Cpu(), {}, bufs, &p).ok());
  // The 4 x 16 axes are one contiguous walk in every buffer: merged into 64 before the upcast.
  EXPECT_EQ(p.applied_opts, std::vector<std::string>{"UPCAST(0,8)"});
  EXPECT_EQ(p.name, "E_8_8");
  std::vector<float> out = As<float>(bufs[0]);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], a[i] + b[i]) << i;
}

TEST(InterpLowerTest, BroadcastViaIndex) {
  std::vector<float> a = Iota(8 * 12), b = Iota(12, 2.0f, 5);
  for (bool noopt : {true, false}) {
    Context ctx({{Knob::kNoOpt, noopt ? 1 : 0}});
    std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(96)), Bytes(a), Bytes(b)};
    ASSERT_TRUE(LowerAndRun(BroadcastKernel(8, 12), Cpu(), {}, bufs).ok());
    std::vector<float> out = As<float>(bufs[0]);
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 12; ++j) EXPECT_EQ(out[i * 12 + j], a[i * 12 + j] * b[j]) << noopt << " " << i << "," << j;
  }
}

TEST(InterpLowerTest, SumOverAxis) {
  std::vector<float> a = Iota(16 * 32);
  std::vector<float> ref(16);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 32; ++j) ref[i] += a[i * 32 + j];
  for (int noopt : {1, 0}) {
    Context ctx({{Knob::kNoOpt, noopt}});
    std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(16)), Bytes(a)};
    Program p;
    ASSERT_TRUE(LowerAndRun(ReduceKernel(Op::ADD, 16, 32), Cpu(), {}, bufs, &p).ok());
    if (noopt) { EXPECT_EQ(p.name, "r_16_32"); }
    std::vector<float> out = As<float>(bufs[0]);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], ref[i]) << "noopt=" << noopt << " i=" << i;
  }
}

TEST(InterpLowerTest, MaxReduceWithNegatives) {
  std::vector<float> a(10 * 7);
  for (size_t i = 0; i < a.size(); ++i) a[i] = -100.0f - static_cast<float>((i * 37) % 23);
  std::vector<float> ref(10, -std::numeric_limits<float>::infinity());
  for (int i = 0; i < 10; ++i)
    for (int j = 0; j < 7; ++j) ref[i] = std::max(ref[i], a[i * 7 + j]);
  for (int noopt : {1, 0}) {
    Context ctx({{Knob::kNoOpt, noopt}});
    std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(10)), Bytes(a)};
    ASSERT_TRUE(LowerAndRun(ReduceKernel(Op::MAX, 10, 7), Cpu(), {}, bufs).ok());
    std::vector<float> out = As<float>(bufs[0]);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(out[i], ref[i]) << i;
  }
}

TEST(InterpLowerTest, MatmulShapedReduce) {
  const int n = 16, k = 4, kk = 32;
  std::vector<float> a = Iota(n * kk, 1.0f, 9), b = Iota(kk * k, 1.0f, 5);
  std::vector<float> ref = RefMatmul(a, b, n, k, kk);
  Program noopt_p;
  std::vector<float> noopt_out;
  {
    Context ctx({{Knob::kNoOpt, 1}});
    std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(n * k)), Bytes(a), Bytes(b)};
    ASSERT_TRUE(LowerAndRun(MatmulKernel(n, k, kk), Cpu(), {}, bufs, &noopt_p).ok());
    EXPECT_EQ(noopt_p.name, "r_16_4_32");
    noopt_out = As<float>(bufs[0]);
  }
  for (int i = 0; i < n * k; ++i) EXPECT_EQ(noopt_out[i], ref[i]) << i;
  // The heuristic, and explicit register blocking: both output axes upcast, reduce unrolled.
  for (const LowerOptions& o : {LowerOptions{},
                                Explicit({{OptOp::kUpcast, 1, 4}, {OptOp::kUpcast, 0, 2}, {OptOp::kUnroll, 0, 4}})}) {
    std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(n * k)), Bytes(a), Bytes(b)};
    Program p;
    ASSERT_TRUE(LowerAndRun(MatmulKernel(n, k, kk), Cpu(), o, bufs, &p).ok());
    std::vector<float> out = As<float>(bufs[0]);
    for (int i = 0; i < n * k; ++i) EXPECT_EQ(out[i], ref[i]) << p.name << " " << i;  // small ints: exact in any order
  }
}

TEST(InterpLowerTest, ExplicitOptsAreApplied) {
  Program p;
  std::vector<float> a = Iota(16 * 32);
  std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(16)), Bytes(a)};
  ASSERT_TRUE(LowerAndRun(ReduceKernel(Op::ADD, 16, 32), Cpu(), Explicit({{OptOp::kUnroll, 0, 4}, {OptOp::kUpcast, 0, 2}}),
                          bufs, &p)
                  .ok());
  EXPECT_EQ(p.applied_opts, (std::vector<std::string>{"UNROLL(0,4)", "UPCAST(0,2)"}));
  EXPECT_EQ(p.name, "r_8_8_2_4");
  std::vector<float> out = As<float>(bufs[0]);
  for (int i = 0; i < 16; ++i) {
    float s = 0;
    for (int j = 0; j < 32; ++j) s += a[i * 32 + j];
    EXPECT_EQ(out[i], s);
  }
  // Illegal opts are InvalidArgument, never a crash.
  EXPECT_EQ(codegen::LowerKernel(ReduceKernel(Op::ADD, 16, 32), Cpu(), Explicit({{OptOp::kUpcast, 0, 3}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(codegen::LowerKernel(ReduceKernel(Op::ADD, 16, 32), Cpu(), Explicit({{OptOp::kUnroll, 5, 2}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(codegen::LowerKernel(AddKernel(4, 16), Cpu(1), Explicit({{OptOp::kThread, 0, 2}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(codegen::LowerKernel(AddKernel(4, 16), Cpu(), Explicit({{OptOp::kLocal, 0, 2}})).ok());
}

TEST(InterpLowerTest, ThreadsSplitTheOuterAxis) {
  const int n = 512, m = 512;
  std::vector<float> a = Iota(n * m), b = Iota(n * m, 1.0f, 3);
  std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(n * m)), Bytes(a), Bytes(b)};
  Program p;
  ASSERT_TRUE(LowerAndRun(AddKernel(n, m), Cpu(8), {}, bufs, &p).ok());
  EXPECT_EQ(p.threads, 4);  // 262144 ops: 4 of the 8 threads keep >= 64K ops each (kMinOpsPerThread)
  EXPECT_EQ(p.name, "E_4_8192_8");  // 512 x 512 merged into one axis, upcast 8, split over 4 threads
  bool has_core_id = false;
  for (const UOpPtr& u : p.uops) has_core_id |= u->op() == Op::SPECIAL;
  EXPECT_TRUE(has_core_id);
  std::vector<float> out = As<float>(bufs[0]);
  for (int i = 0; i < n * m; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
  // Explicit THREAD on a small kernel.
  std::vector<float> a2 = Iota(64), b2 = Iota(64, 2.0f);
  std::vector<std::vector<uint8_t>> bufs2 = {Bytes(std::vector<float>(64)), Bytes(a2), Bytes(b2)};
  ASSERT_TRUE(LowerAndRun(AddKernel(4, 16), Cpu(4), Explicit({{OptOp::kThread, 0, 4}}), bufs2, &p).ok());
  EXPECT_EQ(p.threads, 4);
  std::vector<float> out2 = As<float>(bufs2[0]);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out2[i], a2[i] + b2[i]) << i;
}

TEST(InterpLowerTest, PaddedGatedLoad) {
  UOpPtr ast = PadKernel();
  std::vector<float> av = Iota(8, 1.0f, 13);
  for (int noopt : {1, 0}) {
    Context ctx({{Knob::kNoOpt, noopt}});
    std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(12)), Bytes(av)};
    Program p;
    ASSERT_TRUE(LowerAndRun(ast, Cpu(), {}, bufs, &p).ok());
    std::vector<float> o = As<float>(bufs[0]);
    for (int i = 0; i < 12; ++i) EXPECT_EQ(o[i], (i >= 2 && i < 10 ? av[i - 2] : 0.0f) + 1.0f) << i;
    for (const UOpPtr& u : p.uops)
      if (u->op() == Op::INDEX) { EXPECT_EQ(u->num_src(), 2u) << "gates move to the LOAD"; }
  }
}

TEST(InterpLowerTest, IntDivisionByZeroIsZero) {
  UOpPtr ast = IntDivKernel(8);
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  std::vector<int32_t> av = {7, -7, 5, 0, kMin, kMin, 9, -9};
  std::vector<int32_t> bv = {2, 2, 0, 0, -1, 0, -4, 4};
  for (int noopt : {1, 0}) {
    Context ctx({{Knob::kNoOpt, noopt}});
    std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<int32_t>(8, 99)), Bytes(std::vector<int32_t>(8, 99)),
                                              Bytes(av), Bytes(bv)};
    Program p;
    ASSERT_TRUE(LowerAndRun(ast, Cpu(), {}, bufs, &p).ok());
    std::vector<int32_t> q = As<int32_t>(bufs[0]), r = As<int32_t>(bufs[1]);
    for (int i = 0; i < 8; ++i) {
      int32_t eq = bv[i] == 0 ? 0 : bv[i] == -1 ? static_cast<int32_t>(0u - static_cast<uint32_t>(av[i])) : av[i] / bv[i];
      int32_t er = bv[i] == 0 || bv[i] == -1 ? 0 : av[i] % bv[i];
      EXPECT_EQ(q[i], eq) << i;
      EXPECT_EQ(r[i], er) << i;
    }
    // The guard is in the graph, so every backend gets it.
    int wheres = 0;
    for (const UOpPtr& u : p.uops) wheres += u->op() == Op::WHERE;
    EXPECT_GE(wheres, 2);
    EXPECT_EQ(p.name, "E_8");
  }
}

TEST(InterpLowerTest, SymbolicVarInRange) {
  // out[i] = a[i] * 2 for i < n, n a DEFINE_VAR in [1, 16]
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32);
  UOpPtr n = UOp::Variable("n", 1, 16);
  UOpPtr r0 = UOp::Make(Op::RANGE, dtypes::kIndex, {n}, AxisArg{0, AxisType::kLoop});
  UOpPtr ast = Kernel({End(St(Idx(out, r0), Ld(Idx(a, r0)) * UOp::Const(dtypes::kFloat32, 2.0)), {r0})});
  auto p = codegen::LowerKernel(ast, Cpu(), {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->name, "E_n");
  ASSERT_EQ(p->vars.size(), 1u);
  std::vector<float> av = Iota(16);
  std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(16, -1.0f)), Bytes(av)};
  ASSERT_TRUE(RunOnInterp(*p, bufs, {5}).ok());
  std::vector<float> o = As<float>(bufs[0]);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(o[i], i < 5 ? av[i] * 2 : -1.0f) << i;
  EXPECT_EQ(RunOnInterp(*p, bufs, {17}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(InterpLowerTest, TwoReducesInOneKernel) {
  UOpPtr ast = TwoReduceKernel();
  std::vector<float> av(48);
  for (int i = 0; i < 48; ++i) av[i] = 1.0f + static_cast<float>(i % 5);
  for (int noopt : {1, 0}) {
    Context ctx({{Knob::kNoOpt, noopt}});
    std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(6)), Bytes(av)};
    ASSERT_TRUE(LowerAndRun(ast, Cpu(), {}, bufs).ok());
    std::vector<float> o = As<float>(bufs[0]);
    for (int i = 0; i < 6; ++i) {
      float sum = 0, mx = -INFINITY;
      for (int j = 0; j < 8; ++j) sum += av[i * 8 + j], mx = std::max(mx, av[i * 8 + j]);
      EXPECT_EQ(o[i], sum / mx) << i;
    }
  }
}

TEST(InterpLowerTest, FullReduceAndHoistedReduce) {
  std::vector<float> av = Iota(64, 1.0f, 19);
  float sum = 0, mx = -INFINITY;
  for (float v : av) sum += v, mx = std::max(mx, v);
  for (int noopt : {1, 0}) {
    Context ctx({{Knob::kNoOpt, noopt}});
    std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(1)), Bytes(std::vector<float>(64)), Bytes(av)};
    Program p;
    absl::Status st = LowerAndRun(FullReduceKernel(64), Cpu(), {}, bufs, &p);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(As<float>(bufs[0])[0], sum);
    std::vector<float> o = As<float>(bufs[1]);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(o[i], av[i] - mx) << i;
    // The max loop runs once, before the output loop: no RANGE is nested in another one.
    int depth = 0, max_depth = 0;
    for (const UOpPtr& u : p.uops) {
      if (u->op() == Op::RANGE) max_depth = std::max(max_depth, ++depth);
      if (u->op() == Op::END) --depth;
    }
    EXPECT_EQ(max_depth, 1) << "noopt=" << noopt;
  }
}

// A reduction of 4096 elements to one value (DynamicQuantizeLinear's maximum, a loss's mean) is small work, but one
// accumulator would make it a chain of 4096 dependent maxima: the heuristic gives it vector accumulators (ACC).
TEST(InterpLowerTest, LongReductionToOneValueGetsVectorAccumulators) {
  const int64_t n = 4096;
  std::vector<float> av = Iota(n, 0.25f, 1013);
  av[1234] = 1e6f;
  const UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32);
  const UOpPtr r = UOp::Range(n, 0, AxisType::kReduce);
  const UOpPtr ast = Kernel({St(Idx(out, UOp::ConstInt(0)), Red(Op::MAX, Ld(Idx(a, r)), {r}))});
  Target t = Cpu(2);
  t.supports_vectors = true;
  t.vector_bytes = 64;
  std::vector<std::vector<uint8_t>> bufs = {Bytes(std::vector<float>(1)), Bytes(av)};
  Program p;
  ASSERT_TRUE(LowerAndRun(ast, t, {}, bufs, &p).ok());
  EXPECT_EQ(As<float>(bufs[0])[0], 1e6f);
  bool acc = false;
  for (const std::string& o : p.applied_opts) acc |= o.starts_with("ACC");
  EXPECT_TRUE(acc) << absl::StrJoin(p.applied_opts, ", ");
}

}  // namespace
}  // namespace kiln
