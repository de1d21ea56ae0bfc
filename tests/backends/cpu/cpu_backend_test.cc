// CPU backend end to end: hand-built linear programs -> llvm text -> LLVM 19 -> ORC -> thread pool, compared with
// plain C++ loops.
#include <climits>
#include <cmath>
#include <limits>
#include <thread>

#include "tests/backends/cpu/cpu_test_util.h"
#include "tests/engine/codegen/render/test_programs.h"

namespace kiln::backends {
namespace {

using namespace kiln::testprog;  // NOLINT
using codegen::Program;

TEST_F(CpuTest, ElementwiseAdd) {
  const int n = 1003;
  std::vector<float> a(n), b(n);
  for (int i = 0; i < n; ++i) {
    a[i] = 0.5f * i;
    b[i] = std::sin(static_cast<float>(i));
  }
  auto out = Make(dtypes::kFloat32, std::vector<float>(n, -1.f));
  ASSERT_TRUE(Run(ElementwiseAdd(n), {out, Make(dtypes::kFloat32, a), Make(dtypes::kFloat32, b)}).ok());
  auto got = Read<float>(out);
  for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], a[i] + b[i]) << i;
}

int32_t RefCdiv(int32_t a, int32_t b) {
  if (b == 0) return 0;
  if (b == -1) return static_cast<int32_t>(0u - static_cast<uint32_t>(a));
  return a / b;
}
int32_t RefCmod(int32_t a, int32_t b) { return (b == 0 || b == -1) ? 0 : a % b; }
bool FloorAdj(int32_t r, int32_t b) { return r != 0 && ((r ^ b) < 0); }

TEST_F(CpuTest, Int32OpsAndDivisionByZeroNeverTraps) {
  const std::vector<int32_t> a = {7, -7, 7, -7, INT_MIN, 5, 0, 100, -100, 13, INT_MAX, -1};
  const std::vector<int32_t> b = {2, 2, -2, -2, -1, 0, 0, 7, 7, -5, -1, 3};
  const int n = static_cast<int>(a.size());
  UOpPtr pa = Param(6, dtypes::kInt32), pb = Param(7, dtypes::kInt32);
  UOpPtr r = Range(I32(n), 0);
  UOpPtr x = Load(Index(pa, r)), y = Load(Index(pb, r));
  const Op ops[] = {Op::CDIV, Op::CMOD, Op::FLOORDIV, Op::FLOORMOD, Op::MAX, Op::SHL};
  std::vector<UOpPtr> end_src;
  for (int k = 0; k < 6; ++k) {
    UOpPtr v = ops[k] == Op::SHL ? Alu(Op::SHL, {x, I32(3)}) : Alu(ops[k], {x, y});
    end_src.push_back(Store(Index(Param(k, dtypes::kInt32), r), v));
  }
  end_src.push_back(r);
  Program p = FromRoots("E_ints", {End(end_src)}, {});
  std::vector<std::shared_ptr<runtime::Buffer>> bufs;
  for (int k = 0; k < 6; ++k) bufs.push_back(Make(dtypes::kInt32, std::vector<int32_t>(n, 12345)));
  bufs.push_back(Make(dtypes::kInt32, a));
  bufs.push_back(Make(dtypes::kInt32, b));
  ASSERT_TRUE(Run(p, bufs).ok()) << last_source_;
  auto q = Read<int32_t>(bufs[0]), m = Read<int32_t>(bufs[1]), fq = Read<int32_t>(bufs[2]),
       fm = Read<int32_t>(bufs[3]), mx = Read<int32_t>(bufs[4]), sh = Read<int32_t>(bufs[5]);
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE(testing::Message() << a[i] << " op " << b[i]);
    EXPECT_EQ(q[i], RefCdiv(a[i], b[i]));
    EXPECT_EQ(m[i], RefCmod(a[i], b[i]));
    int32_t rr = RefCmod(a[i], b[i]);
    EXPECT_EQ(fq[i], RefCdiv(a[i], b[i]) - (FloorAdj(rr, b[i]) ? 1 : 0));
    EXPECT_EQ(fm[i], FloorAdj(rr, b[i]) ? rr + b[i] : rr);
    EXPECT_EQ(mx[i], std::max(a[i], b[i]));
    EXPECT_EQ(sh[i], static_cast<int32_t>(static_cast<uint32_t>(a[i]) << 3));
  }
  EXPECT_EQ(q[5], 0);  // 5 / 0
  EXPECT_EQ(q[4], INT_MIN);  // INT_MIN / -1 wraps
}

TEST_F(CpuTest, UnsignedDivisionByZero) {
  const std::vector<uint32_t> a = {10, 4000000000u, 7}, b = {3, 0, 0};
  UOpPtr out = Param(0, dtypes::kUInt32), pa = Param(1, dtypes::kUInt32), pb = Param(2, dtypes::kUInt32);
  UOpPtr r = Range(I32(3), 0);
  UOpPtr v = Alu(Op::CDIV, {Load(Index(pa, r)), Load(Index(pb, r))});
  Program p = FromRoots("E_3", {End({Store(Index(out, r), v), r})}, {});
  auto o = Make(dtypes::kUInt32, std::vector<uint32_t>(3, 9));
  ASSERT_TRUE(Run(p, {o, Make(dtypes::kUInt32, a), Make(dtypes::kUInt32, b)}).ok());
  EXPECT_EQ(Read<uint32_t>(o), (std::vector<uint32_t>{3, 0, 0}));
}

TEST_F(CpuTest, ReductionWithDefineReg) {
  const int n = 7, m = 129;
  std::vector<float> a(n * m);
  for (int i = 0; i < n * m; ++i) a[i] = static_cast<float>((i * 37) % 11) - 5.f;
  auto out = Make(dtypes::kFloat32, std::vector<float>(n, 0.f));
  ASSERT_TRUE(Run(RowSum(n, m), {out, Make(dtypes::kFloat32, a)}).ok()) << last_source_;
  auto got = Read<float>(out);
  for (int i = 0; i < n; ++i) {
    float acc = 0.f;
    for (int j = 0; j < m; ++j) acc += a[i * m + j];
    EXPECT_EQ(got[i], acc) << i;
  }
}

TEST_F(CpuTest, GatedLoadAndStore) {
  // out[i] = i < 10 ? a[i] : 7.5 (a has 10 elements: the gate keeps the load in bounds);
  // out2[i] = a[i] only when i is even, else untouched; out3 gates on the INDEX only (alt 0).
  const int n = 16;
  UOpPtr out = Param(0, dtypes::kFloat32), out2 = Param(1, dtypes::kFloat32), out3 = Param(2, dtypes::kFloat32),
         pa = Param(3, dtypes::kFloat32);
  UOpPtr r = Range(I32(n), 0);
  UOpPtr in_bounds = Alu(Op::CMPLT, {r, I32(10)});
  UOpPtr v = LoadGated(Index(pa, r), F32(7.5), in_bounds);
  UOpPtr even = Alu(Op::CMPEQ, {Alu(Op::CMOD, {r, I32(2)}), I32(0)});
  UOpPtr st2 = StoreGated(Index(out2, r), Load(IndexGated(pa, r, Alu(Op::AND, {even, in_bounds}))), even);
  UOpPtr v3 = Load(IndexGated(pa, r, in_bounds));
  Program p = FromRoots("E_16", {End({Store(Index(out, r), v), st2, Store(Index(out3, r), v3), r})}, {});
  std::vector<float> a(10);
  for (int i = 0; i < 10; ++i) a[i] = 1.f + i;
  auto o = Make(dtypes::kFloat32, std::vector<float>(n, -1.f));
  auto o2 = Make(dtypes::kFloat32, std::vector<float>(n, -1.f));
  auto o3 = Make(dtypes::kFloat32, std::vector<float>(n, -1.f));
  ASSERT_TRUE(Run(p, {o, o2, o3, Make(dtypes::kFloat32, a)}).ok()) << last_source_;
  auto g = Read<float>(o), g2 = Read<float>(o2), g3 = Read<float>(o3);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(g[i], i < 10 ? a[i] : 7.5f) << i;
    EXPECT_EQ(g2[i], i % 2 == 0 ? (i < 10 ? a[i] : 0.f) : -1.f) << i;
    EXPECT_EQ(g3[i], i < 10 ? a[i] : 0.f) << i;
  }
}

TEST_F(CpuTest, CoreIdSplitsAcrossThreads) {
  // out[core * half + i] = core * 1000 + i, launched with 2 threads.
  const int half = 500;
  UOpPtr out = Param(0, dtypes::kInt32);
  UOpPtr core = CoreId(2);
  UOpPtr r = Range(I32(half), 0);
  UOpPtr idx = Alu(Op::ADD, {Alu(Op::MUL, {core, I32(half)}), r});
  UOpPtr v = Alu(Op::ADD, {Alu(Op::MUL, {core, I32(1000)}), r});
  Program p = FromRoots("E_2_500", {End({Store(Index(out, idx), v), r})}, {});
  p.threads = 2;
  auto o = Make(dtypes::kInt32, std::vector<int32_t>(2 * half, -1));
  ASSERT_TRUE(Run(p, {o}, {}, 2).ok()) << last_source_;
  auto g = Read<int32_t>(o);
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < half; ++i) ASSERT_EQ(g[c * half + i], c * 1000 + i);
  // Many launches reuse the pool.
  for (int k = 0; k < 50; ++k) ASSERT_TRUE(Run(p, {o}, {}, 2).ok());
}

uint16_t RefBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

TEST_F(CpuTest, HalfAndBFloat16Conversions) {
  const std::vector<float> a = {0.f, -0.f, 1.f, 0.1f, 1.f / 3, 65504.f, 70000.f, 1e-7f, -2.5f, 1.00390625f,
                                std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                                3.4e38f, -1e-40f, 12345.678f, 2049.f};
  const int n = static_cast<int>(a.size());
  UOpPtr oh = Param(0, dtypes::kFloat16), ob = Param(1, dtypes::kBFloat16), ohf = Param(2, dtypes::kFloat32),
         obf = Param(3, dtypes::kFloat32), osum = Param(4, dtypes::kFloat16), pa = Param(5, dtypes::kFloat32);
  UOpPtr r = Range(I32(n), 0);
  UOpPtr x = Load(Index(pa, r));
  UOpPtr h = CastTo(x, dtypes::kFloat16), bf = CastTo(x, dtypes::kBFloat16);
  Program p = FromRoots(
      "E_cvt",
      {End({Store(Index(oh, r), h), Store(Index(ob, r), bf),
            Store(Index(ohf, r), CastTo(Load(Index(oh, r)), dtypes::kFloat32)),
            Store(Index(obf, r), CastTo(Load(Index(ob, r)), dtypes::kFloat32)),
            Store(Index(osum, r), Alu(Op::ADD, {h, h})), r})},
      {});
  auto bh = Make(dtypes::kFloat16, std::vector<uint16_t>(n, 0)), bb = Make(dtypes::kBFloat16, std::vector<uint16_t>(n, 0));
  auto bhf = Make(dtypes::kFloat32, std::vector<float>(n, 0)), bbf = Make(dtypes::kFloat32, std::vector<float>(n, 0));
  auto bsum = Make(dtypes::kFloat16, std::vector<uint16_t>(n, 0));
  ASSERT_TRUE(Run(p, {bh, bb, bhf, bbf, bsum, Make(dtypes::kFloat32, a)}).ok()) << last_source_;
  auto gh = Read<uint16_t>(bh), gb = Read<uint16_t>(bb), gsum = Read<uint16_t>(bsum);
  auto ghf = Read<float>(bhf), gbf = Read<float>(bbf);
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE(a[i]);
    _Float16 ref = static_cast<_Float16>(a[i]);
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    if (std::isnan(a[i])) {
      EXPECT_EQ(gh[i] & 0x7c00, 0x7c00);
      EXPECT_NE(gh[i] & 0x3ff, 0);
      EXPECT_TRUE(std::isnan(ghf[i]));
      EXPECT_TRUE(std::isnan(gbf[i]));
    } else {
      EXPECT_EQ(gh[i], rb);
      EXPECT_EQ(ghf[i], static_cast<float>(ref));
      _Float16 s = ref + ref;
      uint16_t sb;
      std::memcpy(&sb, &s, 2);
      EXPECT_EQ(gsum[i], sb);
    }
    EXPECT_EQ(gb[i], RefBf16(a[i]));
    uint32_t back = static_cast<uint32_t>(gb[i]) << 16;
    float fb;
    std::memcpy(&fb, &back, 4);
    if (!std::isnan(a[i])) {
      EXPECT_EQ(gbf[i], fb);
    }
  }
}

TEST_F(CpuTest, NanInfAndExactConstants) {
  const double vals[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                         -std::numeric_limits<double>::infinity(), -0.0, 0.1, 1e-45, 3.4028234663852886e38,
                         5e-324, 1.0 / 3.0};
  const int n = sizeof(vals) / sizeof(vals[0]);
  UOpPtr of = Param(0, dtypes::kFloat32), od = Param(1, dtypes::kFloat64);
  std::vector<UOpPtr> roots;
  for (int i = 0; i < n; ++i) {
    roots.push_back(Store(Index(of, I32(i)), UOp::Const(dtypes::kFloat32, vals[i])));
    roots.push_back(Store(Index(od, I32(i)), UOp::Const(dtypes::kFloat64, vals[i])));
  }
  Program p = FromRoots("E_consts", roots, {});
  auto bf = Make(dtypes::kFloat32, std::vector<float>(n, 7.f));
  auto bd = Make(dtypes::kFloat64, std::vector<double>(n, 7.0));
  ASSERT_TRUE(Run(p, {bf, bd}).ok()) << last_source_;
  auto gf = Read<float>(bf);
  auto gd = Read<double>(bd);
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE(vals[i]);
    if (std::isnan(vals[i])) {
      EXPECT_TRUE(std::isnan(gf[i]));
      EXPECT_TRUE(std::isnan(gd[i]));
      continue;
    }
    float ef = static_cast<float>(vals[i]);
    EXPECT_EQ(std::memcmp(&gf[i], &ef, 4), 0) << gf[i];
    EXPECT_EQ(std::memcmp(&gd[i], &vals[i], 8), 0) << gd[i];
  }
}

TEST_F(CpuTest, DefineVarBoundsTheLoop) {
  UOpPtr out = Param(0, dtypes::kInt32);
  UOpPtr n = UOp::Make(Op::DEFINE_VAR, dtypes::kInt32, {}, Arg(VarArg{"user_named_var", 0, 64}));
  UOpPtr r = Range(n, 0);
  Program p = FromRoots("E_n", {End({Store(Index(out, r), Alu(Op::MUL, {r, I32(2)})), r})}, {}, {n});
  auto o = Make(dtypes::kInt32, std::vector<int32_t>(64, -1));
  ASSERT_TRUE(Run(p, {o}, {37}).ok()) << last_source_;
  EXPECT_EQ(last_source_.find("user_named_var"), std::string::npos);
  auto g = Read<int32_t>(o);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(g[i], i < 37 ? 2 * i : -1) << i;
  ASSERT_TRUE(Run(p, {o}, {0}).ok());  // zero-trip loop runs nothing
  EXPECT_EQ(Read<int32_t>(o)[0], 0);
}

TEST_F(CpuTest, VectorLoadsStoresGepVectorize) {
  const int n = 8;  // 2 vectors of 4
  UOpPtr out = Param(0, dtypes::kFloat32), out2 = Param(1, dtypes::kFloat32), pa = Param(2, dtypes::kFloat32);
  UOpPtr r = Range(I32(n / 4), 0);
  UOpPtr base = Alu(Op::MUL, {r, I32(4)});
  UOpPtr v = Load(IndexVec(pa, base, 4));
  UOpPtr two = UOp::Const(dtypes::kFloat32.Vec(4), 2.0);
  UOpPtr prod = Alu(Op::MUL, {v, two});
  UOpPtr lane3 = UOp::Make(Op::GEP, dtypes::kFloat32, {v}, Arg(IntVec{3}));
  UOpPtr lane0 = UOp::Make(Op::GEP, dtypes::kFloat32, {v}, Arg(IntVec{0}));
  UOpPtr swapped = UOp::Make(Op::VECTORIZE, dtypes::kFloat32.Vec(2), {lane3, lane0});
  UOpPtr st2 = Store(IndexVec(out2, Alu(Op::MUL, {r, I32(2)}), 2), swapped);
  Program p = FromRoots("E_2_4", {End({Store(IndexVec(out, base, 4), prod), st2, r})}, {});
  std::vector<float> a = {1, 2, 3, 4, 5, 6, 7, 8};
  auto o = Make(dtypes::kFloat32, std::vector<float>(n, 0)), o2 = Make(dtypes::kFloat32, std::vector<float>(4, 0));
  ASSERT_TRUE(Run(p, {o, o2, Make(dtypes::kFloat32, a)}).ok()) << last_source_;
  EXPECT_EQ(Read<float>(o), (std::vector<float>{2, 4, 6, 8, 10, 12, 14, 16}));
  EXPECT_EQ(Read<float>(o2), (std::vector<float>{4, 1, 8, 5}));
}

TEST_F(CpuTest, CastsBoolsAndTranscendentals) {
  const std::vector<float> a = {-2.7f, -0.5f, 0.f, 0.25f, 3.9f, 100.f};
  const int n = static_cast<int>(a.size());
  UOpPtr oi = Param(0, dtypes::kInt32), ob = Param(1, dtypes::kBool), of = Param(2, dtypes::kFloat32),
         ou8 = Param(3, dtypes::kUInt8), oe = Param(4, dtypes::kFloat32), pa = Param(5, dtypes::kFloat32);
  UOpPtr r = Range(I32(n), 0);
  UOpPtr x = Load(Index(pa, r));
  UOpPtr pos = Alu(Op::CMPLT, {F32(0.0), x});
  UOpPtr back = Load(Index(ob, r));  // bool read back (stored earlier in the same iteration)
  Program p = FromRoots(
      "E_casts",
      {End({Store(Index(oi, r), CastTo(x, dtypes::kInt32)), Store(Index(ob, r), pos),
            Store(Index(of, r), Alu(Op::WHERE, {back, CastTo(CastTo(x, dtypes::kInt32), dtypes::kFloat32), F32(-1)})),
            Store(Index(ou8, r), CastTo(pos, dtypes::kUInt8)),
            Store(Index(oe, r), Alu(Op::ADD, {Alu(Op::EXP2, {x}), Alu(Op::SQRT, {Alu(Op::MAX, {x, F32(0)})})})), r})},
      {});
  auto bi = Make(dtypes::kInt32, std::vector<int32_t>(n, 0));
  auto bb = Make(dtypes::kBool, std::vector<uint8_t>(n, 7));
  auto bf = Make(dtypes::kFloat32, std::vector<float>(n, 0));
  auto bu = Make(dtypes::kUInt8, std::vector<uint8_t>(n, 9));
  auto be = Make(dtypes::kFloat32, std::vector<float>(n, 0));
  ASSERT_TRUE(Run(p, {bi, bb, bf, bu, be, Make(dtypes::kFloat32, a)}).ok()) << last_source_;
  auto gi = Read<int32_t>(bi);
  auto gb = Read<uint8_t>(bb), gu = Read<uint8_t>(bu);
  auto gf = Read<float>(bf), ge = Read<float>(be);
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE(a[i]);
    EXPECT_EQ(gi[i], static_cast<int32_t>(a[i]));
    EXPECT_EQ(gb[i], a[i] > 0 ? 1 : 0);
    EXPECT_EQ(gu[i], a[i] > 0 ? 1 : 0);
    EXPECT_EQ(gf[i], a[i] > 0 ? static_cast<float>(static_cast<int32_t>(a[i])) : -1.f);
    EXPECT_NEAR(ge[i], std::exp2(a[i]) + std::sqrt(std::max(a[i], 0.f)), 1e-5 * std::exp2(a[i]) + 1e-6);
  }
}

TEST_F(CpuTest, ConcurrentLaunchesFromManyThreads) {
  const int half = 256;
  UOpPtr out = Param(0, dtypes::kInt32), in = Param(1, dtypes::kInt32);
  UOpPtr core = CoreId(4);
  UOpPtr r = Range(I32(half), 0);
  UOpPtr idx = Alu(Op::ADD, {Alu(Op::MUL, {core, I32(half)}), r});
  Program p = FromRoots("E_4_256", {End({Store(Index(out, idx), Alu(Op::ADD, {Load(Index(in, idx)), I32(1)})), r})},
                        {});
  auto k = runtime::CompileKernel(*Dev(), p, &cache_);
  ASSERT_TRUE(k.ok()) << k.status();
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < 6; ++t) {
    ts.emplace_back([&, t] {
      std::vector<int32_t> init(4 * half, t);
      auto o = runtime::Buffer::Create(Dev(), dtypes::kInt32, 4 * half);
      auto i = runtime::Buffer::Create(Dev(), dtypes::kInt32, 4 * half);
      if (!o.ok() || !i.ok() || !(*i)->CopyIn(init.data(), init.size() * 4).ok()) {
        ++bad;
        return;
      }
      std::vector<runtime::DeviceMemory> m = {(*o)->memory(), (*i)->memory()};
      runtime::LaunchDims dims;
      dims.threads = 4;
      for (int rep = 0; rep < 20; ++rep)
        if (!k->program->Launch(m, {}, dims, false).ok()) ++bad;
      std::vector<int32_t> got(4 * half);
      if (!(*o)->CopyOut(got.data(), got.size() * 4).ok()) ++bad;
      for (int32_t v : got)
        if (v != t + 1) ++bad;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(CpuTest, LaunchChecksArguments) {
  auto k = runtime::CompileKernel(*Dev(), ElementwiseAdd(4), &cache_);
  ASSERT_TRUE(k.ok()) << k.status();
  auto b = Make(dtypes::kFloat32, std::vector<float>(4, 0));
  std::vector<runtime::DeviceMemory> two = {b->memory(), b->memory()};
  EXPECT_EQ(k->program->Launch(two, {}, {}, false).status().code(), absl::StatusCode::kInvalidArgument);
  runtime::DeviceMemory misaligned = b->memory();
  misaligned.ptr = static_cast<char*>(misaligned.ptr) + 4;
  std::vector<runtime::DeviceMemory> bad = {misaligned, b->memory(), b->memory()};
  EXPECT_EQ(k->program->Launch(bad, {}, {}, false).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuTest, CompileErrorsCarryTheLlvmMessage) {
  CpuCompiler c;
  auto r = c.Compile("define void @f( {", "f");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("does not parse"), std::string::npos);
  EXPECT_NE(c.CacheKey().find("cpu-llvm-19"), std::string::npos);
  EXPECT_FALSE(Dev()->Load("not an object", "E_1").ok());
}

TEST_F(CpuTest, SameKernelNameTwiceLoadsIndependently) {
  // Two different kernels with one name coexist (one JITDylib each).
  auto k1 = runtime::CompileKernel(*Dev(), ElementwiseAdd(8), &cache_);
  Program p2 = ElementwiseAdd(8);
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32), b = Param(2, dtypes::kFloat32);
  UOpPtr r = Range(I32(8), 0);
  p2 = FromRoots("E_8", {End({Store(Index(out, r), Alu(Op::MUL, {Load(Index(a, r)), Load(Index(b, r))})), r})},
                 p2.buffers);
  auto k2 = runtime::CompileKernel(*Dev(), p2, &cache_);
  ASSERT_TRUE(k1.ok() && k2.ok());
  auto o = Make(dtypes::kFloat32, std::vector<float>(8, 0)), x = Make(dtypes::kFloat32, std::vector<float>(8, 3)),
       y = Make(dtypes::kFloat32, std::vector<float>(8, 4));
  std::vector<runtime::DeviceMemory> m = {o->memory(), x->memory(), y->memory()};
  ASSERT_TRUE(k1->program->Launch(m, {}, {}, false).ok());
  EXPECT_EQ(Read<float>(o)[0], 7.f);
  ASSERT_TRUE(k2->program->Launch(m, {}, {}, false).ok());
  EXPECT_EQ(Read<float>(o)[0], 12.f);
}

// The count that decides whether a kernel compiled under an SLP cap is compiled again without it: only the
// innermost loops' floating-point multiplies, adds and multiply-adds count, scalar apart from vector.
TEST(InnerLoopArithTest, CountsInnermostLoopsOnly) {
  // One reduce loop of scalar multiply-adds; the add after the loop is an epilogue and does not count.
  const char* scalar_loop = R"(
define void @k(ptr %a, ptr %out) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %acc = phi float [ 0.0, %entry ], [ %acc.next, %loop ]
  %p = getelementptr float, ptr %a, i64 %i
  %v = load float, ptr %p
  %acc.next = call float @llvm.fmuladd.f32(float %v, float %v, float %acc)
  %i.next = add i64 %i, 1
  %c = icmp slt i64 %i.next, 64
  br i1 %c, label %loop, label %exit
exit:
  %e = fadd float %acc.next, 1.0
  store float %e, ptr %out
  ret void
}
declare float @llvm.fmuladd.f32(float, float, float)
)";
  auto n = CountInnerLoopArith(scalar_loop);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->scalar, 1);
  EXPECT_EQ(n->vector, 0);
  // A vector reduce loop inside an outer loop whose scalar multiply is outside the innermost loop.
  const char* vector_loop = R"(
define void @k(ptr %a, ptr %out) {
entry:
  br label %outer
outer:
  %j = phi i64 [ 0, %entry ], [ %j.next, %outer.latch ]
  br label %inner
inner:
  %i = phi i64 [ 0, %outer ], [ %i.next, %inner ]
  %acc = phi <16 x float> [ zeroinitializer, %outer ], [ %acc.next, %inner ]
  %p = getelementptr <16 x float>, ptr %a, i64 %i
  %v = load <16 x float>, ptr %p
  %m = fmul <16 x float> %v, %v
  %acc.next = fadd <16 x float> %acc, %m
  %i.next = add i64 %i, 1
  %c = icmp slt i64 %i.next, 8
  br i1 %c, label %inner, label %outer.latch
outer.latch:
  %x = extractelement <16 x float> %acc.next, i64 0
  %y = fmul float %x, 2.0
  %q = getelementptr float, ptr %out, i64 %j
  store float %y, ptr %q
  %j.next = add i64 %j, 1
  %d = icmp slt i64 %j.next, 4
  br i1 %d, label %outer, label %exit
exit:
  ret void
}
)";
  n = CountInnerLoopArith(vector_loop);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->scalar, 0);
  EXPECT_EQ(n->vector, 2);
  EXPECT_FALSE(CountInnerLoopArith("this is not IR").ok());
}

}  // namespace
}  // namespace kiln::backends
