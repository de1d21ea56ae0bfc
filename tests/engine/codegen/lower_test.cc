// Structure of lowered programs (no backend): names, opts, loop structure, hoisting, index dtype, determinism.
#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "engine/base/env.h"
#include "engine/codegen/codegen.h"
#include "engine/codegen/graph_util.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using codegen::LowerOptions;
using codegen::Opt;
using codegen::OptOp;
using codegen::Program;
using codegen::Target;

UOpPtr Param(int64_t slot, DType d) { return UOp::Make(Op::PARAM, d.Ptr(), {}, slot); }
UOpPtr Idx(const UOpPtr& p, const UOpPtr& i) { return UOp::Make(Op::INDEX, p->dtype(), {p, i}); }
UOpPtr Ld(const UOpPtr& ix) { return UOp::Make(Op::LOAD, ix->dtype().Base().Scalar(), {ix}); }
UOpPtr St(const UOpPtr& ix, const UOpPtr& v) { return UOp::Make(Op::STORE, dtypes::kVoid, {ix, v}); }
UOpPtr End(const UOpPtr& v, std::initializer_list<UOpPtr> rs) {
  UOpVec s{v};
  for (const UOpPtr& r : rs) s.push_back(r);
  return UOp::Make(Op::END, dtypes::kVoid, s);
}

// out[i*m+j] = a[i] + b[i*m+j]
UOpPtr RowBiasKernel(int64_t n, int64_t m) {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32), b = Param(2, dtypes::kFloat32);
  UOpPtr r0 = UOp::Range(n, 0), r1 = UOp::Range(m, 1);
  return UOp::Sink({End(St(Idx(out, r0 * m + r1), Ld(Idx(a, r0)) + Ld(Idx(b, r0 * m + r1))), {r0, r1})});
}

UOpPtr SumKernel(int64_t n, int64_t m) {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32);
  UOpPtr r0 = UOp::Range(n, 0), r1 = UOp::Range(m, 1, AxisType::kReduce);
  UOpPtr red = UOp::Make(Op::REDUCE, dtypes::kFloat32, {Ld(Idx(a, r0 * m + r1)), r1}, Op::ADD);
  return UOp::Sink({End(St(Idx(out, r0), red), {r0})});
}

int Pos(const Program& p, const UOpPtr& u) {
  auto it = std::find(p.uops.begin(), p.uops.end(), u);
  return it == p.uops.end() ? -1 : static_cast<int>(it - p.uops.begin());
}

absl::StatusOr<Program> NoOpt(const UOpPtr& ast) {
  Context ctx({{Knob::kNoOpt, 1}});
  return codegen::LowerKernel(ast, Target{}, {});
}

TEST(LowerTest, LoopStructureAndHoisting) {
  auto p = NoOpt(RowBiasKernel(4, 16));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->name, "E_4_16");
  // Every source before its user, PARAMs before the first RANGE, one END per RANGE after it.
  int first_range = -1, params_after = 0;
  for (size_t i = 0; i < p->uops.size(); ++i) {
    const UOpPtr& u = p->uops[i];
    for (const UOpPtr& s : u->src()) EXPECT_LT(Pos(*p, s), static_cast<int>(i));
    if (u->op() == Op::RANGE && first_range < 0) first_range = static_cast<int>(i);
    if (u->op() == Op::PARAM && first_range >= 0) ++params_after;
    if (u->op() == Op::RANGE) { EXPECT_EQ(u->dtype(), dtypes::kInt32); }
  }
  EXPECT_EQ(params_after, 0);
  std::vector<int> range_pos, end_pos;
  int load_a = -1;
  for (size_t i = 0; i < p->uops.size(); ++i) {
    const UOpPtr& u = p->uops[i];
    if (u->op() == Op::RANGE) range_pos.push_back(static_cast<int>(i));
    if (u->op() == Op::END) end_pos.push_back(static_cast<int>(i));
    if (u->op() == Op::LOAD && u->src(0)->src(0)->ArgInt() == 1) load_a = static_cast<int>(i);
  }
  ASSERT_EQ(range_pos.size(), 2u);
  ASSERT_EQ(end_pos.size(), 2u);
  // a[i] does not depend on the inner range: it is loaded between the two RANGEs.
  EXPECT_GT(load_a, range_pos[0]);
  EXPECT_LT(load_a, range_pos[1]);
  EXPECT_EQ(end_pos.back(), static_cast<int>(p->uops.size()) - 1);
}

TEST(LowerTest, ReduceBecomesAccumulatorLoop) {
  auto p = NoOpt(SumKernel(16, 32));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->name, "r_16_32");
  int regs = 0, reduces = 0, stores = 0;
  for (const UOpPtr& u : p->uops) {
    regs += u->op() == Op::DEFINE_REG;
    reduces += u->op() == Op::REDUCE;
    stores += u->op() == Op::STORE;
  }
  EXPECT_EQ(regs, 1);
  EXPECT_EQ(reduces, 0);
  EXPECT_EQ(stores, 3);  // acc init, acc update, output
}

TEST(LowerTest, DeterministicAndNamesFollowOpts) {
  auto a = NoOpt(SumKernel(16, 32));
  auto b = NoOpt(SumKernel(16, 32));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->uops, b->uops);
  LowerOptions o;
  o.use_explicit_opts = true;
  o.opts = {{OptOp::kUnroll, 0, 0}};
  auto c = codegen::LowerKernel(SumKernel(16, 8), Target{}, o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "r_16_8");
  EXPECT_EQ(c->applied_opts, std::vector<std::string>{"UNROLL(0,0)"});
  int ranges = 0;
  for (const UOpPtr& u : c->uops) ranges += u->op() == Op::RANGE;
  EXPECT_EQ(ranges, 1);  // the reduce axis is fully unrolled: only the output loop is left
}

TEST(LowerTest, HeuristicChoices) {
  Target cpu;
  cpu.has_threads = true;
  cpu.max_threads = 8;
  auto opts = codegen::HeuristicOpts(SumKernel(16, 32), cpu);
  ASSERT_TRUE(opts.ok());
  EXPECT_EQ(*opts, (std::vector<Opt>{{OptOp::kUnroll, 0, 4}, {OptOp::kUpcast, 0, 8}}));
  auto small = codegen::HeuristicOpts(SumKernel(16, 12), cpu);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->front(), (Opt{OptOp::kUnroll, 0, 0}));
}

// out[c] = sum over (n, h, w) of a[n, c, h, w] (a BatchNorm statistic of an NCHW tensor); `pooled` multiplies by
// p[n, c, h / 2, w / 2] (a 2x2 max-pool gradient broadcast back), whose index is not affine in h and w.
UOpPtr ChannelSumKernel(int64_t n, int64_t c, int64_t h, int64_t w, bool pooled) {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32),
         p = Param(2, dtypes::kFloat32);
  UOpPtr rc = UOp::Range(c, 0), rn = UOp::Range(n, 1, AxisType::kReduce),
         rh = UOp::Range(h, 2, AxisType::kReduce), rw = UOp::Range(w, 3, AxisType::kReduce);
  UOpPtr v = Ld(Idx(a, ((rn * c + rc) * h + rh) * w + rw));
  if (pooled) v = v * Ld(Idx(p, ((rn * c + rc) * (h / 2) + rh / 2) * (w / 2) + rw / 2));
  UOpPtr red = UOp::Make(Op::REDUCE, dtypes::kFloat32, {v, rn, rh, rw}, Op::ADD);
  return UOp::Sink({End(St(Idx(out, rc), red), {rc})});
}

// The CPU target of the 2-core AVX-512 machine the heuristic's figures were measured on.
Target Avx512TwoCores() {
  Target t;
  t.renderer = "llvm";
  t.has_threads = true;
  t.max_threads = 2;
  t.vector_bytes = 64;
  return t;
}

TEST(LowerTest, ChannelSumMergesPlaneIntoSixteenLanes) {
  const Target avx512 = Avx512TwoCores();
  // h and w are walked as one 400-wide axis: 16 accumulator lanes, where 20-wide w alone gave 4.
  auto p = codegen::LowerKernel(ChannelSumKernel(128, 8, 20, 20, false), avx512, {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->name, "r_2_4_128_25_16");
  // Not affine in h, w (h / 2): kept apart where w alone gets lanes ...
  auto pooled = codegen::LowerKernel(ChannelSumKernel(128, 8, 20, 20, true), avx512, {});
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  EXPECT_EQ(pooled->name, "r_2_4_128_20_20");  // w whole: 20 lanes
  // ... merged where 6-wide w alone would be scalar code.
  auto small = codegen::LowerKernel(ChannelSumKernel(512, 16, 6, 6, true), avx512, {});
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->name, "r_2_8_512_3_12");  // 36 = 3 x 12 lanes
  // n and h are not contiguous together (c lies between them): never merged.
  auto opts = codegen::HeuristicOpts(ChannelSumKernel(128, 8, 20, 20, false), avx512);
  ASSERT_TRUE(opts.ok()) << opts.status();
  EXPECT_EQ(opts->back(), (Opt{OptOp::kAcc, 1, 16}));
}

// out[i*n+j] = sum_k a[i*kk+k] * b[k*n+j] (b_transposed: b[j*kk+k]).
UOpPtr MatmulKernel(int64_t m, int64_t n, int64_t kk, bool b_transposed = false) {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32),
         b = Param(2, dtypes::kFloat32);
  UOpPtr r0 = UOp::Range(m, 0), r1 = UOp::Range(n, 1), r2 = UOp::Range(kk, 2, AxisType::kReduce);
  UOpPtr prod = Ld(Idx(a, r0 * kk + r2)) * Ld(Idx(b, b_transposed ? r1 * kk + r2 : r2 * n + r1));
  UOpPtr red = UOp::Make(Op::REDUCE, dtypes::kFloat32, {prod, r2}, Op::ADD);
  return UOp::Sink({End(St(Idx(out, r0 * n + r1), red), {r0, r1})});
}

TEST(LowerTest, MatmulRegisterTile) {
  const Target avx512 = Avx512TwoCores();
  auto opts = codegen::HeuristicOpts(MatmulKernel(256, 256, 256), avx512);
  ASSERT_TRUE(opts.ok()) << opts.status();
  EXPECT_EQ(*opts, (std::vector<Opt>{{OptOp::kThread, 0, 2},
                                     {OptOp::kUpcast, 1, 16},
                                     {OptOp::kUpcast, 1, 2},
                                     {OptOp::kUpcast, 0, 8},
                                     {OptOp::kUnroll, 0, 2}}));
  auto p = codegen::LowerKernel(MatmulKernel(256, 256, 256), avx512, {});
  ASSERT_TRUE(p.ok()) << p.status();
  // The n loop (256 / 32 = 8) runs outside the m loop (256 / 2 threads / 8 rows = 16).
  EXPECT_EQ(p->name, "r_2_8_16_128_8_2_16_2");
  EXPECT_EQ(p->threads, 2);
  EXPECT_FALSE(p->no_gather);
  // AVX2-sized registers: 4 x 16 tile.
  Target avx2 = avx512;
  avx2.vector_bytes = 32;
  auto narrow = codegen::HeuristicOpts(MatmulKernel(256, 256, 256), avx2);
  ASSERT_TRUE(narrow.ok());
  EXPECT_EQ(*narrow, (std::vector<Opt>{{OptOp::kThread, 0, 2},
                                       {OptOp::kUpcast, 1, 16},
                                       {OptOp::kUpcast, 0, 4},
                                       {OptOp::kUnroll, 0, 2}}));
  // No tile when the n lanes are strided in b (they would be gathers), nor for small kernels.
  auto strided = codegen::HeuristicOpts(MatmulKernel(256, 256, 256, /*b_transposed=*/true), avx512);
  ASSERT_TRUE(strided.ok());
  EXPECT_EQ(std::count(strided->begin(), strided->end(), Opt{OptOp::kUpcast, 1, 16}), 0);
  auto small = codegen::HeuristicOpts(MatmulKernel(16, 16, 16), avx512);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(std::count(small->begin(), small->end(), Opt{OptOp::kUpcast, 1, 16}), 0);
}

// A quantized matrix-vector product, the shape of a GGUF Q8 row: out[i] = sum_k float(q[i*k_size + k]) * x[k], q bytes.
UOpPtr QuantRowKernel(int64_t rows, int64_t k_size) {
  UOpPtr out = Param(0, dtypes::kFloat32), q = Param(1, dtypes::kUInt8), x = Param(2, dtypes::kFloat32);
  UOpPtr ri = UOp::Range(rows, 0), rk = UOp::Range(k_size, 1, AxisType::kReduce);
  UOpPtr w = UOp::Make(Op::CAST, dtypes::kFloat32, {Ld(Idx(q, ri * k_size + rk))});
  UOpPtr red = UOp::Make(Op::REDUCE, dtypes::kFloat32, {w * Ld(Idx(x, rk)), rk}, Op::ADD);
  return UOp::Sink({End(St(Idx(out, ri), red), {ri})});
}

TEST(LowerTest, QuantizedRowUnrollsToWholeBlocks) {
  // 16 lanes per accumulator and the reduce unrolled so one iteration covers a whole 32-weight block; the rows are
  // split over the threads and never upcast (their bytes would be packed lane by lane).
  for (int bytes : {64, 32}) {
    Target t = Avx512TwoCores();
    t.vector_bytes = bytes;
    auto opts = codegen::HeuristicOpts(QuantRowKernel(1536, 576), t);
    ASSERT_TRUE(opts.ok()) << opts.status();
    EXPECT_EQ(*opts, (std::vector<Opt>{{OptOp::kThread, 0, 2}, {OptOp::kAcc, 0, 16}, {OptOp::kUnroll, 0, 2}}))
        << bytes;
  }
  // The batched form (8 slots of activations against the same rows) unrolls to whole blocks too, the slots upcast.
  {
    UOpPtr out = Param(0, dtypes::kFloat32), q = Param(1, dtypes::kUInt8), x = Param(2, dtypes::kFloat32);
    UOpPtr rs = UOp::Range(8, 0), ri = UOp::Range(1536, 1), rk = UOp::Range(576, 2, AxisType::kReduce);
    UOpPtr w = UOp::Make(Op::CAST, dtypes::kFloat32, {Ld(Idx(q, ri * 576 + rk))});
    UOpPtr red = UOp::Make(Op::REDUCE, dtypes::kFloat32, {w * Ld(Idx(x, rs * 576 + rk)), rk}, Op::ADD);
    auto opts = codegen::HeuristicOpts(UOp::Sink({End(St(Idx(out, rs * 1536 + ri), red), {rs, ri})}), Avx512TwoCores());
    ASSERT_TRUE(opts.ok()) << opts.status();
    EXPECT_EQ(std::count(opts->begin(), opts->end(), Opt{OptOp::kUnroll, 0, 2}), 1) << opts->size();
    EXPECT_EQ(std::count(opts->begin(), opts->end(), Opt{OptOp::kUpcast, 0, 8}), 1) << opts->size();
  }
  // A row that is not whole blocks of 32 keeps one half block per iteration.
  auto odd = codegen::HeuristicOpts(QuantRowKernel(1536, 16 * 37), Avx512TwoCores());
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(std::count_if(odd->begin(), odd->end(), [](const Opt& o) { return o.op == OptOp::kUnroll; }), 0);
}

// Attention's scores over a transposed key cache, out[h, p] = sum_d q[h, 2d] * kt[h / 3, d, p] (three heads per key
// head): positions contiguous in the cache, the head dimension a row apart, and no load contiguous along d (the LLM's q is RoPE'd from pairs in the
// kernel). Four independent 16-wide accumulators along the positions and no reduce unroll (the generic steps gave
// one 8-wide accumulator with four dependent multiply-adds per iteration).
TEST(LowerTest, TransposedKeyScoresTakeSeveralVectorAccumulators) {
  UOpPtr out = Param(0, dtypes::kFloat32), q = Param(1, dtypes::kFloat32), kt = Param(2, dtypes::kFloat32);
  UOpPtr rh = UOp::Range(9, 0), rp = UOp::Range(128, 1), rd = UOp::Range(64, 2, AxisType::kReduce);
  UOpPtr red = UOp::Make(Op::REDUCE, dtypes::kFloat32, {Ld(Idx(q, rh * 128 + rd * 2)) * Ld(Idx(kt, (rh / 3) * 16384 + rd * 256 + rp)), rd},
                         Op::ADD);
  Target t = Avx512TwoCores();
  t.supports_vectors = true;  // the CPU target's (LLVM renders vector loads)
  auto opts = codegen::HeuristicOpts(UOp::Sink({End(St(Idx(out, rh * 128 + rp), red), {rh, rp})}), t);
  ASSERT_TRUE(opts.ok()) << opts.status();
  EXPECT_EQ(*opts, (std::vector<Opt>{{OptOp::kUpcast, 1, 16}, {OptOp::kUpcast, 1, 4}}));
}

// GGUF's Q4 rows: byte j of a block holds weights j (low nibble) and j + 16 (high), the choice a WHERE on the
// weight's half of its block, an index comparison (gguf_io.cc builds it from a padded constant, which lowers to
// exactly that). Once the reduce is unrolled to whole blocks the comparison is a constant in each unrolled copy and
// "postopt symbolic" folds the WHERE away; left in, it was a select per weight that kept the row scalar (SmolLM2's
// one-slot decode step 3x slower than with the selector loaded from a buffer).
TEST(LowerTest, NibbleSelectFoldsOnceUnrolledToWholeBlocks) {
  UOpPtr out = Param(0, dtypes::kFloat32), q = Param(1, dtypes::kUInt8), x = Param(2, dtypes::kFloat32);
  UOpPtr ri = UOp::Range(1536, 0), rk = UOp::Range(576, 1, AxisType::kReduce);
  UOpPtr byte = Ld(Idx(q, ri * 288 + (rk / 32) * 16 + rk % 16));
  UOpPtr lo = UOp::Make(Op::AND, dtypes::kUInt8, {byte, UOp::Const(dtypes::kUInt8, int64_t{15})});
  UOpPtr hi = UOp::Make(Op::SHR, dtypes::kUInt8, {byte, UOp::Const(dtypes::kUInt8, int64_t{4})});
  UOpPtr high_half = Lt(UOp::Const(dtypes::kIndex, int64_t{0}), (rk / 16) % 2);
  UOpPtr w = UOp::Make(Op::CAST, dtypes::kFloat32, {Where(high_half, hi, lo)});
  UOpPtr red = UOp::Make(Op::REDUCE, dtypes::kFloat32, {w * Ld(Idx(x, rk)), rk}, Op::ADD);
  UOpPtr ast = UOp::Sink({End(St(Idx(out, ri), red), {ri})});
  auto wheres = [](const Program& p) {
    return std::count_if(p.uops.begin(), p.uops.end(), [](const UOpPtr& u) { return u->op() == Op::WHERE; });
  };
  auto p = codegen::LowerKernel(ast, Avx512TwoCores(), {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(wheres(*p), 0);
  // Not unrolled, the half is a run-time value and the WHERE stays.
  auto q0 = NoOpt(ast);
  ASSERT_TRUE(q0.ok()) << q0.status();
  EXPECT_GE(wheres(*q0), 1);
}

// The row kernel's 16 accumulator lanes take both unrolled half blocks' products as one vector update per iteration
// and are summed after the loop as a tree of halves ("vectorize accumulators"): no scalar update of an accumulator
// slot is left, and the lanes' sum is 8-, 4-, 2- and 1-lane adds, not a chain of 15 scalar ones. (LLVM's SLP vectorizer packed such
// updates only while a kernel had few of them: a batched decode step's 8-slot kernel stayed scalar.)
TEST(LowerTest, AccumulatorLanesUpdateAsOneVectorAndSumAsATree) {
  Target t = Avx512TwoCores();
  t.supports_vectors = true;
  auto p = codegen::LowerKernel(QuantRowKernel(1536, 576), t, {});
  ASSERT_TRUE(p.ok()) << p.status();
  int vector_updates = 0, scalar_updates = 0;
  std::vector<int> tree_adds;
  for (const UOpPtr& u : p->uops) {
    if (u->op() == Op::STORE && u->src(0)->op() == Op::INDEX && u->src(0)->src(0)->op() == Op::DEFINE_REG &&
        u->src(1)->op() != Op::CONST) {
      (u->src(1)->dtype().count == 16 ? vector_updates : scalar_updates)++;
    }
    if (u->op() == Op::ADD && u->src(0)->op() == Op::GEP && u->src(1)->op() == Op::GEP)
      tree_adds.push_back(u->dtype().count);
  }
  EXPECT_EQ(vector_updates, 1) << "both half blocks' products added to the 16 lanes at once";
  EXPECT_EQ(scalar_updates, 0);
  std::sort(tree_adds.begin(), tree_adds.end());
  EXPECT_EQ(tree_adds, (std::vector<int>{1, 2, 4, 8})) << "the 16 lanes summed as a tree";
  // Without vectors (C-style targets) the lanes stay scalar.
  auto scalar = codegen::LowerKernel(QuantRowKernel(1536, 576), Avx512TwoCores(), {});
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  for (const UOpPtr& u : scalar->uops) EXPECT_EQ(u->dtype().count, 1) << OpName(u->op());
}

// A pointwise conv with its bias and ReLU, out[co, p] = max(sum_ci w[co, ci] * x[ci, p] + b[co], 0), tiles as
// 8 output channels x 32 pixels with the pixels as lanes. Its epilogue (read an accumulator lane, add the bias, clamp,
// store) is built as vector code: every store to the output is a 16-lane vector of consecutive pixels, none is a
// scalar lane. (LLVM's SLP vectorizer left it scalar: 256 extracts, adds, maxes and stores per tile.)
TEST(LowerTest, ConvEpilogueStoresWholeVectors) {
  const int64_t ci = 64, co = 64, px = 3136;
  UOpPtr out = Param(0, dtypes::kFloat32), x = Param(1, dtypes::kFloat32), w = Param(2, dtypes::kFloat32),
         b = Param(3, dtypes::kFloat32);
  UOpPtr rco = UOp::Range(co, 0), rp = UOp::Range(px, 1), rci = UOp::Range(ci, 2, AxisType::kReduce);
  UOpPtr red = UOp::Make(Op::REDUCE, dtypes::kFloat32, {Ld(Idx(w, rco * ci + rci)) * Ld(Idx(x, rci * px + rp)), rci},
                         Op::ADD);
  UOpPtr biased = red + Ld(Idx(b, rco));
  UOpPtr zero = UOp::Const(dtypes::kFloat32, 0.0);
  UOpPtr relu = UOp::Make(Op::WHERE, dtypes::kFloat32,
                          {UOp::Make(Op::CMPLT, dtypes::kBool, {zero, biased}), biased, zero});
  UOpPtr ast = UOp::Sink({End(St(Idx(out, rco * px + rp), relu), {rco, rp})});
  auto output_stores = [](const Program& p, int lanes) {
    return std::count_if(p.uops.begin(), p.uops.end(), [&](const UOpPtr& u) {
      return u->op() == Op::STORE && u->src(0)->op() == Op::INDEX && u->src(0)->src(0)->op() == Op::PARAM &&
             u->src(1)->dtype().count == lanes;
    });
  };
  Target t = Avx512TwoCores();
  t.supports_vectors = true;
  auto p = codegen::LowerKernel(ast, t, {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(output_stores(*p, 1), 0) << "no scalar lane stores";
  EXPECT_EQ(output_stores(*p, 16), 16) << "8 channels x 2 vectors of 16 pixels";
  // Without vectors (C-style targets) the stores stay scalar lanes.
  auto scalar = codegen::LowerKernel(ast, Avx512TwoCores(), {});
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(output_stores(*scalar, 16), 0);
  EXPECT_GT(output_stores(*scalar, 1), 0);
}

// y[b, c, p] = 2 * x[b, c, p] over a symbolic batch b in [1, max_rows] (a dynamic batch's rows), 32 x 400 per row.
UOpPtr SymbolicRowsKernel(int64_t max_rows) {
  UOpPtr out = Param(0, dtypes::kFloat32), x = Param(1, dtypes::kFloat32);
  UOpPtr rb = UOp::Make(Op::RANGE, dtypes::kIndex, {UOp::Variable("batch", 1, max_rows)}, AxisArg{0, AxisType::kLoop});
  UOpPtr rc = UOp::Range(32, 1), rp = UOp::Range(400, 2);
  UOpPtr i = (rb * 32 + rc) * 400 + rp;
  return UOp::Sink({End(St(Idx(out, i), Ld(Idx(x, i)) * UOp::Const(dtypes::kFloat32, 2.0)), {rb, rc, rp})});
}

TEST(LowerTest, SymbolicRowsCountAtTheirBoundForThreads) {
  // 12800 elements per row: at up to 64 rows the kernel takes two threads over its channel axis (the symbolic axis
  // cannot be split evenly); at up to 4 rows (51200 elements) one thread is enough.
  auto wide = codegen::HeuristicOpts(SymbolicRowsKernel(64), Avx512TwoCores());
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(std::count_if(wide->begin(), wide->end(), [](const Opt& o) { return o.op == OptOp::kThread; }), 1);
  auto few = codegen::HeuristicOpts(SymbolicRowsKernel(4), Avx512TwoCores());
  ASSERT_TRUE(few.ok()) << few.status();
  EXPECT_EQ(std::count_if(few->begin(), few->end(), [](const Opt& o) { return o.op == OptOp::kThread; }), 0);
}

// out[c] = sum_p (x0 + x1 + ... + x{n-1})[c, p] * scale[c] over 2048 x 49 (ResNet-50's average pool over a
// recomputed residual chain): 100K products, under the 128K that two threads need, on one thread with two whole
// inputs; with eight whole inputs each element costs more and the kernel takes both threads. Broadcast inputs (one
// value per channel) do not count.
UOpPtr ManyInputPoolKernel(int whole_inputs, int broadcast_inputs) {
  UOpPtr out = Param(0, dtypes::kFloat32);
  UOpPtr rc = UOp::Range(2048, 0), rp = UOp::Range(49, 1, AxisType::kReduce);
  UOpPtr v = UOp::Const(dtypes::kFloat32, 0.0);
  int slot = 1;
  for (int i = 0; i < whole_inputs; ++i) v = v + Ld(Idx(Param(slot++, dtypes::kFloat32), rc * 49 + rp));
  for (int i = 0; i < broadcast_inputs; ++i) v = v * Ld(Idx(Param(slot++, dtypes::kFloat32), rc));
  UOpPtr red = UOp::Make(Op::REDUCE, dtypes::kFloat32, {v, rp}, Op::ADD);
  return UOp::Sink({End(St(Idx(out, rc), red), {rc})});
}

TEST(LowerTest, WholeInputLoadsWeighTheThreadSplit) {
  auto threads = [](const UOpPtr& k) {
    auto opts = codegen::HeuristicOpts(k, Avx512TwoCores());
    EXPECT_TRUE(opts.ok()) << opts.status();
    return opts.ok() ? std::count_if(opts->begin(), opts->end(), [](const Opt& o) { return o.op == OptOp::kThread; })
                     : -1;
  };
  EXPECT_EQ(threads(ManyInputPoolKernel(2, 0)), 0);
  EXPECT_EQ(threads(ManyInputPoolKernel(2, 6)), 0) << "broadcast loads do not weigh";
  EXPECT_EQ(threads(ManyInputPoolKernel(8, 0)), 1);
}

// A conv weight gradient in the form the Conv2d gradient override builds (engine/tensor/nn_ops.cc):
// out[nb, ci, ky, kx, co] = sum_{b, oy, ox} x[nb*bc + b, ci, oy + ky, ox + kx] * g[nb*bc + b, oy, ox, co] with the output
// gradient g channels-last, so co is contiguous in g and in the output and broadcast in x.
UOpPtr ConvWeightGradKernel(int64_t nb, int64_t bc, int64_t ci, int64_t co, int64_t hw, int64_t k) {
  const int64_t o = hw - k + 1;
  UOpPtr out = Param(0, dtypes::kFloat32), x = Param(1, dtypes::kFloat32), g = Param(2, dtypes::kFloat32);
  UOpPtr rnb = UOp::Range(nb, 0), rci = UOp::Range(ci, 1), rky = UOp::Range(k, 2), rkx = UOp::Range(k, 3),
         rco = UOp::Range(co, 4), rb = UOp::Range(bc, 5, AxisType::kReduce),
         roy = UOp::Range(o, 6, AxisType::kReduce), rox = UOp::Range(o, 7, AxisType::kReduce);
  UOpPtr sample = rnb * bc + rb;
  UOpPtr xv = Ld(Idx(x, (sample * ci + rci) * (hw * hw) + (roy + rky) * hw + rox + rkx));
  UOpPtr gv = Ld(Idx(g, ((sample * o + roy) * o + rox) * co + rco));
  UOpPtr red = UOp::Make(Op::REDUCE, dtypes::kFloat32, {xv * gv, rb, roy, rox}, Op::ADD);
  return UOp::Sink(
      {End(St(Idx(out, (((rnb * ci + rci) * k + rky) * k + rkx) * co + rco), red), {rnb, rci, rky, rkx, rco})});
}

TEST(LowerTest, ConvWeightGradientTile) {
  const Target avx512 = Avx512TwoCores();
  // conv3 (32 -> 64 channels, 3x3, 10x10 input): the whole 3-wide kx row axis, and with registers left over the
  // lane tile widens to all 64 output channels (3 x 4 vectors = 12 accumulators).
  auto conv3 = codegen::HeuristicOpts(ConvWeightGradKernel(32, 16, 32, 64, 10, 3), avx512);
  ASSERT_TRUE(conv3.ok()) << conv3.status();
  EXPECT_EQ(*conv3, (std::vector<Opt>{{OptOp::kThread, 0, 2},
                                      {OptOp::kUpcast, 4, 16},
                                      {OptOp::kUpcast, 4, 4},
                                      {OptOp::kUpcast, 3, 3},
                                      {OptOp::kUnroll, 2, 2}}));
  // conv2 (32 -> 32, 5x5): the whole 5-wide kx row axis, 5 rows of 32 lanes (10 accumulators).
  auto conv2 = codegen::HeuristicOpts(ConvWeightGradKernel(128, 4, 32, 32, 24, 5), avx512);
  ASSERT_TRUE(conv2.ok()) << conv2.status();
  EXPECT_EQ(*conv2, (std::vector<Opt>{{OptOp::kThread, 0, 2},
                                      {OptOp::kUpcast, 4, 16},
                                      {OptOp::kUpcast, 4, 2},
                                      {OptOp::kUpcast, 3, 5},
                                      {OptOp::kUnroll, 2, 2}}));
}

// A conv forward in the form Conv2d builds with output-channels-last weights (engine/tensor/nn_ops.cc LaneWeights):
// out[b, co, oy, ox] = sum_{ci, ky, kx} x[b, ci, oy + ky, ox + kx] * w[ci, ky, kx, co]. co moves w by 1 and x by 0,
// but the output (NCHW) by OH * OW.
UOpPtr ConvChannelsLastKernel(int64_t b, int64_t ci, int64_t co, int64_t hw, int64_t k,
                              bool epilogue = false) {
  const int64_t o = hw - k + 1;
  UOpPtr out = Param(0, dtypes::kFloat32), x = Param(1, dtypes::kFloat32),
         w = Param(2, dtypes::kFloat32);
  UOpPtr rb = UOp::Range(b, 0), rco = UOp::Range(co, 1), roy = UOp::Range(o, 2),
         rox = UOp::Range(o, 3), rci = UOp::Range(ci, 4, AxisType::kReduce),
         rky = UOp::Range(k, 5, AxisType::kReduce), rkx = UOp::Range(k, 6, AxisType::kReduce);
  UOpPtr xv = Ld(Idx(x, (rb * ci + rci) * (hw * hw) + (roy + rky) * hw + rox + rkx));
  UOpPtr wv = Ld(Idx(w, ((rci * k + rky) * k + rkx) * co + rco));
  UOpPtr red = UOp::Make(Op::REDUCE, dtypes::kFloat32, {xv * wv, rci, rky, rkx}, Op::ADD);
  const UOpPtr oi = ((rb * co + rco) * o + roy) * o + rox;
  if (epilogue) {
    // A fused epilogue read once per output, outside the reduce loop: a per-output mask (NCHW, so it moves by
    // OH * OW along the channel lanes like the store) times the sum.
    red = red * Ld(Idx(Param(3, dtypes::kFloat32), oi));
  }
  return UOp::Sink({End(St(Idx(out, oi), red), {rb, rco, roy, rox})});
}

TEST(LowerTest, ConvOutputChannelLanes) {
  const Target avx512 = Avx512TwoCores();
  // conv2 (32 -> 32, 5x5, 24x24 input): the 20-wide ox axis stores contiguously but would fill 20 of 32 lanes, so the
  // lanes are the 32 output channels (stored 400 apart), and the rows the oy axis (5 of 20: 10 accumulators), not ox,
  // along which the stores are consecutive.
  auto conv2 = codegen::HeuristicOpts(ConvChannelsLastKernel(512, 32, 32, 24, 5), avx512);
  ASSERT_TRUE(conv2.ok()) << conv2.status();
  EXPECT_EQ(*conv2, (std::vector<Opt>{{OptOp::kThread, 0, 2},
                                      {OptOp::kUpcast, 1, 16},
                                      {OptOp::kUpcast, 1, 2},
                                      {OptOp::kUpcast, 1, 5}}));
  auto p = codegen::LowerKernel(ConvChannelsLastKernel(512, 32, 32, 24, 5), avx512, {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->name, "r_2_256_4_20_32_5_5_2_16_5");
  EXPECT_TRUE(p->no_gather);  // the 5 rows' input values are 24 floats apart
  // AVX-512 channel-lane tiles compile with the SLP bundles capped at one register (uncapped, LLVM packed four rows
  // with their lanes reversed and permuted every weight vector); 8-lane AVX2 tiles keep the default.
  EXPECT_EQ(p->slp_max_vf, 16);
  Target avx2 = avx512;
  avx2.vector_bytes = 32;
  auto narrow = codegen::LowerKernel(ConvChannelsLastKernel(512, 32, 32, 24, 5), avx2, {});
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  EXPECT_TRUE(narrow->no_gather);
  EXPECT_EQ(narrow->slp_max_vf, 0);
  // The channel lanes are the fastest-varying copies: the tile's first two output stores are one channel apart.
  std::vector<UOpPtr> stores;
  for (const UOpPtr& u : p->uops)
    if (u->op() == Op::STORE && u->src(0)->op() == Op::INDEX &&
        u->src(0)->src(0)->op() == Op::PARAM && u->src(0)->src(0)->ArgInt() == 0)
      stores.push_back(u);
  ASSERT_EQ(stores.size(), 32u * 5u);
  const UOpPtr& i0 = stores[0]->src(0)->src(1);
  const UOpPtr& i1 = stores[1]->src(0)->src(1);
  ASSERT_EQ(i1->op(), Op::ADD);
  int64_t step = 0;
  EXPECT_TRUE((i1->src(0) == i0 && codegen::ConstInt(i1->src(1), &step)) ||
              (i1->src(1) == i0 && codegen::ConstInt(i1->src(0), &step)));
  EXPECT_EQ(step, 20 * 20);
  // An epilogue load that moves with the channels, like the store, does not cost the tile its channel lanes.
  auto fused = codegen::HeuristicOpts(ConvChannelsLastKernel(512, 32, 32, 24, 5, true), avx512);
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(*fused, *conv2);
  // A short reduce (16 products per output) keeps the contiguous x lanes, even though they are partial vectors.
  auto shallow = codegen::HeuristicOpts(ConvChannelsLastKernel(512, 16, 32, 22, 1), avx512);
  ASSERT_TRUE(shallow.ok()) << shallow.status();
  EXPECT_EQ(std::count(shallow->begin(), shallow->end(), Opt{OptOp::kUpcast, 1, 16}), 0);
}

// A 1-D convolution over a zero-padded view, as Conv2d's input gradient reads its padded output gradient:
// out[i] = sum_k (pad <= i + k < pad + m ? x[i + k - pad] : 0) * w[k], for i < n (n = m + 2 * pad - K + 1).
// `plus_one` adds 1 to each product instead, so the terms outside the window are not zeros.
UOpPtr PaddedConvKernel(int64_t m, int64_t k, int64_t pad, bool plus_one = false) {
  const int64_t n = m + 2 * pad - k + 1;
  UOpPtr out = Param(0, dtypes::kFloat32), x = Param(1, dtypes::kFloat32),
         w = Param(2, dtypes::kFloat32);
  UOpPtr ri = UOp::Range(n, 0), rk = UOp::Range(k, 1, AxisType::kReduce);
  UOpPtr pos = ri + rk;
  UOpPtr valid =
      UOp::Make(Op::AND, dtypes::kBool, {Lt(UOp::ConstInt(pad - 1), pos), Lt(pos, pad + m)});
  UOpPtr xv = Ld(UOp::Make(Op::INDEX, x->dtype(), {x, pos - pad, valid}));
  UOpPtr term = Where(valid, xv, UOp::Const(dtypes::kFloat32, 0.0)) * Ld(Idx(w, rk));
  if (plus_one) term = term + UOp::Const(dtypes::kFloat32, 1.0);
  UOpPtr red = UOp::Make(Op::REDUCE, dtypes::kFloat32, {term, rk}, Op::ADD);
  return UOp::Sink({End(St(Idx(out, ri), red), {ri})});
}

// out[i, t, j] = in[j, i, t] (or in[j, i, T - 1 - t], a flipped view): a transposing copy whose stores are contiguous
// along j and whose loads move along j by I * T elements (a weight gradient stored [Ci, KH, KW, Co] and transposed
// back, a weight packed lanes-last).
UOpPtr TransposeKernel(int64_t ni, int64_t nt, int64_t nj, bool flipped) {
  UOpPtr out = Param(0, dtypes::kFloat32), in = Param(1, dtypes::kFloat32);
  UOpPtr ri = UOp::Range(ni, 0), rt = UOp::Range(nt, 1), rj = UOp::Range(nj, 2);
  UOpPtr t = flipped ? UOp::Const(dtypes::kIndex, nt - 1) - rt : rt;
  UOpPtr v = Ld(Idx(in, (rj * ni + ri) * nt + t));
  return UOp::Sink({End(St(Idx(out, (ri * nt + rt) * nj + rj), v), {ri, rt, rj})});
}

TEST(LowerTest, TransposingCopyTilesBothAxes) {
  Target avx512 = Avx512TwoCores();
  avx512.supports_vectors = true;
  // (i, t) merge into one axis contiguous in the loads: 8 of its elements per tile row, 16 lanes of j per row; 128K
  // elements: both threads.
  auto tiled = codegen::LowerKernel(TransposeKernel(64, 8, 256, false), avx512, {});
  ASSERT_TRUE(tiled.ok()) << tiled.status();
  EXPECT_EQ(tiled->applied_opts, (std::vector<std::string>{"UPCAST(1,16)", "UPCAST(0,8)", "THREAD(0,2)"}));
  // 9 taps walked backwards (a flipped 3x3 weight), not merged with i: the taps whole.
  auto flipped = codegen::LowerKernel(TransposeKernel(64, 9, 512, true), avx512, {});
  ASSERT_TRUE(flipped.ok()) << flipped.status();
  EXPECT_EQ(flipped->applied_opts, (std::vector<std::string>{"UPCAST(2,16)", "UPCAST(1,0)", "THREAD(0,2)"}));
  // Lanes 128 elements apart (under 2 KB): one upcast.
  auto near = codegen::HeuristicOpts(TransposeKernel(16, 8, 256, false), avx512);
  ASSERT_TRUE(near.ok()) << near.status();
  EXPECT_EQ(std::count_if(near->begin(), near->end(), [](const Opt& o) { return o.op == OptOp::kUpcast; }), 1);
  // A copy contiguous on both sides keeps one upcast; so does a target without vector loads.
  auto plain = codegen::HeuristicOpts(RowBiasKernel(64, 256), avx512);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(std::count_if(plain->begin(), plain->end(), [](const Opt& o) { return o.op == OptOp::kUpcast; }), 1);
  auto scalar = codegen::HeuristicOpts(TransposeKernel(64, 8, 256, false), Avx512TwoCores());
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(std::count_if(scalar->begin(), scalar->end(), [](const Opt& o) { return o.op == OptOp::kUpcast; }), 1);
}

TEST(LowerTest, ReduceLoopNarrowsToThePaddedWindow) {
  // The reduce loop runs over [max(0, 4 - i), min(5, 24 - i)): its end depends on i, and the window's conditions
  // leave the load (no gate, no select).
  auto p = NoOpt(PaddedConvKernel(20, 5, 4));
  ASSERT_TRUE(p.ok()) << p.status();
  int reduce_loops = 0;
  for (const UOpPtr& u : p->uops) {
    if (u->op() == Op::RANGE && std::get<AxisArg>(u->arg()).type == AxisType::kReduce) {
      ++reduce_loops;
      EXPECT_NE(u->src(0)->op(), Op::CONST);
    }
    EXPECT_NE(u->op(), Op::WHERE);
    if (u->op() == Op::INDEX || u->op() == Op::LOAD) { EXPECT_LT(u->num_src(), 3u); }
  }
  EXPECT_EQ(reduce_loops, 1);
  // Terms that are not 0 outside the window keep the whole loop and the gate.
  auto q = NoOpt(PaddedConvKernel(20, 5, 4, true));
  ASSERT_TRUE(q.ok()) << q.status();
  bool gated = false;
  for (const UOpPtr& u : q->uops) {
    if (u->op() == Op::RANGE && std::get<AxisArg>(u->arg()).type == AxisType::kReduce) {
      int64_t end = 0;
      EXPECT_TRUE(codegen::ConstInt(u->src(0), &end));
      EXPECT_EQ(end, 5);
    }
    gated |= (u->op() == Op::INDEX || u->op() == Op::LOAD) && u->num_src() == 3;
  }
  EXPECT_TRUE(gated);
}

TEST(LowerTest, NarrowingDropsTrueGatesThroughItsTable) {
  // The narrowed loop's conditions become `true` and the "drop_true_gates" table removes them; its hits are counted
  // under the stage's name and DEBUG>=5 names the table.
  RewriteStats stats;
  codegen::LowerOptions opts;
  opts.stats = &stats;
  ::testing::internal::CaptureStderr();
  absl::StatusOr<Program> p;
  {
    Context ctx({{Knob::kNoOpt, 1}, {Knob::kDebug, 5}});
    p = codegen::LowerKernel(PaddedConvKernel(20, 5, 4), Target{}, opts);
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NE(err.find("pass 'narrow gated reduces' [drop_true_gates]"), std::string::npos) << err;
  int64_t dropped = 0;
  for (const RewriteStats::RuleRow& r : stats.Rules()) {
    if (r.pass == "narrow gated reduces" && r.matcher == "drop_true_gates") dropped += r.hits;
  }
  EXPECT_GE(dropped, 1) << stats.Format();
}

TEST(LowerTest, WideIndexUsesInt64) {
  UOpPtr out = Param(0, dtypes::kUInt8);
  UOpPtr r0 = UOp::Range(int64_t{3} << 30, 0);
  auto p = NoOpt(UOp::Sink({End(St(Idx(out, r0), UOp::Const(dtypes::kUInt8, int64_t{1})), {r0})}));
  ASSERT_TRUE(p.ok()) << p.status();
  for (const UOpPtr& u : p->uops)
    if (u->op() == Op::RANGE) { EXPECT_EQ(u->dtype(), dtypes::kInt64); }
  EXPECT_EQ(p->buffers[0].size, int64_t{3} << 30);
}

// "vectorize loads": only runs of consecutive loads of which one stored value reads several elements, none shared
// between stored values (side-by-side pool windows), become vector loads; lanes that each load their own element, and
// overlapping windows, stay scalar loads for LLVM's SLP vectorizer.
TEST(LowerTest, VectorLoadsOnlyForWindowRuns) {
  Target t;
  t.supports_vectors = true;
  // Vector loads split into lanes (GEPs): what "vectorize loads" makes. (Lanes that are one expression lane by lane
  // up to a run of stores are built as vector code whole, loads included, by "vectorize accumulators".)
  auto count = [](const Program& p) {
    absl::flat_hash_set<const UOp*> split;
    for (const UOpPtr& u : p.uops)
      if (u->op() == Op::GEP) split.insert(u->src(0).get());
    int n = 0;
    for (const UOpPtr& u : p.uops) n += u->op() == Op::LOAD && u->dtype().count > 1 && split.contains(u.get());
    return n;
  };
  // Upcast lanes of an elementwise kernel and unrolled lanes of a sum that each keep an accumulator: no change.
  LowerOptions upcast{true, {Opt{OptOp::kUpcast, 1, 8}}};
  auto p = codegen::LowerKernel(RowBiasKernel(4, 16), t, upcast);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(count(*p), 0);
  LowerOptions upcast_rows{true, {Opt{OptOp::kUpcast, 0, 4}}};
  p = codegen::LowerKernel(SumKernel(8, 16), t, upcast_rows);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(count(*p), 0);
  // Unrolled reduce lanes summed into one output: one vector load of 8, each lane a GEP.
  LowerOptions unroll{true, {Opt{OptOp::kUnroll, 0, 8}}};
  p = codegen::LowerKernel(SumKernel(8, 16), t, unroll);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(count(*p), 1);
  // Overlapping windows (out[i] = a[i] + a[i + 1], 8 lanes): each element feeds two outputs, no change.
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32);
  UOpPtr r0 = UOp::Range(64, 0);
  UOpPtr stencil = UOp::Sink({End(St(Idx(out, r0), Ld(Idx(a, r0)) + Ld(Idx(a, r0 + 1))), {r0})});
  p = codegen::LowerKernel(stencil, t, LowerOptions{true, {Opt{OptOp::kUpcast, 0, 8}}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(count(*p), 0);
  // Without supports_vectors the same opts keep scalar loads.
  p = codegen::LowerKernel(SumKernel(8, 16), Target{}, unroll);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(count(*p), 0);
}

TEST(LowerTest, MalformedAstsAreErrors) {
  EXPECT_EQ(NoOpt(UOp::Const(dtypes::kFloat32, 1.0)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NoOpt(UOp::Sink({UOp::Const(dtypes::kFloat32, 1.0)})).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln
