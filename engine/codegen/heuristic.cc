// The hand-coded CPU heuristic (tinygrad codegen/opt/heuristic.py, adapted to CPUs): register tiles for matmuls and
// convolutions (MatmulTile), vector accumulators for other reductions (AccTile), merged axes, and the elementwise
// upcasts and thread split; elementwise_axes.cc has its steps for gated in-place stores and stacked values. Opts are
// applied through opt.cc's ApplyOpt.
#include <algorithm>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "engine/base/status.h"
#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"
#include "engine/symbolic/range.h"
#include "engine/symbolic/symbolic.h"

namespace kiln::codegen {

namespace {

// Per global-buffer INDEX: how far its element offset moves when output axis `axis` steps from 0 to `step` (every
// other range at 0); nullopt when the offset does not fold to constants. `is_store` marks the indices STOREs write
// through.
struct IndexStride {
  const UOp* index;
  bool is_store;
  std::optional<int64_t> stride;
  // The index moves with a reduce range (a load in the reduce loop, not in the epilogue).
  bool in_reduce = false;
  // The INDEX carries a gate (a padded view's bounds).
  bool gated = false;
};

std::vector<IndexStride> StridesAlong(const UOpPtr& sink, const UOp* axis, int64_t step = 1) {
  absl::flat_hash_map<const UOp*, UOpPtr> at0, at1;
  absl::flat_hash_set<const UOp*> stored;
  for (const UOp* u : Toposort(sink)) {
    if (u->op() == Op::STORE && u->num_src() > 0) stored.insert(u->src(0).get());
    if (u->op() != Op::RANGE) continue;
    at0.emplace(u, UOp::Const(u->dtype(), int64_t{0}));
    at1.emplace(u, UOp::Const(u->dtype(), u == axis ? step : int64_t{0}));
  }
  std::vector<IndexStride> out;
  for (const UOp* u : Toposort(sink)) {
    if (u->op() != Op::INDEX || u->num_src() < 2 || u->src(0)->op() != Op::PARAM) continue;
    int64_t a = 0, b = 0;
    IndexStride s{u, stored.contains(u), std::nullopt};
    s.gated = u->num_src() > 2;
    for (const UOp* v : Toposort(u->src(1))) {
      const auto* a = v->op() == Op::RANGE ? std::get_if<AxisArg>(&v->arg()) : nullptr;
      s.in_reduce |= a != nullptr && a->type == AxisType::kReduce;
    }
    if (ConstInt(Simplify(Substitute(u->src(1), at0)), &a) && ConstInt(Simplify(Substitute(u->src(1), at1)), &b))
      s.stride = b - a;
    out.push_back(s);
  }
  return out;
}

// The product of the symbolic output axes' upper bounds (1 without any), at most 2^16.
int64_t SymbolicRowsBound(const UOpPtr& cur, const LowerContext& ctx) {
  constexpr int64_t kCap = int64_t{1} << 16;
  int64_t rows = 1;
  for (const UOpPtr& r : AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal}, /*symbolic=*/true))
    if (RangeSize(r.get()) < 0) rows = std::min(kCap, rows * std::clamp<int64_t>(VMax(r->src(0)), 1, kCap));
  return rows;
}

// The least work a thread takes (tinygrad's step 10 used 128K). 64K: memory-bound reduces of 128-256K elements (MiniLM's
// softmax maxima, 12 x 128 rows of 128 scores: 56 us on one core) run on both cores; MiniLM 14.5-14.9 -> 13.6-14.4 ms,
// the CNN (batch 1 and 64), ResNet-50, the training step and the LLM decode step within noise (interleaved pairs,
// 2-core Emerald Rapids).
constexpr int64_t kMinOpsPerThread = 64 * 1024;

// The output axis to split over threads and how many: the most threads (up to the target's) that leave >=
// kMinOpsPerThread ops each, on the outermost axis whose size they divide in whole units (`unit(a)`: a register tile kept whole on that
// axis). The outermost axis first, as before; a later one only when it does not divide: a batch of 17 (a dynamic
// batch) otherwise ran every kernel of the CNN on one core, as slow as a batch of 32. (0, 1) when none splits.
template <typename Unit>
std::pair<int, int> ThreadSplit(const LowerContext& ctx, const std::vector<int64_t>& out, int64_t work, Unit unit) {
  if (!ctx.target.has_threads || ctx.target.max_threads <= 1) return {0, 1};
  for (int t : {32, 16, 12, 8, 6, 5, 4, 3, 2}) {
    if (t > ctx.target.max_threads || work / t < kMinOpsPerThread) continue;
    for (int a = 0; a < static_cast<int>(out.size()); ++a)
      if (out[a] > 1 && out[a] % (t * unit(a)) == 0) return {a, t};
  }
  return {0, 1};
}

// Register tile for a reduce kernel with >= 2 output axes: a matmul C[m, n] = sum_k A[m, k] * B[k, n] (batched or
// not), and convolutions: with output-channels-last weights (Conv2d's LaneWeights) the output channel axis plays n
// and an output row axis m; otherwise the output x axis plays n and the output channel axis m.
//  - The lane axis n: the innermost output axis along which every buffer moves by 0 or 1 element and the output
//    by 1 (vector loads and stores, no gathers). It is upcast by two SIMD vectors' worth of floats when it
//    divides, else by one vector, else, when the whole axis fits in 32 lanes (a conv's 20- or 24-wide rows), by
//    the whole axis (LLVM splits it into one wide and one narrow vector).
//    When that leaves partial vectors (or finds no axis) and each output sums >= kStridedLaneMinReduce products, an
//    axis along which the loads move by 0 or 1 but the output by more, and that fills whole vectors, is taken
//    instead: the stores are then scalar (extracted lanes), a few percent of the FMAs. A conv with output-channel
//    lanes: conv2 of the Fashion-MNIST CNN (20-wide rows, 62% lane use) 63 -> 52 ms forward, conv4 (6-wide rows)
//    21 -> 7 ms (tests/bench/conv_perf on the 2-core Zen 4, lightly loaded). When there is no contiguous store axis,
//    or only one narrower than 8 (a weight gradient stored (Co, Ci, KH, KW), contiguous only along its 3-wide kx),
//    no upcast can vectorize the stores anyway and the alternative is scalar code, so strided lanes are taken from
//    kStridedLaneMinReduceNoTile products: ResNet-50's 7x7 stage-4 weight gradient (49 products per output) ran
//    scalar at 3 GFLOPS, 76.9 -> 3.0 ms (conv_compare.py).
//  - The row axis m: the other output axis along which the most vector-loaded buffers (moving by 1 along n) stay
//    put (move by 0): each vector load is then reused by tm rows (B's rows in a matmul, the input rows in a conv,
//    which do not depend on the output channel). Upcast by tm rows, keeping tm x tn accumulators within 16 SIMD
//    registers' worth on AVX-512 (8 x 32 floats), 12 on AVX2 (6 x 16). 20 or 24 accumulators measured no faster
//    for conv2; 5 rows (10 accumulators) beat 2 for conv3's 10-wide input gradient (9.6 vs 11.3 ms) and tie 4 for
//    conv2.
//  - The last reduce axis is unrolled by 2 when even (4 measured no faster and doubles the LLVM compile time of a
//    512-lane body).
//  - Threads split the outermost output axis; finally the n loop is placed outside the m loop when n was not
//    upcast whole, so one B panel (K x tn floats) is reused from cache by every row block (measured ~1.3-1.5x
//    faster at 2048^3 than m outside n; a 16 x 16 tile measured slower).
// Returns false (nothing applied) when the kernel does not fit; errors only for opts that fail to apply (a bug).
// Products per output element from which a strided-store lane axis is worth it: the tile's scalar stores (an
// extract and a store per lane, after the reduce loop) are then at most one per four 16-lane FMAs.
constexpr int64_t kStridedLaneMinReduce = 64;
constexpr int64_t kStridedLaneMinReduceNoTile = 8;

template <typename Apply>
absl::StatusOr<bool> MatmulTile(UOpPtr& cur, LowerContext& ctx, const std::vector<int64_t>& out,
                                const std::vector<int64_t>& red, int64_t work, Apply& apply) {
  if (!ctx.has_reduce || out.size() < 2 || red.empty() || work < (int64_t{1} << 18)) return false;
  const int vf = std::max(4, ctx.target.vector_bytes / 4);  // floats per SIMD register
  const std::vector<UOpPtr> axes = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
  int64_t red_per_out = 1;
  for (int64_t r : red) red_per_out *= r;
  // The lane axis: innermost first, among the axes whose store is contiguous; when that leaves partial vectors
  // (or none) and the reduce is long, an axis whose store is strided and that fills whole vectors.
  auto lane_tile = [&](int64_t n) -> int64_t {
    for (int64_t c : {int64_t{2} * vf, int64_t{vf}})
      if (n % c == 0) return c;
    // The whole axis, when it splits into two upcasts of at most 16 lanes each.
    if (n >= 6 && n <= 32) {
      for (int64_t c = 16; c > 1; --c)
        if (n % c == 0 && n / c <= 16) return n;
    }
    return 0;
  };
  auto find_lane = [&](bool strided_store, int& nn, std::vector<IndexStride>& n_strides) {
    for (int a = static_cast<int>(axes.size()) - 1; a >= 0 && nn < 0; --a) {
      std::vector<IndexStride> st = StridesAlong(cur, axes[a].get());
      bool ok = true, store_ok = false, any_vec = false;
      for (const IndexStride& s : st) {
        if (s.is_store && strided_store) {
          if (!s.stride || *s.stride == 0)
            ok = false;
          else
            store_ok |= *s.stride != 1;
        } else if (s.is_store) {
          if (!s.stride || (*s.stride != 0 && *s.stride != 1))
            ok = false;
          else
            store_ok |= *s.stride == 1;
        } else if (strided_store && !s.in_reduce && s.stride) {
          // An epilogue load (a fused bias or ReLU mask, once per output) may move like the store.
        } else if (!s.stride || (*s.stride != 0 && *s.stride != 1)) {
          ok = false;
        } else if (!strided_store && s.gated && s.in_reduce && *s.stride == 1) {
          // A padded input read in vector lanes: the gate differs per lane (row edges). The output channels are
          // taken as lanes instead (below), with the gate per tile row. ResNet-50's stride-1 3x3 convs at 56x56 and
          // 28x28: 6.5-7.1 -> 4.0 ms each (2-core Xeon, AVX2).
          ok = false;
        } else {
          any_vec |= *s.stride == 1 && s.in_reduce;
        }
      }
      if (ok && store_ok && any_vec && (!strided_store || out[a] % vf == 0)) {
        nn = a;
        n_strides = std::move(st);
      }
    }
  };
  int nn = -1;
  bool strided_lanes = false;
  std::vector<IndexStride> n_strides;
  find_lane(false, nn, n_strides);
  // No contiguous store axis at all, or one too narrow for any vector (the heuristic's other upcasts cannot
  // vectorize it either).
  const bool no_lanes = nn < 0 || out[nn] < 8;
  if ((no_lanes && red_per_out >= kStridedLaneMinReduceNoTile) ||
      ((nn < 0 || lane_tile(out[nn]) == 0 || lane_tile(out[nn]) % vf != 0) && red_per_out >= kStridedLaneMinReduce)) {
    int sn = -1;
    std::vector<IndexStride> s_strides;
    find_lane(true, sn, s_strides);
    if (sn >= 0) {
      strided_lanes = true;
      nn = sn;
      n_strides = std::move(s_strides);
    }
  }
  if (nn < 0) return false;
  const int64_t n = out[nn];
  int64_t tn = lane_tile(n);
  if (tn == 0) return false;
  // The row axis: most vector-loaded buffers broadcast along it; ties go to the inner axis. With a strided-store lane
  // axis, not an axis along which the store is contiguous when another fits: LLVM's SLP vectorizer starts from runs
  // of consecutive stores and vectorized the tile along such rows (a conv's x axis: 4-lane vectors of input values
  // times broadcast weights; conv2 forward 160-167 ms, vs 55 ms with its y axis as the rows).
  int nm = -1;
  auto find_row = [&](bool skip_contig_store) {
    int best = 0;
    for (int a = 0; a < static_cast<int>(axes.size()); ++a) {
      if (a == nn) continue;
      std::vector<IndexStride> st = StridesAlong(cur, axes[a].get());
      int score = 0;
      bool store_moves = false, store_contig = false;
      for (size_t i = 0; i < st.size(); ++i) {
        if (st[i].is_store) {
          store_moves |= st[i].stride.value_or(1) != 0;
          store_contig |= st[i].stride == 1;
        } else if (n_strides[i].stride == 1 && st[i].stride == 0) {
          ++score;
        }
      }
      if (skip_contig_store && store_contig) continue;
      if (store_moves && score > 0 && score >= best) {
        best = score;
        nm = a;
      }
    }
  };
  if (strided_lanes) find_row(true);
  if (nm < 0) find_row(false);
  if (nm < 0) return false;
  const int64_t m = out[nm];
  // Accumulator budget: 16 of AVX-512's 32 registers, 12 of AVX2's 16; a row of tn lanes takes ceil(tn / vf).
  // AVX2's budget was 8, which left a row axis of 5 (the CNN's conv2 weight gradient, 5 kernel columns) with one
  // vector of lanes, 5 accumulators: too few to cover the FMA latency. With 12 (the 6 x 16 tile of AVX2 sgemm
  // kernels; 12 accumulators, 2 lane vectors and a broadcast fit the 16 registers), conv_perf on a 2-core Zen 3,
  // best kernel times: the CNN's convs at batch 512 336 -> 282 ms in all (conv2's weight gradient 94 -> 65 ms),
  // ResNet-50's 3x3 convs at batch 1 8-35% faster.
  const int64_t regs = vf >= 16 ? 16 : 12;
  const int64_t max_rows = std::max<int64_t>(2, regs / ((tn + vf - 1) / vf));
  // The whole row axis when it fits (a conv weight gradient's 3- or 5-wide kernel rows), else the largest candidate
  // that divides it.
  int64_t tm = m >= 2 && m <= max_rows ? m : 0;
  for (int64_t c : {16, 12, 10, 8, 7, 6, 5, 4, 3, 2}) {
    if (tm == 0 && c <= max_rows && m % c == 0) tm = c;
  }
  // No divisor within the budget (a 7x7 output's 49 pixels, with two vectors of lanes only 4 rows fit): one vector of
  // lanes leaves room for 7 rows. ResNet-50's stage-4 convs fell back to scalar code here (0.7 GFLOPS).
  if (tm == 0 && tn > vf && tn % vf == 0) {
    tn = vf;
    for (int64_t c : {8, 7, 6, 5, 4, 3, 2}) {
      if (tm == 0 && c <= regs && m % c == 0) tm = c;
    }
  }
  if (tm == 0) return false;
  ctx.no_gather =
      strided_lanes;  // its rows' broadcast scalars lie a row apart (see Program::no_gather)
  // A row axis narrower than the budget leaves accumulators free: widen the lane tile by whole vectors (up to 64
  // lanes) while tm x tn still fits, so each broadcast row value feeds more FMAs (conv3's weight gradient: 3 kernel
  // columns x 64 output channels rather than 3 x 32).
  // On AVX2 the widened tile's lane vectors must fit beside its accumulators: 3 rows x 32 lanes (12 accumulators,
  // 4 lane vectors, a broadcast) spilled, and the CNN's 3x3 weight gradients ran 1.44-1.52x slower than 3 x 16.
  while (tm == m && tn % vf == 0 && 2 * tn <= 64 && n % (2 * tn) == 0 && tm * (2 * tn / vf) <= regs &&
         (vf >= 16 || (tm + 1) * (2 * tn / vf) + 1 <= 16))
    tn *= 2;
  // LLVM 19's SLP vectorizer packs the tile's accumulators (loop phis) in power-of-two chunks, largest first, and
  // leaves scalar what is left when that rest is not itself a power of two: 7 rows x 32 lanes = 224 became one
  // 128-wide bundle and 96 scalar FMAs with spills (ResNet-50's 14x14 1x1 convs at AVX-512: 2.7 ms against 0.7).
  // Such a tile is packed one register at a time instead; others keep the default, which packs 2^a + 2^b tiles
  // well (a cap has left some tiles scalar: the CPU backend then compiles them again without it).
  {
    const int64_t accs = tm * tn, rest = accs - (int64_t{1} << (63 - __builtin_clzll(accs)));
    if (rest != 0 && (rest & (rest - 1)) != 0) ctx.slp_max_vf = vf;
    // With channel lanes at AVX-512 every tile is capped too. Uncapped, the SLP vectorizer bundled four rows'
    // accumulators (128 lanes) in reversed lane order and loaded every weight vector through a vpermps, 4 per 20-32
    // FMAs; on Intel's cores a permute issues to port 5, the second 512-bit FMA port (2-core Xeon, Emerald Rapids,
    // CNN at batch 512: the conv forward and input-gradient tiles 0.63-0.91x). The CPU backend drops a cap that
    // leaves the reduce loop scalar (ResNet-50's 7x7 stem tile). The AVX2 tiles (8 lanes) compiled without permutes.
    if (strided_lanes && vf >= 16) ctx.slp_max_vf = vf;
  }
  const int64_t id_n = std::get<AxisArg>(axes[nn]->arg()).id, id_m = std::get<AxisArg>(axes[nm]->arg()).id;
  auto index_of = [&](int64_t id) {
    std::vector<UOpPtr> now = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
    for (int i = 0; i < static_cast<int>(now.size()); ++i)
      if (std::get<AxisArg>(now[i]->arg()).id == id) return i;
    return -1;
  };
  // Threads over the outermost output axis that splits evenly (keeping whole row or lane tiles on m or n).
  if (auto [axis, t] = ThreadSplit(ctx, out, work, [&](int a) { return a == nm ? tm : (a == nn ? tn : 1); }); t > 1)
    KILN_RETURN_IF_ERROR(apply({OptOp::kThread, axis, t}));
  // Upcast n (in chunks of at most 16 lanes, the innermost chunk first, so lanes stay in memory order), then m.
  const int64_t first_new_id = ctx.next_axis_id;
  for (int64_t left = tn; left > 1;) {
    const int an = index_of(id_n);
    if (an < 0) return absl::InternalError("matmul tile: lane axis vanished");
    int64_t chunk = 1;
    for (int64_t c = std::min<int64_t>(left, 16); c > 1; --c) {
      if (left % c == 0) {
        chunk = c;
        break;
      }
    }
    KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, an, chunk}));
    left /= chunk;
    if (chunk == 1) break;
  }
  // n's lanes expand fastest: its chunks (outer chunk first) after every other upcast. The lane axis may be outside
  // the row axis in the loop nest (a conv's output channels, outside its y axis).
  ctx.lanes_last = {id_n};
  for (int64_t id = ctx.next_axis_id; id-- > first_new_id;) ctx.lanes_last.push_back(id);
  if (const int am = index_of(id_m); am >= 0) {
    // Where the tile's accumulator updates are left to LLVM (targets without "vectorize accumulators", which runs
    // on vector CPU targets), rows split off the top of the axis when the row loads would otherwise be consecutive
    // elements (a conv's pixels, merged or along x): LLVM's SLP vectorizer packs consecutive scalar loads into a
    // vector, and then vectorized the tile across its 4 rows (xmm, weights broadcast) instead of along its 16 lanes,
    // with spills. Rows n / tm apart (like a matmul's A rows, K apart) kept it on the lanes: ResNet-50's 1x1 convs
    // 3.4 -> 1.9 ms. With the updates vectorized by kiln itself, consecutive rows are better: a row block's
    // broadcasts then share one or two cache lines per input channel instead of one line per row (tm lines of the
    // 14x14 1x1 convs' input per channel, which no longer fit L1 across the channel loop): ResNet-50's 1x1 convs at
    // 14x14 and 28x28 with channel lanes 0.69-0.75 -> 0.49 ms and 0.55-0.59 -> 0.51 ms each, the model 3-6% faster
    // (2-core Emerald Rapids, AVX-512); with its AVX2 code (KILN_CPU_AVX512=0) the model 77.1-77.2 -> 69.6-76.3 ms,
    // the stage-4 1x1 convs 1.08-1.10 -> 0.92-0.98 ms.
    bool near = false;
    if (!ctx.target.supports_vectors || ctx.target.has_local) {
      std::vector<IndexStride> ms =
          StridesAlong(cur, AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal})[am].get());
      for (size_t i = 0; i < ms.size() && i < n_strides.size(); ++i)
        near |= !ms[i].is_store && n_strides[i].stride == 0 && ms[i].stride && *ms[i].stride != 0 &&
                std::abs(*ms[i].stride) < vf;
    }
    KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, am, near && tm < m ? -tm : tm}));
  }
  const int last = static_cast<int>(red.size()) - 1;
  const int64_t k = red.back();
  if (k % 2 == 0 && k > 2) {
    KILN_RETURN_IF_ERROR(apply({OptOp::kUnroll, last, 2}));
  } else if (k == 2) {
    KILN_RETURN_IF_ERROR(apply({OptOp::kUnroll, last, 0}));
  }
  // Loop order: the remaining n loop outside the remaining m loop.
  if (n > tn) {
    auto pm = std::find(ctx.order.begin(), ctx.order.end(), id_m);
    auto pn = std::find(ctx.order.begin(), ctx.order.end(), id_n);
    if (pm != ctx.order.end() && pn != ctx.order.end() && pm < pn) std::iter_swap(pm, pn);
  }
  return true;
}

// Vector accumulators for a reduce kernel whose innermost reduce axis r is contiguous (stride 1) or broadcast
// (stride 0) in every load while no output axis is (MatmulTile does not apply): a conv's weight gradient, which sums
// over the output x axis. r is split into v lanes (ACC) that each keep an accumulator through the loop, so each
// iteration is v-wide vector loads and FMAs; the lanes are summed once after the loop. Output axes along which a
// vector load does not move are then upcast so each vector load feeds several accumulators (a conv weight gradient:
// the input rows are shared by every output channel, the output-gradient rows by every kernel column).
constexpr int64_t kQuantBlock = 32;  // weights per block of GGUF's Q4_0, Q4_1 and Q8_0 types

template <typename Apply>
absl::StatusOr<bool> AccTile(UOpPtr& cur, LowerContext& ctx, int64_t work, Apply& apply) {
  if (!ctx.has_reduce || !ctx.target.has_threads) return false;
  const int vf = std::max(4, ctx.target.vector_bytes / 4);
  std::vector<UOpPtr> red = AxesOfType(cur, ctx, {AxisType::kReduce});
  if (red.empty()) return false;
  const UOpPtr rr = red.back();
  const int64_t n = RangeSize(rr.get());
  std::vector<IndexStride> rs = StridesAlong(cur, rr.get());
  bool any_vec = false;
  for (const IndexStride& s : rs) {
    if (s.is_store) continue;
    if (!s.stride || (*s.stride != 0 && *s.stride != 1)) return false;
    any_vec |= *s.stride == 1;
  }
  if (!any_vec) return false;
  // Loads narrower than 32 bits that run along r: quantized weights (a GGUF Q4/Q8 matrix-vector product). An output
  // axis along which such a load moves is not upcast: LLVM's SLP vectorizer then packs the bytes of several rows
  // into one vector (a byte insert per weight) instead of one contiguous load per row. SmolLM2's Q4_1 decode step:
  // 8 rows x 8 lanes took 35 ms, one row x 16 lanes 22 ms (2-core Xeon, AVX2). Axes along which they stay put (the
  // slots of a batched decode) are upcast within the usual budget, so each decoded weight feeds one accumulator per
  // slot; "vectorize shared lanes" (vector_lanes.cc) builds the decoded weights as vector ops, without which LLVM's
  // SLP vectorizer left such kernels scalar. Threads split an axis along which the narrow loads move (the weight
  // rows), so each thread decodes its own half of the weights once, not all of them for half the slots. SmolLM2 at
  // 8 slots (2-core Zen 5): 32.4 ms per step with threads over the slots and 2 slots upcast, 18.2 ms now.
  std::vector<bool> narrow(rs.size(), false);
  for (size_t i = 0; i < rs.size(); ++i) {
    const UOp* param = rs[i].index->src(0).get();
    narrow[i] = !rs[i].is_store && rs[i].stride == 1 && param->dtype().Base().ItemSize() < 4;
  }
  const bool any_narrow = std::find(narrow.begin(), narrow.end(), true) != narrow.end();
  // Small kernels keep the generic heuristic, except quantized ones, whose rows it would gather byte by byte
  // (SmolLM2's fused K and V projections, 384 x 576: 105 -> 40 us), and reductions to one value over a long
  // contiguous axis, where the generic heuristic's one accumulator is a chain of dependent adds (or maxima):
  // DynamicQuantizeLinear's minimum and maximum over 64 x 1024 floats took 108 us, 16 us with vector accumulators
  // (and over a quantized MiniLM's 128 x 384 activations 90 us).
  const bool whole = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal}).empty() && work >= 4096;
  if (work < (int64_t{1} << 18) && !any_narrow && !whole) return false;
  int64_t v = 0;
  // Whole SIMD registers of lanes; 16 or 8 when they divide (narrower vectors still beat scalar code). Lane counts
  // that are not a power of two (a conv's 20-wide rows) measured worse: the vectorizer shuffles them.
  // A plain reduction (no output axis along which a vector load stays put, so no reuse upcasts follow) whose axis
  // only 4 divides among the powers of two takes 28, 20 or 12 lanes instead of 4: the BatchNorm sums through a
  // 20x20 max-pool gradient (y[h / 2, w / 2] keeps h and w apart, see MergeAxes) measured 31.7 -> 28.4 ms of CPU
  // time over five kernels with 20 lanes, the 6x6 ones (h, w merged to 36) 9.2 -> 7.2 ms over seven with 12. A
  // 24-wide axis whole measured no faster than 8 lanes. Not with several REDUCEs sharing the loop (the scheduler's
  // sibling sums): four sums of 20 lanes each spilled (718 spill/reload instructions; 17.5 ms where 4 lanes take 7.4).
  bool reuse = false;
  int reduces = 0;
  for (const UOp* u : Toposort(cur)) reduces += u->op() == Op::REDUCE;
  for (const UOpPtr& o : AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal})) {
    std::vector<IndexStride> st = StridesAlong(cur, o.get());
    for (size_t i = 0; i < st.size() && i < rs.size(); ++i)
      reuse |= !st[i].is_store && rs[i].stride == 1 && st[i].stride == 0 && RangeSize(o.get()) > 1;
  }
  if (n % vf == 0) v = vf;
  else if (n % 16 == 0) v = 16;
  else if (!reuse && reduces == 1 && n % 8 == 4 && n > 8) {
    for (int64_t c = 28; c >= 12 && v == 0; c -= 8)
      if (n % c == 0) v = c;
  } else if (n % 8 == 0)
    v = 8;
  else if (n % 4 == 0) v = 4;
  // A quantized row: 16 lanes (two AVX2 vectors) measured faster than 8 (22 vs 26 ms per step) and than 32 (29 ms).
  if (any_narrow && n % 16 == 0 && v < 16) v = 16;
  if (v == 0) return false;
  // Threads first (they may consume the outermost output axis), then the split, then the reuse upcasts.
  std::vector<UOpPtr> outs = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
  std::vector<int64_t> out_sizes;
  for (const UOpPtr& o : outs) out_sizes.push_back(RangeSize(o.get()));
  std::vector<bool> keeps_narrow(outs.size(), false);
  if (any_narrow) {
    for (size_t a = 0; a < outs.size(); ++a) {
      std::vector<IndexStride> st = StridesAlong(cur, outs[a].get());
      bool moves = false;
      for (size_t i = 0; i < st.size() && i < narrow.size(); ++i) moves |= narrow[i] && st[i].stride != 0;
      keeps_narrow[a] = !moves;
    }
    if (std::find(keeps_narrow.begin(), keeps_narrow.end(), false) == keeps_narrow.end())
      keeps_narrow.assign(outs.size(), false);
  }
  if (auto [axis, t] = ThreadSplit(ctx, out_sizes, work,
                                   [&](int a) { return keeps_narrow[a] ? out_sizes[a] + 1 : int64_t{1}; });
      t > 1)
    KILN_RETURN_IF_ERROR(apply({OptOp::kThread, axis, t}));
  red = AxesOfType(cur, ctx, {AxisType::kReduce});
  KILN_RETURN_IF_ERROR(apply({OptOp::kAcc, static_cast<int>(red.size()) - 1, v == n ? 0 : v}));
  // A quantized row decodes in blocks of kQuantBlock weights (GGUF's Q4_0, Q4_1 and Q8_0) with one scale (and
  // minimum) per block; Q4's two nibbles of a byte are weights 16 apart. With v = 16 lanes an iteration covered half a
  // block, and which nibble it decoded was a run-time select per iteration (a table load, a compare and a mask move
  // before every decode). Unrolled to a whole block, the select is a constant and the block's scale loads once.
  // SmolLM2's Q4_1 decode step of one slot on a 2-core Emerald Rapids: 16.8-19.7 -> 14.0-15.6 ms; BEAM=2 unrolled
  // each such kernel by 2 or more there (1.37-2.05x alone). The batched step's kernels too (an output axis keeps the
  // weights: the slots, upcast below), since "vectorize accumulators" (vector_accumulators.cc) keeps their
  // accumulators vectors: 4 / 8 slots 12.9-13.7 -> 11.6-11.8 / 17.6-18.9 -> 17.0-17.5 ms per step, prefill 5-8%
  // faster (interleaved pairs, same machine). Before that pass the unrolled 8-slot step measured the same.
  if (any_narrow && v < kQuantBlock && kQuantBlock % v == 0 && (n / v) % (kQuantBlock / v) == 0)
    KILN_RETURN_IF_ERROR(
        apply({OptOp::kUnroll, static_cast<int>(red.size()) - 1, static_cast<int>(kQuantBlock / v)}));
  int64_t budget = std::max<int64_t>(1, 12 / ((v + vf - 1) / vf));  // accumulators of v lanes
  std::vector<bool> used_load(rs.size(), false);
  for (int pass = 0; pass < 2 && budget >= 2; ++pass) {
    outs = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
    int pick = -1, best = 0;
    std::vector<size_t> pick_loads;
    for (int a = 0; a < static_cast<int>(outs.size()); ++a) {
      std::vector<IndexStride> st = StridesAlong(cur, outs[a].get());
      if (st.size() != rs.size()) return absl::InternalError("acc tile: buffer count changed");
      int score = 0;
      std::vector<size_t> loads;
      bool moves_narrow = false;
      for (size_t i = 0; i < st.size(); ++i) moves_narrow |= narrow[i] && st[i].stride != 0;
      for (size_t i = 0; i < st.size() && !moves_narrow; ++i) {
        if (!st[i].is_store && rs[i].stride == 1 && st[i].stride == 0 && !used_load[i]) {
          ++score;
          loads.push_back(i);
        }
      }
      if (score > 0 && score >= best && RangeSize(outs[a].get()) > 1) {
        best = score;
        pick = a;
        pick_loads = loads;
      }
    }
    if (pick < 0) break;
    const int64_t size = RangeSize(outs[pick].get());
    int64_t amt = 0;
    for (int64_t c : {8, 6, 5, 4, 3, 2}) {
      if (c <= budget && size % c == 0) {
        amt = c;
        break;
      }
    }
    if (amt == 0) break;
    KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, pick, amt}));
    budget /= amt;
    for (size_t i : pick_loads) used_load[i] = true;
  }
  return true;
}

// Rows of a transposing copy upcast beside its innermost (store-contiguous) axis.
constexpr int64_t kTransposeRows = 8;
// Only for loads whose lanes lie this many elements (2 KB of float32) or more apart.
constexpr int64_t kTransposeMinStride = 512;

// A transposing elementwise kernel (a weight packed lanes-last or channels-last, a weight gradient stored [Ci, KH,
// KW, Co] and transposed back): its innermost output axis `last` is contiguous in the stores, but its loads move
// along it by a stride, so each of the 16 upcast lanes reads another cache line, one element of it per iteration.
// Returns the output axis (innermost first, not `last`) along which every such load moves by one element (forward or,
// through a flip, backward) and whose size kTransposeRows divides or is 4..16 (then upcast whole), so that each tile
// reads several consecutive elements of each line and stores as many 16-lane rows; -1 for other kernels. Only the
// order of the loads and stores changes. ResNet-50's stage-4 weight gradient [512, 9, 512] transposed back: 3.5 ->
// 0.6-1.2 ms; 2048 -> 512 1x1: 1.6 -> 0.2-0.35 ms (`conv_perf --batch 1 --parts dw`, 2-core Zen 5). Only where the
// lanes lie kTransposeMinStride or more apart: the CNN's batch-512 gradient copies (lanes 25-400 floats apart)
// measured no faster tiled, and the 128-lane bodies cost LLVM time (the cold training step's compile 3.4-4.1 s ->
// 4.9-6.2 s of CPU with every transposing copy tiled; two of its copies qualify now).
int TransposeAxis(const UOpPtr& cur, const LowerContext& ctx, int last) {
  // ctx.strided_loads: ApplyHeuristic found a load moving along `last` by neither 0 nor 1 (the common case, no such
  // load, returns here without walking the kernel again).
  if (!ctx.strided_loads || ctx.has_reduce || !ctx.target.supports_vectors || ctx.target.has_local) return -1;
  const std::vector<UOpPtr> axes = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
  if (last <= 0 || last >= static_cast<int>(axes.size())) return -1;
  std::vector<const UOp*> strided;  // loads that move along `last` by neither 0 nor 1
  for (const IndexStride& s : StridesAlong(cur, axes[last].get())) {
    if (s.is_store) {
      if (!s.stride || *s.stride != 1) return -1;  // the stores are what the lanes keep contiguous
    } else if (s.gated || !s.stride) {
      return -1;
    } else if (*s.stride != 0 && *s.stride != 1) {
      if (std::abs(*s.stride) < kTransposeMinStride) return -1;
      strided.push_back(s.index);
    }
  }
  if (strided.empty()) return -1;
  for (int a = last - 1; a >= 0; --a) {
    const int64_t n = RangeSize(axes[a].get());
    if (n % kTransposeRows != 0 && (n < 4 || n > 16)) continue;
    bool along = true;
    for (const IndexStride& s : StridesAlong(cur, axes[a].get()))
      if (std::find(strided.begin(), strided.end(), s.index) != strided.end())
        along &= s.stride && std::abs(*s.stride) == 1;
    if (along) return a;
  }
  return -1;
}

// Merges adjacent axes of one kind (outer a, inner b, next to each other in the loop nest) that every buffer walks
// as one: stride(a) == size(b) * stride(b) in every INDEX (tinygrad's shape merging, done here on ranges). Output
// axes (`reduce` false): a conv's input-gradient intermediate [.., ky, kx] then has one 25-wide axis contiguous in the
// weights and the output, which MatmulTile can vectorize, where 5-wide kx alone was too narrow. Reduce axes (`reduce`
// true; both must belong to the same REDUCEs): a BatchNorm statistic or backward sum over (n, h, w) of an NCHW
// tensor reduces h and w as one 400- or 36-wide contiguous axis, which AccTile splits into 16 lanes where w = 20 alone
// gave 4. a becomes r / size(b), b becomes r % size(b); the symbolic pass folds the recombined index back to
// r * stride(b).
absl::StatusOr<UOpPtr> MergeAxes(const UOpPtr& sink, LowerContext& ctx, bool reduce) {
  UOpPtr cur = sink;
  for (int guard = 0; guard < 16; ++guard) {
    std::vector<UOpPtr> axes = reduce ? AxesOfType(cur, ctx, {AxisType::kReduce})
                                      : AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
    bool merged = false;
    for (size_t i = 0; i + 1 < axes.size() && !merged; ++i) {
      const UOpPtr& ra = axes[i];
      const UOpPtr& rb = axes[i + 1];
      const int64_t na = RangeSize(ra.get()), nb = RangeSize(rb.get());
      if (na <= 1 || nb <= 1) continue;
      if (ctx.OrderOf(rb.get()) != ctx.OrderOf(ra.get()) + 1) continue;
      // A reduce axis that already gives AccTile 8 lanes stays: merged to 16 lanes, the conv1 (24x24) and conv3
      // (8x8) BN sums measured 4.7 -> 5.1 and 1.4 -> 1.5 ms of CPU time.
      if (reduce && nb % 8 == 0) continue;
      std::vector<IndexStride> sa = StridesAlong(cur, ra.get()), sb = StridesAlong(cur, rb.get());
      std::vector<IndexStride> la = StridesAlong(cur, ra.get(), na - 1),
                               lb = StridesAlong(cur, rb.get(), nb - 1);
      bool ok =
          !sa.empty() && sa.size() == sb.size() && la.size() == sa.size() && lb.size() == sa.size();
      bool affine = true;
      for (size_t k = 0; ok && k < sa.size(); ++k) {
        ok = sa[k].stride && sb[k].stride && *sa[k].stride == nb * *sb[k].stride;
        affine &= la[k].stride && *la[k].stride == (na - 1) * *sa[k].stride && lb[k].stride &&
                  *lb[k].stride == (nb - 1) * *sb[k].stride;
      }
      // An index that is not affine in the axes (a 2x2 pool gradient's y[h / 2, w / 2], which moves by 0 at 1 but
      // not at the last value) becomes per-lane div/mod gathers once merged: worth it only where b alone is too
      // narrow to get lanes at all (6-wide w: scalar code). Measured on the CNN training step (2 threads): the five
      // 6x6 pool-gradient BN reductions 28.7 -> 10.9 ms of CPU time merged, while the five 20x20 ones went from
      // 18.4 to 47.4 ms wall merged, and the 20x20 pool-gradient elementwise kernel 9.6 -> 4.3 ms CPU left apart.
      ok &= affine || nb % 4 != 0;
      if (ok && reduce) {
        for (const UOp* u : Toposort(cur)) {
          if (u->op() != Op::REDUCE) continue;
          bool has_a = false, has_b = false;
          for (size_t k = 1; k < u->num_src(); ++k) {
            has_a |= u->src(k).get() == ra.get();
            has_b |= u->src(k).get() == rb.get();
          }
          ok &= has_a == has_b;
        }
      }
      if (!ok) continue;
      const AxisArg arg = std::get<AxisArg>(ra->arg());
      const int64_t id_b = std::get<AxisArg>(rb->arg()).id;
      UOpPtr r = UOp::Make(Op::RANGE, ra->dtype(), {UOp::Const(ra->dtype(), na * nb)}, arg);
      UOpPtr cb = UOp::Const(ra->dtype(), nb);
      UOpPtr ea = UOp::Make(Op::CDIV, ra->dtype(), {r, cb}), eb = UOp::Make(Op::CMOD, ra->dtype(), {r, cb});
      const UOp* ta = ra.get();
      const UOp* tb = rb.get();
      cur = RewriteBottomUp(cur, [&](const UOp* orig, const UOpPtr& rebuilt) -> UOpPtr {
        if (orig == ta) return ea;
        if (orig == tb) return eb;
        if (orig->op() != Op::END && orig->op() != Op::REDUCE) return nullptr;
        bool has = false;
        for (const UOpPtr& x : orig->src()) has |= x.get() == ta || x.get() == tb;
        if (!has) return nullptr;
        UOpVec src;
        for (size_t k = 0; k < orig->num_src(); ++k) {
          const bool is_range = orig->op() == Op::END || k > 0;
          if (is_range && orig->src(k).get() == ta) src.push_back(r);
          else if (is_range && orig->src(k).get() == tb) continue;
          else src.push_back(rebuilt->src(k));
        }
        return rebuilt->WithSrc(src);
      });
      cur = RewriteBottomUp(cur, [](const UOp*, const UOpPtr& u) -> UOpPtr {
        if (u->op() != Op::INDEX) return nullptr;
        UOpVec src(u->src().begin(), u->src().end());
        bool changed = false;
        for (size_t k = 1; k < src.size(); ++k) {
          UOpPtr x = Simplify(src[k]);
          changed |= x != src[k];
          src[k] = x;
        }
        return changed ? u->WithSrc(src) : nullptr;
      });
      ctx.order.erase(std::find(ctx.order.begin(), ctx.order.end(), id_b));
      merged = true;
    }
    if (!merged) break;
  }
  return cur;
}

// The thread split's weight of a kernel's operations: a transcendental (2^x, log2, sin) counts as 16, and each load
// past the second that moves along every axis of the kernel (a whole input per element, not a broadcast bias or scale)
// as 1 more (see step 3).
int64_t OpsWeight(const UOpPtr& cur) {
  const std::vector<const UOp*> topo = Toposort(cur);
  absl::flat_hash_map<const UOp*, uint64_t> axes;  // the RANGEs each node depends on, one bit each (up to 64)
  uint64_t all = 0;
  int64_t weight = 1;
  for (const UOp* u : topo) {
    weight += u->op() == Op::EXP2 || u->op() == Op::LOG2 || u->op() == Op::SIN ? 16 : 0;
    uint64_t bits = u->op() == Op::RANGE && all != ~uint64_t{0} ? (all + 1) & ~all : 0;  // the lowest free bit
    all |= bits;
    for (const UOpPtr& src : u->src()) bits |= axes[src.get()];
    axes[u] = bits;
  }
  int64_t whole_loads = 0;
  for (const UOp* u : topo) whole_loads += u->op() == Op::LOAD && axes[u] == all ? 1 : 0;
  return weight + std::max<int64_t>(0, whole_loads - 2);
}

}  // namespace

absl::StatusOr<UOpPtr> ApplyHeuristic(const UOpPtr& sink, LowerContext& ctx, std::vector<Opt>* chosen) {
  UOpPtr cur = sink;
  auto apply = [&](Opt o) -> absl::Status {
    KILN_ASSIGN_OR_RETURN(cur, ApplyOpt(cur, o, ctx));
    chosen->push_back(o);
    return absl::OkStatus();
  };
  auto sizes = [&](std::initializer_list<AxisType> t) {
    std::vector<int64_t> s;
    for (const UOpPtr& r : AxesOfType(cur, ctx, t)) s.push_back(RangeSize(r.get()));
    return s;
  };
  // Integer dot products on the CPU's tensor core (tc.cc) first, as tinygrad's heuristic takes tensor cores first.
  KILN_ASSIGN_OR_RETURN(const bool tc, ApplyCpuTensorCore(cur, ctx, chosen));
  if (tc) return cur;
  // (before MergeAxes, which would merge the stacked axes into one too wide to upcast)
  KILN_ASSIGN_OR_RETURN(const int64_t stacked, StackedAxesWhole(cur, ctx, apply));
  if (ctx.target.has_threads) {
    KILN_ASSIGN_OR_RETURN(cur, MergeAxes(cur, ctx, /*reduce=*/false));
  }
  std::vector<int64_t> out = sizes({AxisType::kLoop, AxisType::kGlobal});
  std::vector<int64_t> red = sizes({AxisType::kReduce});
  // (AxesOfType leaves symbolic output axes out; a symbolic reduce leaves the kernel as it is.)
  if (std::any_of(red.begin(), red.end(), [](int64_t s) { return s < 0; })) return cur;
  int64_t work = stacked;  // (the stacked axes' lanes, upcast above, are work too)
  for (int64_t s : out) work *= s;
  for (int64_t s : red) work *= s;

  // 0. matmul-like reduce kernels get a register-blocked micro-kernel (see MatmulTile).
  KILN_ASSIGN_OR_RETURN(bool tiled, MatmulTile(cur, ctx, out, red, work, apply));
  if (tiled) return cur;
  // Reduce axes merge only past MatmulTile, whose conv tiles pick their unrolled axis among the unmerged ones.
  if (ctx.target.has_threads) {
    KILN_ASSIGN_OR_RETURN(cur, MergeAxes(cur, ctx, /*reduce=*/true));
    red = sizes({AxisType::kReduce});
  }
  KILN_ASSIGN_OR_RETURN(bool acc, AccTile(cur, ctx, work, apply));
  if (acc) return cur;

  // (A gated in-place store reordered by GateFreeAxesInnermost gets its upcast there and only the threads below.)
  KILN_ASSIGN_OR_RETURN(const bool gate_order, GateFreeAxesInnermost(cur, ctx, apply));
  if (!ctx.has_reduce && !out.empty() && !gate_order) {
    const std::vector<UOpPtr> axes = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
    for (const IndexStride& s : StridesAlong(cur, axes.back().get()))
      ctx.strided_loads |= !s.is_store && (!s.stride || (*s.stride != 0 && *s.stride != 1));
  }
  // 0b. A small reduce whose innermost output axis is contiguous in a load while its innermost reduce axis is
  // contiguous in none (attention's scores q . K^T over a transposed key cache: positions contiguous, the head
  // dimension a cache row apart): a whole SIMD register of outputs upcast 4 (or 2) times over, so each step of the
  // reduce loop is that many independent vector multiply-adds, and no reduce unroll. The generic steps below made one
  // 8-wide accumulator with four dependent multiply-adds per iteration, bound by their latency: SmolLM2's one-slot
  // scores kernel 11.8 -> 5.4-5.6 us per layer (2-core Emerald Rapids).
  if (ctx.has_reduce && ctx.target.supports_vectors && !out.empty() && !red.empty() && !gate_order) {
    const std::vector<UOpPtr> oax = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
    const std::vector<UOpPtr> rax = AxesOfType(cur, ctx, {AxisType::kReduce});
    const int64_t simd = std::clamp(ctx.target.vector_bytes / 4, 8, 16);
    const int64_t s = out.back();
    bool out_contig = false, red_contig = false;
    for (const IndexStride& st : StridesAlong(cur, oax.back().get()))
      out_contig |= !st.is_store && st.stride && *st.stride == 1;
    for (const IndexStride& st : StridesAlong(cur, rax.back().get()))
      red_contig |= !st.is_store && st.stride && *st.stride == 1;
    if (out_contig && !red_contig && s % (2 * simd) == 0 && work < (int64_t{1} << 18)) {
      KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, static_cast<int>(out.size()) - 1, static_cast<int>(simd)}));
      const std::vector<int64_t> rest = sizes({AxisType::kLoop, AxisType::kGlobal});
      const int64_t r = rest.empty() ? 1 : rest.back();
      const int64_t more = r % 4 == 0 ? 4 : r % 2 == 0 ? 2 : 1;
      if (more > 1)
        KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, static_cast<int>(rest.size()) - 1, static_cast<int>(more)}));
      if (auto [axis, t] = ThreadSplit(ctx, sizes({AxisType::kLoop, AxisType::kGlobal}), work * OpsWeight(cur),
                                       [](int) { return int64_t{1}; });
          t > 1)
        KILN_RETURN_IF_ERROR(apply({OptOp::kThread, axis, t}));
      return cur;
    }
  }
  // 1. unroll the last reduce axis: fully when small, else by 4 (tinygrad step 7).
  int64_t lanes = 1;
  if (!red.empty()) {
    const int last = static_cast<int>(red.size()) - 1;
    const int64_t s = red[last];
    if (s > 1 && s <= 16) {
      KILN_RETURN_IF_ERROR(apply({OptOp::kUnroll, last, 0}));
      lanes *= s;
    } else if (s > 16 && s % 4 == 0) {
      KILN_RETURN_IF_ERROR(apply({OptOp::kUnroll, last, 4}));
      lanes *= 4;
    }
  }
  // 1b. A small unrolled reduce (a pool window) reading channels-last data into a channels-first output: no load is
  // contiguous along the innermost output axis, but one outer output axis (the channels) is contiguous in every
  // load that moves with it. That axis takes the SIMD lanes (contiguous vector loads; the stores scatter, one per
  // output, against several loads per output). The CNN's BatchNorm + 2x2 max pool over conv2's channels-last
  // Winograd output, batch 32: 180-210 -> 62 us; conv4's, 66 -> 13 us (2-core Zen 4).
  bool channel_lanes = false;
  if (ctx.has_reduce && ctx.target.supports_vectors && lanes > 1 && out.size() >= 2 && !gate_order) {
    const std::vector<UOpPtr> oax = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
    const int64_t simd = std::clamp(ctx.target.vector_bytes / 4, 8, 16);
    bool last_contig = false;
    for (const IndexStride& st : StridesAlong(cur, oax.back().get()))
      last_contig |= !st.is_store && (!st.stride || *st.stride == 1);
    for (int a = static_cast<int>(oax.size()) - 2; !last_contig && a >= 0; --a) {
      if (out[a] % simd != 0) continue;
      bool contig = true, moves = false;
      for (const IndexStride& st : StridesAlong(cur, oax[a].get())) {
        if (st.is_store) continue;
        contig &= st.stride && (*st.stride == 0 || *st.stride == 1);
        moves |= st.stride && *st.stride == 1;
      }
      if (!contig || !moves) continue;
      KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, a, static_cast<int>(simd)}));
      channel_lanes = true;
      break;
    }
  }
  // 2. upcast the innermost output axis by 8 or 4 (vectorizable straight-line lanes; tinygrad steps 6 and 8);
  // elementwise kernels by a whole SIMD register when that is wider (16 floats with AVX-512).
  if (!out.empty() && !gate_order && !channel_lanes) {
    const int last = static_cast<int>(out.size()) - 1;
    const int64_t s = out[last];
    const int64_t simd = std::clamp(ctx.target.vector_bytes / 4, 8, 16);
    // Under 36 or more stacked lanes (Winograd's transforms), 8 lanes: each lane is lowered as its own copy, and the
    // 8 x 8 x 16-lane transforms took 0.4-0.77 s each to compile (0.3-0.5 s at 8 lanes); the CNN's kernels at batch
    // 32 ran the same either way (1.58-1.59 ms, 2-core Zen 4).
    const int64_t vmax = stacked >= 36 ? 8 : simd;
    bool upcast = false;
    for (int64_t amt : {vmax, int64_t{8}, int64_t{4}}) {
      const int64_t cap =
          ctx.has_reduce ? ctx.target.max_upcast : std::max<int64_t>(ctx.target.max_upcast, simd);
      if (amt <= cap && s % amt == 0 && s >= amt && lanes * amt <= 32) {
        const int across = amt == simd ? TransposeAxis(cur, ctx, last) : -1;
        const int64_t rows = across >= 0 && out[across] % kTransposeRows == 0 ? kTransposeRows : 0;  // 0: whole
        KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, last, amt}));
        if (across >= 0) KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, across, rows}));
        upcast = true;
        break;
      }
    }
    // A reduce over a small unrolled window whose innermost output axis no vector width divides (a 2x2 pool's 10-
    // or 3-wide output rows): that axis whole, and the window's next axis unrolled too when tiny, so the body reads
    // each window row as one run of consecutive elements, which "vectorize loads" (vector_loads.cc) makes vector
    // loads that the outputs take at stride 2. The CNN's 2x2 max pools (forward, and the tie count of their
    // gradient) measured 4.1 -> 0.8-1.0 ms (20x20 planes) and 0.5 -> 0.25-0.35 ms (6x6) in the training step.
    if (!upcast && ctx.target.supports_vectors && ctx.has_reduce && lanes > 1 && s > 2 && s <= 16 &&
        lanes * s <= 32) {
      KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, last, 0}));
      const int64_t r = red.size() >= 2 ? red[red.size() - 2] : 0;
      if (r > 1 && r <= 4 && lanes * s * r <= 64) {
        KILN_RETURN_IF_ERROR(apply({OptOp::kUnroll, static_cast<int>(red.size()) - 2, 0}));
      }
    }
  }
  // 3. threads over the outermost output axis that splits evenly, with >= kMinOpsPerThread ops each (tinygrad step 10).
  // A transcendental (2^x, log2, sin: a polynomial of ~20 ops, or a libm call in a reduce loop) counts as 16 ops: a
  // softmax over MiniLM's 12 x 128 x 128 scores (196K exps per kernel, 0.23-0.33 ms on one core) runs on both.
  // Whole-input loads past the second count one op each: ResNet-50's last blocks recompute the residual chain from
  // several stored inputs per element (its global average pool sums 2048 x 49 of them from 8 buffers): 165 -> 85 us
  // and 83 -> 50 us on two cores; the CNN, MiniLM, the training step and the LLM step keep their kernels (broadcast
  // loads do not count: MiniLM's LayerNorm outputs, two whole inputs and four broadcasts over 49K elements, ran
  // slower on two cores).
  // A symbolic output axis (a dynamic batch's rows, left out of `work`) counts at its upper bound: the kernel is
  // lowered once for every batch size, and the fixed-batch kernels it replaces took threads from 21 rows on. The
  // CNN's BatchNorm + pool and ReLU kernels ran on one core at batch 22 (kilnd, `DEBUG=2`, mean of ~1600 runs on a
  // 2-core Emerald Rapids): r_n_32_10_10_2_2 141 -> 82 us, E_n_72_2_8_16 163 -> 94 us, r_n_10_144_4 61 -> 38 us;
  // load_compare-style concurrency 32 4147 / 4051 -> 4430 / 4202 infer/s, batch 1 latency unchanged.
  const int64_t weight = OpsWeight(cur);
  const int64_t rows = SymbolicRowsBound(cur, ctx);
  if (auto [axis, t] = ThreadSplit(ctx, sizes({AxisType::kLoop, AxisType::kGlobal}), work * weight * rows,
                                   [](int) { return int64_t{1}; });
      t > 1)
    KILN_RETURN_IF_ERROR(apply({OptOp::kThread, axis, t}));
  return cur;
}

}  // namespace kiln::codegen
