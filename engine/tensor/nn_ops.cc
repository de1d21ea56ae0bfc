// Matmul, convolution and pooling (tinygrad's _pool: pad/shrink/reshape/expand/permute, then mul+sum),
// softmax, normalizations and the sparse categorical cross-entropy loss.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/tensor/gradient.h"
#include "engine/tensor/tensor.h"
#include "engine/tensor/tensor_internal.h"

namespace kiln {

using tensor_internal::CeilDiv;
using tensor_internal::FirstError;
using tensor_internal::Invalid;
using tensor_internal::NormAxis;
using tensor_internal::Str;
using tensor_internal::ToVec;

namespace {

// One value per spatial dim from 1 or n values.
absl::StatusOr<IntVec> PerDim(const char* op, const char* what, const IntVec& v, size_t n, int64_t min) {
  IntVec out;
  if (v.size() == 1) out.assign(n, v[0]);
  else if (v.size() == n) out = v;
  else return Invalid(op, what, " needs 1 or ", n, " values, got ", v.size());
  for (int64_t x : out) {
    if (x < min) return Invalid(op, what, " must be >= ", min, ", got ", Str(out));
  }
  return out;
}

// (before, after) for every dim of a rank-`ndim` tensor whose last n dims are spatial.
absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> PoolPads(const char* op, const IntVec& padding,
                                                                  int64_t ndim, size_t n) {
  std::vector<std::pair<int64_t, int64_t>> pads(ndim - n, {0, 0});
  if (padding.size() == 1 || padding.size() == n) {
    for (size_t i = 0; i < n; ++i) {
      int64_t p = padding[padding.size() == 1 ? 0 : i];
      pads.emplace_back(p, p);
    }
  } else if (padding.size() == 2 * n) {
    for (size_t i = 0; i < n; ++i) pads.emplace_back(padding[2 * i], padding[2 * i + 1]);
  } else {
    return Invalid(op, "padding needs 1, ", n, " or ", 2 * n, " values, got ", padding.size());
  }
  for (auto [b, a] : pads) {
    if (b < 0 || a < 0) return Invalid(op, "negative padding ", Str(padding));
  }
  return pads;
}

IntVec Iota(int64_t from, int64_t to) {
  IntVec v;
  for (int64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}


// Packing the right-hand operand for the CPU backend (BLAS's "pack B"). The matmul kernel's register tile reads a
// panel of B, K rows x 16 lanes, once per row block of A, so the panel should stay in L1/L2 across row blocks. Row-
// major B puts those K rows N floats apart: when N * 4 bytes is a multiple of 1 KiB, every row of the panel falls
// into the same few cache sets (at N = 2048 the 2048 rows share one L1 set and 16 of L2's 2048 sets), the panel is
// evicted while in use, and each row block streams it again from L3. Copying B once into [N / 16][K][16] (one small
// elementwise kernel, K x N floats) makes each panel one contiguous run. Measured on the 2-core Zen 4
// (tests/bench/matmul_compare.py, heuristic opts, pack kernel timed too): 1024^3 97 -> 204 GFLOPS, 2048^3 58 -> 199
// GFLOPS (numpy/OpenBLAS 185-198 in the same run). The pack costs K x N copies against M x N x K FMAs, so it is taken
// only where A has >= 64 rows (at most 1/64 of the FMAs; MiniLM's seq-128 FFN product 3.2 -> 2.7 ms), and only
// on the CPU backend: INTERP is the oracle, and GPUs tile through local memory instead.
// A constant B (MatmulRhs::kConstant, an ONNX weight) is packed at any width: the copy runs once per JIT trace, and
// the panel's rows then come from far memory as one contiguous run instead of 128 bytes per N-float row. MiniLM
// (batch 1, seq 128; N = 384 for Q, K, V, the attention output and the FFN's down projection) on a 2-core Emerald
// Rapids: 17.8-18.0 -> 14.2-14.5 ms (down projection 746 -> ~450 us, as in kernel_perf with B hot in cache). Packing a
// B that changes costs its copy per run: kernel_perf's 128 x 384 x 384, copy timed with it, 381 -> 261 GFLOPS.
constexpr int64_t kPackLanes = 16;
// Conv2d's output-channel lanes (LaneWeights) read the weights through the same kind of packed buffer,
// [Co / 16][Ci][KH][KW][16] (or [Co / 16][KH][KW][Ci][16], see there): one 16-float run per reduce step,
// consecutive steps adjacent.
constexpr int64_t kConvPackLanes = 16;

bool IsCpu(const std::string& device) { return device == "CPU" || device.starts_with("CPU:"); }

bool PaysToPackRhs(const std::string& device, DType dt, int64_t m, int64_t k, int64_t n, MatmulRhs rhs) {
  return IsCpu(device) && dt == dtypes::kFloat32 && m >= 64 && k >= 256 && n >= 256 && n % kPackLanes == 0 &&
         (rhs == MatmulRhs::kConstant || (n * 4) % 1024 == 0);
}

// w (..., K, N) as the same values read through a [..., N / 16, K, 16] buffer.
Tensor PackRhs(const Tensor& w) {
  const int64_t d = w.ndim();
  IntVec split(w.shape().begin(), w.shape().end() - 1);
  split.push_back(w.size(-1) / kPackLanes);
  split.push_back(kPackLanes);
  IntVec perm;
  for (int64_t i = 0; i < d - 2; ++i) perm.push_back(i);
  perm.insert(perm.end(), {d - 1, d - 2, d});  // (..., K, N/16, 16) -> (..., N/16, K, 16): its own inverse
  return w.Reshape(split).Permute(perm).Contiguous().Permute(perm).Reshape(w.shape());
}

// An integer matmul's constant B is its 8-bit values cast to int32. The CPU's integer tensor core (codegen/tc.cc) reads
// B 4 k-rows x 16 columns at a time, which row-major B puts N bytes apart (four loads and inserts per operand): the
// 8-bit values are read through a [N/16][K/4][4][16] copy made once per JIT trace instead, one 64-byte run each.
// nullopt when w is not that (the float packing above may then apply).
std::optional<Tensor> PackedIntegerRhs(const Tensor& w, MatmulRhs rhs) {
  const UOp* u = w.uop().get();
  if (rhs != MatmulRhs::kConstant || !IsCpu(w.device()) || w.ndim() != 2 || w.dtype() != dtypes::kInt32 ||
      u->op() != Op::CAST || u->src(0)->dtype().ItemSize() != 1 || !u->src(0)->dtype().IsInt() ||
      w.size(0) % 4 != 0 || w.size(1) % 16 != 0)
    return std::nullopt;
  const int64_t k = w.size(0), n = w.size(1);
  const Tensor w8(u->src(0), w.device());
  return w8.Reshape({k / 4, 4, n / 16, 16})
      .Permute({2, 0, 1, 3})
      .Contiguous()
      .Permute({1, 2, 0, 3})
      .Reshape({k, n})
      .Cast(dtypes::kInt32);
}

}  // namespace

Tensor Tensor::Matmul(const Tensor& w, std::optional<DType> acc_dtype, MatmulRhs rhs_use) const {
  if (absl::Status st = FirstError({this, &w}); !st.ok()) return FromStatus(st);
  int64_t dx = ndim(), dw = w.ndim();
  if (dx == 0 || dw == 0)
    return FromStatus(Invalid("Matmul", "both tensors need to be at least 1D, got ", dx, "D and ", dw, "D"));
  int64_t axis_w = -std::min<int64_t>(dw, 2);
  if (size(-1) != w.size(axis_w))
    return FromStatus(Invalid("Matmul", "cannot multiply ", Str(shape()), " and ", Str(w.shape())));
  int64_t ones = std::min<int64_t>({dx - 1, dw - 1, 1});
  IntVec xs(shape().begin(), shape().end() - 1);
  xs.insert(xs.end(), ones, 1);
  xs.push_back(size(-1));
  IntVec ws(w.shape().begin(), w.shape().end() - std::min<int64_t>(dw, 2));
  ws.insert(ws.end(), ones, 1);
  ws.insert(ws.end(), w.shape().end() + axis_w, w.shape().end());
  // Rows of x that read each w matrix: all of x's rows when w is one matrix, else one batch entry's.
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape().size(); ++i) rows *= shape()[i];
  if (dw > 2) rows = dx >= 2 ? size(-2) : 1;
  const std::optional<Tensor> packed8 = PackedIntegerRhs(w, rhs_use);
  const Tensor rhs = packed8 ? *packed8
                     : dw >= 2 && PaysToPackRhs(device(), w.dtype(), rows, w.size(-2), w.size(-1), rhs_use)
                         ? PackRhs(w)
                         : w;
  Tensor prod = Reshape(xs).Mul(rhs.Reshape(ws).Transpose(-1, axis_w));
  DType pair[2] = {dtype(), w.dtype()};
  std::optional<DType> out = acc_dtype ? acc_dtype : LeastUpperDType(pair);
  if (!out) return FromStatus(Invalid("Matmul", "no common dtype"));
  return prod.Sum(-1, false, acc_dtype).Cast(*out);
}

// tinygrad's _pool: (..., *i) -> (..., *o, *k) windows of size k with stride s and dilation d.
Tensor Tensor::Pool(absl::Span<const int64_t> k, absl::Span<const int64_t> s, absl::Span<const int64_t> d) const {
  if (!ok()) return *this;
  int64_t n = static_cast<int64_t>(k.size());
  if (ndim() < n) return FromStatus(Invalid("Pool", "cannot pool ", Str(shape()), " with kernel ", Str(k)));
  int64_t lead = ndim() - n;
  IntVec noop(shape().begin(), shape().begin() + lead);
  IntVec i_(shape().begin() + lead, shape().end()), o_;
  for (int64_t j = 0; j < n; ++j) {
    if (d[j] * (k[j] - 1) + 1 > i_[j])
      return FromStatus(Invalid("Pool", "kernel ", Str(k), " with dilation ", Str(d),
                                " is larger than the (padded) input ", Str(i_)));
    o_.push_back(CeilDiv(i_[j] - d[j] * (k[j] - 1), s[j]));
  }
  auto full = [&](std::vector<std::pair<int64_t, int64_t>> tail) {
    std::vector<std::pair<int64_t, int64_t>> b;
    for (int64_t x : noop) b.emplace_back(0, x);
    b.insert(b.end(), tail.begin(), tail.end());
    return b;
  };
  auto with_noop = [&](const IntVec& tail) {
    IntVec v = noop;
    v.insert(v.end(), tail.begin(), tail.end());
    return v;
  };
  bool general = false;
  for (int64_t j = 0; j < n; ++j) general = general || k[j] > s[j] || d[j] != 1;
  if (general) {
    IntVec f_, reps(lead, 1), t1;
    std::vector<std::pair<int64_t, int64_t>> b1, b2, b3;
    IntVec r1, r2, r3;
    for (int64_t j = 0; j < n; ++j) {
      int64_t f = 1 + (o_[j] * s[j] > i_[j] - d[j] * (k[j] - 1) ? 1 : 0);
      int64_t span = i_[j] * f + d[j];
      reps.push_back(CeilDiv(k[j] * span, i_[j]));
      b1.emplace_back(0, k[j] * span);
      r1.push_back(k[j]);
      r1.push_back(span);
      b2.emplace_back(0, k[j]);
      b2.emplace_back(0, o_[j] * s[j]);
      r2.push_back(k[j]);
      r2.push_back(o_[j]);
      r2.push_back(s[j]);
      b3.emplace_back(0, k[j]);
      b3.emplace_back(0, o_[j]);
      b3.emplace_back(0, 1);
      r3.push_back(k[j]);
      r3.push_back(o_[j]);
    }
    Tensor x = Repeat(reps).Shrink(full(b1)).Reshape(with_noop(r1));     // repeats: no padding needed
    x = x.Shrink(full(b2)).Reshape(with_noop(r2));                          // dilation
    x = x.Shrink(full(b3)).Reshape(with_noop(r3));                          // stride
    IntVec perm = Iota(0, lead);
    for (int64_t j = 0; j < n; ++j) perm.push_back(lead + 2 * j + 1);
    for (int64_t j = 0; j < n; ++j) perm.push_back(lead + 2 * j);
    return x.Permute(perm);  // (..., *o, *k)
  }
  std::vector<std::pair<int64_t, int64_t>> pads(lead, {0, 0}), b1, b2;
  IntVec r1;
  for (int64_t j = 0; j < n; ++j) {
    pads.emplace_back(0, std::max<int64_t>(0, o_[j] * s[j] - i_[j]));
    b1.emplace_back(0, o_[j] * s[j]);
    r1.push_back(o_[j]);
    r1.push_back(s[j]);
    b2.emplace_back(0, o_[j]);
    b2.emplace_back(0, k[j]);
  }
  Tensor x = Pad(pads).Shrink(full(b1)).Reshape(with_noop(r1)).Shrink(full(b2));
  IntVec perm = Iota(0, lead);
  for (int64_t j = 0; j < n; ++j) perm.push_back(lead + 2 * j);
  for (int64_t j = 0; j < n; ++j) perm.push_back(lead + 2 * j + 1);
  return x.Permute(perm);
}

namespace {

// The op that computes `t`'s values: its node with the movement ops above it skipped.
const UOp* ProducerOf(const Tensor& t) {
  const UOp* u = t.uop().get();
  while (IsMovement(u->op())) u = u->src(0).get();
  return u;
}

// Whether `t` is computed by elementwise ops (through movement ops), not a stored buffer or a reduce's result.
bool ComputedElementwise(const Tensor& t) { return IsElementwise(ProducerOf(t)->op()); }

// Whether `t` is computed (elementwise or a reduce's result) rather than read from a stored buffer.
bool Unstored(const Tensor& t) {
  const Op op = ProducerOf(t)->op();
  return IsElementwise(op) || op == Op::REDUCE_AXIS;
}

// `t` (NCHW) stored channels-last ([B, H, W, C]) and viewed as NCHW again.
Tensor StoreChannelsLast(const Tensor& t) { return t.Permute({0, 2, 3, 1}).Contiguous().Permute({0, 3, 1, 2}); }

// Whether `t` is such a stored channels-last copy, perhaps padded through the view: the conv input gradient's output
// gradient, which it hands Conv2d already copied.
bool ChannelsLastCopy(const Tensor& t) {
  const UOp* u = t.uop().get();
  if (u->op() == Op::PAD) u = u->src(0).get();
  return u->op() == Op::PERMUTE && u->ArgVec() == IntVec{0, 3, 1, 2} && u->src(0)->op() == Op::CONTIGUOUS;
}

// Whether `t` (NCHW) reads its values, through elementwise ops, from a stored channels-last buffer viewed as NCHW
// (a permute {0, 3, 1, 2} of a stored buffer, perhaps reshaped and cropped first): the output of a Winograd conv
// (winograd.cc), its bias, BatchNorm and ReLU applied on the way.
bool ReadsChannelsLast(const Tensor& t) {
  return tensor_internal::Reaches(
      t, [](const UOp* u) { return IsElementwise(u->op()); },
      [](const UOp* u) {
        if (u->op() != Op::PERMUTE || u->ArgVec() != IntVec{0, 3, 1, 2}) return false;
        const UOp* base = u->src(0).get();
        while (base->op() == Op::RESHAPE || base->op() == Op::SHRINK) base = base->src(0).get();
        return base->op() == Op::CONTIGUOUS;
      });
}

// How deep the gradient overrides below look for their inputs under the output: Conv2d's out -> reshape -> sum -> mul
// -> permute/expand/reshape/pool view -> pad -> x; MaxPool2d's out -> reshape -> max -> pool view -> pad -> x.
constexpr int kOverrideDepth = 24;
// Winograd's transforms (stacked sums of up to 36 terms) between a conv's output and its x and w.
constexpr int kWinogradOverrideDepth = 256;

// The first node under `from` (through sources, at most `depth` levels) whose structural key is `key`.
UOpPtr FindByKey(const UOpPtr& from, const Digest& key, int depth) {
  std::vector<std::pair<const UOp*, int>> stack = {{from.get(), 0}};
  absl::flat_hash_set<const UOp*> seen;
  while (!stack.empty()) {
    auto [u, d] = stack.back();
    stack.pop_back();
    if (!seen.insert(u).second) continue;
    if (u->Key() == key) return u->Ptr();
    if (d >= depth) continue;
    for (const UOpPtr& s : u->src()) stack.push_back({s.get(), d + 1});
  }
  return nullptr;
}

// Conv2d (groups 1, dilation 1) weight gradient dW[co, ci, ky, kx] = sum_{b, oy, ox} dY[b, co, oy, ox] *
// X[b, ci, oy * s + ky, ox * s + kx] (X padded; the stride s is in the pooled view) as a matmul whose lane axis is co: the output gradient `g` (contiguous) is copied
// channels-last ([B, OH, OW, Co]), so one vector load of co lanes feeds every (ci, ky, kx) row of the pooled input (a
// broadcast scalar) and MatmulTile gives the kernel a (kx rows x co lanes) register tile. The rules' path sums over
// the output x axis instead, whose 6- or 8-wide rows (conv3/conv4 of the CNN) fill half an AVX-512 register at best.
// The batch is split into chunks of `bc` samples whose channels-last gradient fits in half of L2 (512 KB): the first
// kernel writes one partial [Ci, KH, KW, Co] per chunk (threads over chunks), a second sums the chunks.
// `xp_view` is the forward's pooled input view (B, Ci, OH, OW, KH, KW). Returns (Co, Ci, KH, KW).
// A 1x1 conv's weight gradient is one plain matmul, X [Ci, B * OH * OW] @ dY channels-last [B * OH * OW, Co], which
// Matmul tiles (Ci rows x Co lanes) and packs as it would any other: the form below gives it a tile of one row (its
// rows are the kernel's KW = 1 columns), one FMA per broadcast input value. ResNet-50's 1x1 convs at batch 1, kernel
// times of the two forms (conv_perf, interleaved): 64 -> 256 channels at 56x56 1.22-1.38 -> 0.80-0.86 ms, 512 -> 1024
// at stride 2 3.7 -> 1.7-3.3 ms, 512 -> 128 at 28x28 and 256 -> 1024 at 14x14 10-14% less, 64 -> 64 at 56x56 the
// same. Not where the reduce is short (2048 -> 512 at 7x7, 49 pixels: 1.2-1.5 -> 2.1-2.2 ms), so from 128 pixels.
// From this many weights a weight gradient computed in one chunk is stored with its Co lanes contiguous ([Ci, KH, KW,
// Co]) and transposed to (Co, Ci, KH, KW) by a copy, rather than stored strided by its own kernel (see below).
constexpr int64_t kTransposedGradientWeights = int64_t{1} << 15;

Tensor ConvWeightGradient(const Tensor& xp_view, const Tensor& g) {
  const int64_t b = g.size(0), co = g.size(1), oh = g.size(2), ow = g.size(3);
  const int64_t ci = xp_view.size(1), kh = xp_view.size(4), kw = xp_view.size(5);
  if (const int64_t p = b * oh * ow; kh == 1 && kw == 1 && p >= 128) {
    Tensor x = xp_view.Reshape({b, ci, oh * ow}).Permute({1, 0, 2}).Reshape({ci, p});
    // Channels-last; where Matmul packs its right-hand side ([Co / 16, P, 16]) that copy reads dY directly.
    Tensor gp = g.Permute({0, 2, 3, 1});
    // A long reduce (the pixels) is split into chunks whose dY rows (pc x Co floats) fit in half of L2 (256 KB),
    // one partial [Ci, Co] product per chunk (a batched Matmul, threads over the chunks) summed by a second kernel,
    // as BLAS blocks K: over all P pixels at once each row block of x streamed every packed dY panel (P x Co, 3.2 MB
    // for ResNet-50's 64 -> 256 at 56x56) from L3. The partials are held to 2^22 floats (larger chunks beyond).
    // conv_perf on a 2-core Zen 3, best kernel times, batch 1: 64 -> 64 at 56x56 0.65 -> 0.39-0.41 ms, 64 -> 256
    // 2.36 -> 1.55-1.65 ms, 512 -> 128 at 28x28 2.15 -> 1.02-1.19 ms; 0.74-0.86x at batch 8, 0.60-0.70x at batch 32
    // (chunks of 512 KB: 1.24-3.85x slower than 256). 14x14 and 7x7 (Co 1024 or P 49) have no chunk of >= 64 pixels
    // within 256 KB and keep one Matmul.
    const int64_t row_bytes = co * static_cast<int64_t>(g.dtype().ItemSize());
    int64_t pc = 0;
    for (int64_t d = 1; d <= std::min<int64_t>(p, 256 * 1024 / row_bytes); ++d)
      if (p % d == 0) pc = d;
    while (pc > 0 && pc < p && (p / pc) * ci * co > (int64_t{1} << 22)) {
      int64_t next = pc + 1;
      while (p % next != 0) ++next;
      pc = next;
    }
    if (pc >= 64 && p / pc >= 2) {
      const int64_t nb = p / pc;
      Tensor xb = x.Reshape({ci, nb, pc}).Permute({1, 0, 2});
      Tensor gb = gp.Contiguous().Reshape({nb, pc, co});
      return xb.Matmul(gb).Sum(Axes({0})).Permute({1, 0}).Reshape({co, ci, 1, 1});
    }
    if (!PaysToPackRhs(g.device(), g.dtype(), ci, p, co, MatmulRhs::kAny)) gp = gp.Contiguous();
    // The product stores [Ci, Co] (its lanes along Co, contiguous in dY) and a copy transposes it, as below: stored
    // transposed, its lanes took Ci, which x holds P floats apart, and each vector was gathered from four loads
    // (ResNet-50's 256 -> 1024 at 14x14, batch 1: xmm FMAs with spills, 1.2 ms at 70 GFLOPS).
    Tensor prod = x.Matmul(gp.Reshape({p, co}));
    if (ci * co >= kTransposedGradientWeights) prod = prod.Contiguous();
    return prod.Permute({1, 0}).Reshape({co, ci, 1, 1});
  }
  const int64_t per_sample = oh * ow * co * static_cast<int64_t>(g.dtype().ItemSize());
  int64_t bc = 1;
  while (bc * 2 * per_sample <= 512 * 1024 && b % (bc * 2) == 0) bc *= 2;
  const int64_t nb = b / bc;
  Tensor xp = xp_view.Reshape({nb, bc, ci, oh, ow, kh, kw})
                  .Permute({0, 1, 3, 4, 2, 5, 6})
                  .Reshape({nb, bc, oh, ow, ci, kh, kw, 1});
  Tensor gp = g.Permute({0, 2, 3, 1}).Contiguous().Reshape({nb, bc, oh, ow, 1, 1, 1, co});
  const IntVec full = {nb, bc, oh, ow, ci, kh, kw, co};
  Tensor part = xp.Expand(full).Mul(gp.Expand(full)).Sum(Axes({1, 2, 3}));  // (nb, Ci, KH, KW, Co)
  part = nb > 1 ? part.Sum(Axes({0})) : part.Reshape({ci, kh, kw, co});
  // One chunk (a small batch): the reduce's own kernel would store its Co lanes Ci x KH x KW floats apart in the
  // (Co, Ci, KH, KW) gradient, one cache line (and at 512 x 512 x 3 x 3, one 4 KiB page) per lane. It stores
  // [Ci, KH, KW, Co] and one copy transposes it. ResNet-50's 3x3 weight gradients at batch 1, kernel times
  // (conv_perf, interleaved): 512 channels at 7x7 outputs 6.9 -> 4.0 ms, the same at stride 2 21-23 -> 4.0 ms, 64 and
  // 128 channels 1.07-1.28 -> 0.84-0.96 ms, 256 the same. Several chunks keep the form above: the chunk sum's output
  // is the only strided store there.
  if (nb == 1 && ci * kh * kw * co >= kTransposedGradientWeights) part = part.Contiguous();
  return part.Permute({3, 0, 1, 2});
}

bool LaneWeights(int64_t groups, int64_t cin, int64_t cout, const IntVec& hw, int64_t work);

// The taps of one output phase of a strided conv's input gradient along one spatial dim. With the forward
// y[o] = sum_k xpad[s*o + k] w[k] (xpad = x padded by `lo` before), input position i = s*q + r gets
// dx[i] = sum over the k with k = (r + lo) mod s, (r + lo) mod s + s, ... < K of g[q + (r + lo - k) / s] w[k]: a
// stride-1 correlation of g (from offset `start`, zero outside it) with those taps in reverse order, `q_len` outputs.
struct PhaseTaps {
  int64_t first_tap = 0, taps = 0;  // k = first_tap, first_tap + s, ... (taps of them); 0 taps: dx is 0 there
  int64_t start = 0, q_len = 0;     // g's window start, and the phase's output positions
};

PhaseTaps TapsOfPhase(int64_t r, int64_t s, int64_t k, int64_t lo, int64_t in_size) {
  PhaseTaps p;
  const int64_t c = r + lo;
  p.q_len = in_size > r ? (in_size - r + s - 1) / s : 0;
  p.first_tap = ((c % s) + s) % s;
  if (p.first_tap >= k || p.q_len == 0) return p;
  p.taps = (k - 1 - p.first_tap) / s + 1;
  p.start = (c - (p.first_tap + (p.taps - 1) * s)) / s;  // exact: c - k is a multiple of s for every tap
  return p;
}

// A strided conv's input gradient [B, Ci, IH, IW] from its output gradient g [B, Co, OH, OW] and weight w
// [Co, Ci, KH, KW], one stride-1 conv per output phase (sub-pixel position (ry, rx) of the s_y x s_x grid) over the
// weight taps that reach it, the phases interleaved into dx by one elementwise kernel. The transposed conv over g
// spread onto the stride-1 grid (zeros between its elements) computes the same values with s_y * s_x times the
// multiply-adds, all but 1 / (s_y s_x) of them products with those zeros: ResNet-50's 3x3 stride-2 convs' input
// gradients at 31-38 GFLOPS, its 1x1 stride-2 downsample's at 23 (conv_compare.py). Each phase's window of g is
// copied once: padded and channels-last by Conv2d where its conv takes channel lanes over several taps, else
// padded as it is (the columns through a view for a 1x1 phase with lanes), so its conv reads no gated loads along y.
Tensor StridedInputGradient(const Tensor& g, const Tensor& w, const std::vector<std::pair<int64_t, int64_t>>& pads,
                            const IntVec& hw, const IntVec& stride, const Shape& in_shape) {
  const int64_t b = g.size(0), co = g.size(1), ci = w.size(1);
  std::vector<PhaseTaps> taps[2];
  for (int i = 0; i < 2; ++i)
    for (int64_t r = 0; r < stride[i]; ++r)
      taps[i].push_back(TapsOfPhase(r, stride[i], hw[i], pads[2 + i].first, in_shape[2 + i]));
  const int64_t qy = taps[0][0].q_len, qx = taps[1][0].q_len;  // phase 0 has the most positions
  auto lanes = [&](const PhaseTaps& ty, const PhaseTaps& tx) {
    return LaneWeights(1, co, ci, {ty.taps, tx.taps}, b * co * ty.q_len * tx.q_len * ty.taps * tx.taps * ci);
  };
  // The transposed conv's weight [Ci, Co, KH, KW]: flipped in space, channels swapped. Where a phase's conv takes
  // channel lanes, w is first copied once input-channels-last ([Co, KH, KW, Ci], each Co's 9 x Ci block read from
  // one contiguous block of w), so that each phase's copy of its taps into Conv2d's lane layout reads whole 16-lane
  // rows. ResNet-50's stage-4 weights (512 x 512 x 3 x 3, 9.4 MB), kernel times: 0.8 ms for that copy and 0.05-0.16
  // ms per phase, where each phase's copy straight from w took 1-1.8 ms (16 lanes 9 floats apart, Co 18 KB apart),
  // and one copy of all taps into the lane layout, read by the phases as views, 1.9-2.1 ms.
  bool any_lanes = false;
  for (const PhaseTaps& ty : taps[0])
    for (const PhaseTaps& tx : taps[1]) any_lanes |= ty.taps > 0 && tx.taps > 0 && lanes(ty, tx);
  const Tensor flipped = w.Flip(Axes({2, 3}));
  const Tensor wt = any_lanes ? flipped.Permute({0, 2, 3, 1}).Contiguous().Permute({3, 0, 1, 2})
                              : flipped.Permute({1, 0, 2, 3});
  // g's rows (axis 2) or columns (axis 3) start .. start + len - 1, zero outside g (Pad shrinks where negative).
  auto window = [](const Tensor& t, int axis, int64_t start, int64_t len) {
    std::vector<std::pair<int64_t, int64_t>> pad(4, {0, 0});
    pad[axis] = {-start, start + len - t.size(axis)};
    return t.Pad(pad);
  };
  std::optional<Tensor> dx;
  for (int64_t ry = 0; ry < stride[0]; ++ry) {
    for (int64_t rx = 0; rx < stride[1]; ++rx) {
      const PhaseTaps& ty = taps[0][ry];
      const PhaseTaps& tx = taps[1][rx];
      if (ty.taps == 0 || tx.taps == 0) continue;  // no tap reaches these positions: their gradient is 0
      const bool x_view = lanes(ty, tx);
      Tensor rows = window(g, 2, ty.start, ty.q_len + ty.taps - 1);
      // A phase with several taps takes Conv2d's channels-last copy (which pads it) straight from g's window; a 1x1
      // phase (no lane copy in Conv2d) reads a copy of its window, its columns through a view where it has lanes.
      Tensor in = window(rows, 3, tx.start, tx.q_len + tx.taps - 1);
      if (!x_view) in = in.Contiguous();
      else if (ty.taps * tx.taps == 1) in = window(rows.Contiguous(), 3, tx.start, tx.q_len + tx.taps - 1);
      // The taps in reverse order (a correlation): w's k = last, last - s, ..., first are the flipped weight's
      // K - 1 - last, + s, ... up to K - 1 - first.
      auto reversed_taps = [&](int i, const PhaseTaps& t) {
        const int64_t last = t.first_tap + (t.taps - 1) * stride[i];
        return SliceArg::Range(hw[i] - 1 - last, hw[i] - t.first_tap, stride[i]);
      };
      Tensor taps_w = wt.Slice({SliceArg::All(), SliceArg::All(), reversed_taps(0, ty), reversed_taps(1, tx)});
      // [B, Ci, ty.q_len, tx.q_len], stored: fused into the interleaving kernel below, every phase's reduce would
      // run for every element of dx, gated.
      Tensor phase = in.Conv2d(taps_w).Contiguous();
      // Onto the interleaved grid [B, Ci, qy, s_y, qx, s_x] at (ry, rx); zero elsewhere.
      phase = phase.Pad({{0, 0}, {0, 0}, {0, qy - ty.q_len}, {0, qx - tx.q_len}})
                  .Reshape({b, ci, qy, 1, qx, 1})
                  .Pad({{0, 0}, {0, 0}, {0, 0}, {ry, stride[0] - 1 - ry}, {0, 0}, {rx, stride[1] - 1 - rx}});
      dx = dx.has_value() ? dx->Add(phase) : phase;
    }
  }
  if (!dx.has_value()) return Tensor::Zeros(in_shape, g.dtype(), g.device());
  return dx->Reshape({b, ci, qy * stride[0], qx * stride[1]})
      .Shrink({{0, b}, {0, ci}, {0, in_shape[2]}, {0, in_shape[3]}});
}

// Conv2d (groups 1, dilation 1) gradients. The input gradient is a transposed convolution: the output gradient
// padded by k - 1 - pad, convolved with the weights flipped in space and with in/out channels swapped. With channel
// lanes (LaneWeights) Conv2d pads it in its channels-last copy (see there; padded by >= 2 columns, the columns stay a
// view, below); otherwise it is padded in a contiguous copy. (Before the channels-last copy, the rows were padded in
// a copy and the columns through the view, so that codegen's "narrow gated reduces" ran the kx loop over the valid
// columns only: conv2 of the CNN 78 -> 63-67 ms.)
// Autograd through the pooling view gives the same values through a
// [B, Cin, OH, OW, KH, KW] intermediate summed back by col2im (25x the input's size for a 5x5 kernel, and a
// gather-heavy kernel). The weight gradient is ConvWeightGradient, also where each output-gradient element feeds only
// a few multiply-adds (Ci * KH * KW < 64, where the channels-last copy of g once looked too dear): the rules' path
// sums each (co, ky, kx) over the batch and pixels on its own, at 19 GFLOPS for the CNN's conv1 (1 x 5 x 5). conv_perf
// on a 2-core Zen 3, best kernel times: that conv1 at batch 512 25.6 -> 9.3 ms, 1 -> 32 channels 3x3 at batch 64
// 7.3 -> 0.6 ms, 3 -> 64 padded 94.7 -> 5.4 ms; at batch 1 within 0.03 ms either way. The output gradient is
// made contiguous once and both gradients copy it from there: in the Fashion-MNIST step (400 ms/step) that beats
// permuting the BatchNorm backward straight into the channels-last copy (515 ms) or copying it from the input
// gradient's padded buffer (480-575 ms). (Those two forms once gave wrong weight gradients: issue #4, x == max(x)
// recomputed with different FMA contraction in different kernels; the scheduler now stores such an x once.)
// Registered by key: holds no UOp.
// `depth`: how deep under the output x, w and xpool lie (kOverrideDepth for the direct conv's graph; the Winograd
// form's transforms put them deeper).
void RegisterConvGradient(const UOpPtr& out, const UOpPtr& x, const UOpPtr& w, const UOpPtr& xpool, bool cl_input,
                          const std::vector<std::pair<int64_t, int64_t>>& pads, const IntVec& hw, const IntVec& stride,
                          int depth = kOverrideDepth) {
  const Digest x_key = x->Key(), w_key = w->Key(), xp_key = xpool->Key();
  RegisterGradientOverride(out, [x_key, w_key, xp_key, cl_input, pads, hw, stride, depth](
                                    const UOpPtr& node, const Tensor& grad, const std::string& device)
                                    -> absl::StatusOr<std::vector<std::pair<UOpPtr, UOpPtr>>> {
    UOpPtr xn = FindByKey(node, x_key, depth), wn = FindByKey(node, w_key, depth);
    UOpPtr xpn = FindByKey(node, xp_key, depth);
    if (!xn || !wn || !xpn) return absl::InternalError("Conv2d gradient: input or weight not found under the output");
    std::vector<std::pair<UOpPtr, UOpPtr>> out;
    const Tensor g = grad.Contiguous();
    // The forward's channels-last input suits its conv (ci innermost in the reduce) but not this one, which
    // reduces over the output pixels with rows along kx: it reads x in NCHW, the copy the forward stored first
    // where x is computed (the same node). ResNet-50's 3x3 weight gradients read channels-last: 1.4-2.6x slower.
    // A padded x is copied padded, so that the kx rows' loads in the reduce loop carry no gates (gated, LLVM
    // packs them into one masked vector and shuffles each back out). conv_perf --batch 1 on a 2-core Zen 3, best
    // kernel times: ResNet-50's stem 7.8 -> 3.4 ms, its 3x3 weight gradients 9-41% faster.
    const bool padded =
        std::any_of(pads.begin() + 2, pads.end(), [](const auto& p) { return p.first || p.second; });
    Tensor xp(xpn, device);
    if (cl_input || padded) {
      Tensor xt(xn, device);
      if (Unstored(xt)) xt = xt.Contiguous();
      Tensor xpad = xt.Pad(pads);
      if (padded) xpad = xpad.Contiguous();
      xp = xpad.Pool(hw, stride, {1, 1});
    }
    Tensor dw = ConvWeightGradient(xp, g);
    if (!dw.ok()) return dw.status();
    out.push_back({wn, dw.uop()});
    Tensor wt(wn, device);
    // A strided conv's input gradient, phase by phase. (The autodiff of the pooling view it replaces summed the
    // [B, Ci, OH, OW, KH, KW] intermediate back with gates that are mostly off: ResNet-50's stride-2 convs at 4-6
    // GFLOPS.)
    if (stride[0] > 1 || stride[1] > 1) {
      Tensor dx = StridedInputGradient(g, wt, pads, hw, stride, xn->shape());
      if (!dx.ok()) return dx.status();
      out.push_back({xn, dx.uop()});
      return out;
    }
    // The transposed convolution pads the output gradient by K - 1 - pad on each side (the forward's padding taken
    // off again), so it computes exactly the input's rows and columns: padding by K - 1 and cropping afterwards
    // computed the padding's rows too, 1.65x the work at ResNet-50's 7x7 stage 4 (9 x 9 outputs for 7 x 7). A
    // padding above K - 1 (no tap reaches the input's edge rows) is cropped as before.
    // Where Conv2d takes channel lanes over a spatial kernel, it pads g in its channels-last copy; otherwise g is
    // padded in a contiguous copy (its x padding through the view for a 1x1 conv with channel lanes: rows along y,
    // a loop along x; with lanes along x the gate would vary per lane and stay in the loads).
    std::pair<int64_t, int64_t> tp[2], crop_at[2];
    for (int i = 0; i < 2; ++i) {
      const int64_t lo = hw[i] - 1 - pads[2 + i].first, hi = hw[i] - 1 - pads[2 + i].second;
      tp[i] = {std::max<int64_t>(lo, 0), std::max<int64_t>(hi, 0)};
      crop_at[i] = {std::max<int64_t>(-lo, 0), std::max<int64_t>(-hi, 0)};
    }
    const int64_t b = g.size(0), co = g.size(1), ih = g.size(2) + tp[0].first + tp[0].second - hw[0] + 1,
                  iw = g.size(3) + tp[1].first + tp[1].second - hw[1] + 1;
    const int64_t ci = wn->shape()[1];
    const bool x_view = LaneWeights(1, co, ci, hw, b * co * ih * iw * hw[0] * hw[1] * ci);
    const std::pair<int64_t, int64_t> px = x_view ? std::pair<int64_t, int64_t>{0, 0} : tp[1];
    std::vector<std::pair<int64_t, int64_t>> copy_pad = {{0, 0}, {0, 0}, tp[0], px};
    std::vector<std::pair<int64_t, int64_t>> view_pad = {
        {0, 0}, {0, 0}, {0, 0}, {tp[1].first - px.first, tp[1].second - px.second}};
    const bool cl = x_view && hw[0] * hw[1] > 1;  // Conv2d pads it in its channels-last copy
    // Where g is padded by >= 2 columns on each side (a conv without padding: the CNN's, K - 1 = 4 or 2), the
    // channels-last copy pads only its rows and the columns stay a padded view: the kernel loops over the output
    // columns (its tile rows run down the rows), and "narrow gated reduces" (narrow.cc) runs each column's kx loop
    // over the taps that reach g, skipping the padding's zero products. conv_perf on a 2-core Zen 3, best kernel
    // times: the CNN's input gradients at batch 512 conv2 87 -> 73 ms, conv3 12.5 -> 9.9, conv4 15.5 -> 11.8, 0.66-0.84x
    // at batches 1-64. Not for ResNet-50's 3x3 convs (padded by 1): there the tile took the columns or merged them
    // with the rows, the loads kept their gates, and the input gradients ran 1.8-3.4x slower.
    const std::pair<int64_t, int64_t> none{0, 0};
    const bool column_view = cl && tp[1].first >= 2 && tp[1].second >= 2;
    const Tensor gin = column_view ? StoreChannelsLast(g.Pad({none, none, tp[0], none})).Pad({none, none, none, tp[1]})
                       : cl        ? g.Pad({none, none, tp[0], tp[1]})
                                   : g.Pad(copy_pad).Contiguous().Pad(view_pad);
    // The direct conv (its narrowed tap loops), not the Winograd form, which is for inference (winograd.cc).
    Context direct({{Knob::kWino, 0}});
    Tensor dxp = gin.Conv2d(wt.Flip(Axes({2, 3})).Permute({1, 0, 2, 3}));
    const Shape& ps = dxp.shape();
    std::vector<std::pair<int64_t, int64_t>> crop = {{0, ps[0]}, {0, ps[1]},
                                                     {crop_at[0].first, ps[2] - crop_at[0].second},
                                                     {crop_at[1].first, ps[3] - crop_at[1].second}};
    Tensor dx = dxp.Shrink(crop);
    if (!dx.ok()) return dx.status();
    out.push_back({xn, dx.uop()});
    return out;
  });
}

// Whether Conv2d copies its weight output-channels-last ([Ci, KH, KW, Co], a tiny kernel) so that the conv kernel can
// take Co as its SIMD lane axis: per reduce step, contiguous vector loads of weights and one broadcast input value per
// tile row (MatmulTile's strided-store lane axis; the output stays NCHW). Otherwise the lanes run along the output
// rows, whose 20-, 24-, 10- or 6-wide rows fill 62-75% (conv2) or 38% (conv4) of the AVX-512 registers they use.
// Only for ungrouped 2-D convs whose Co fills whole 16-lane vectors and whose reduce per output (Ci * KH * KW >= 64)
// dwarfs the strided stores, with >= 2^20 multiply-adds (`work`, B * Co * OH * OW * Ci * KH * KW): smaller convs, like
// those of the kernel-count tests, keep their kernels. The values are unchanged (same products, same order). conv1 of
// the CNN (1 x 5 x 5 per output) measured no faster with channel lanes (23 ms vs 20-22 ms, both under load). The bound
// was 2^24, which left the CNN's conv2 at batch 1 (10.2M) and conv3/conv4 up to batch 13 (1.2-1.3M per image) with
// row lanes: `kiln-onnx bench cnn.onnx` (2-core Zen 5, medians of 1000-3000 runs) batch 1 0.125 -> 0.080 ms, batch 4
// 0.39 -> 0.29 ms, batch 8 0.79 -> 0.55 ms, batch 24 unchanged; the first run compiles longer (0.33 -> 0.65 s).
bool LaneWeights(int64_t groups, int64_t cin, int64_t cout, const IntVec& hw, int64_t work) {
  if (groups != 1 || hw.size() != 2 || cout % 16 != 0) return false;
  return cin * hw[0] * hw[1] >= 64 && work >= (int64_t{1} << 20);
}

// Whether a conv is a pointwise one (1x1, stride 1, unpadded) over whole 16-pixel vectors: a matmul whose lanes are
// the pixels (MatmulTile's contiguous-store axis), so its weight stays [Co, Ci] rather than LaneWeights' packing, in
// which the tile's 16 weight rows each read another 64-byte line per input channel (ResNet-50's 128 -> 512 channel
// 1x1 at 28x28: 1.13 ms packed, 0.22 ms not; 64 -> 256 at 56x56 0.48 -> 0.31 ms; at 14x14 and 7x7 the pixels do not
// fill vectors, the lanes are channels and the packing stays: 4.5 ms without it). `pooled` is the pooled input's
// shape (bs, ci, *oyx, *hw).
bool PixelLanes(const IntVec& hw, const IntVec& stride, const std::vector<std::pair<int64_t, int64_t>>& pads,
                const Shape& pooled) {
  const auto one = [](int64_t v) { return v == 1; };
  if (!std::all_of(hw.begin(), hw.end(), one) || !std::all_of(stride.begin(), stride.end(), one)) return false;
  if (!std::all_of(pads.begin(), pads.end(), [](const auto& p) { return !p.first && !p.second; })) return false;
  int64_t pixels = 1;
  for (size_t i = 0; i < hw.size(); ++i) pixels *= pooled[2 + i];
  return pixels % 16 == 0;
}

// MaxPool2d's gradient over a large input (>= 2^20 elements), in three stored steps rather than by the rules, whose
// one fused expression (x == max, divided by the window's count of maxima, times the pooled gradient) consumers
// recomputed per input element, count included: the pooled gradient is stored, then divided by the count at the
// pooled size (h), then spread over the window's maxima into a contiguous input gradient. The BatchNorm backward
// before the CNN's pools then reads that buffer, and its reduce runs over the merged 20 x 20 pixels (8 lanes) instead
// of rows split by the pool's window. Ties still share the gradient equally: is_max * (g / count) where the rules
// give is_max / count * g (the same values but for the last bit when 3 or more of a window tie). The Fashion-MNIST
// step on a 2-core Zen 3, best kernel times: conv2's BatchNorm and pool backward 27 -> 18 ms (and 9 ms more with
// the vectorized sums of vector_lanes.cc).
void RegisterMaxPoolGradient(const UOpPtr& out, const UOpPtr& x, const std::vector<std::pair<int64_t, int64_t>>& pads,
                             const Scalar& lowest, const IntVec& k, const IntVec& stride, const IntVec& dilation) {
  const Digest x_key = x->Key();
  RegisterGradientOverride(out, [x_key, pads, lowest, k, stride, dilation](
                                    const UOpPtr& node, const Tensor& grad, const std::string& device)
                                    -> absl::StatusOr<std::vector<std::pair<UOpPtr, UOpPtr>>> {
    UOpPtr xn = FindByKey(node, x_key, kOverrideDepth);
    if (!xn) return absl::InternalError("MaxPool2d gradient: input not found under the output");
    const Tensor window = Tensor(xn, device).Pad(pads, lowest).Pool(k, stride, dilation);  // (..., *out, *k)
    IntVec kept(node->shape().begin(), node->shape().end()), axes;
    for (size_t i = 0; i < k.size(); ++i) {
      kept.push_back(1);
      axes.push_back(-1 - static_cast<int64_t>(i));
    }
    const Tensor is_max = window.Eq(Tensor(node, device).Reshape(kept).Expand(window.shape())).Cast(grad.dtype());
    const Tensor h = grad.Contiguous()
                         .Reshape(kept)
                         .Div(is_max.Sum(Axes(absl::Span<const int64_t>(axes)), /*keepdim=*/true))
                         .Contiguous();
    const Tensor spread = is_max.Mul(h.Expand(window.shape()));
    if (!spread.ok()) return spread.status();
    KILN_ASSIGN_OR_RETURN(std::vector<UOpPtr> gx, ComputeGradientByRules(window.uop(), spread.uop(), {xn}, device));
    return std::vector<std::pair<UOpPtr, UOpPtr>>{{xn, Tensor(gx[0], device).Contiguous().uop()}};
  });
}

}  // namespace

Tensor Tensor::Conv2d(const Tensor& weight, const std::optional<Tensor>& bias, const ConvOptions& opt) const {
  const Tensor* b = bias ? &*bias : nullptr;
  if (absl::Status st = FirstError({this, &weight, b}); !st.ok()) return FromStatus(st);
  if (ndim() < 3 || weight.ndim() != ndim())
    return FromStatus(Invalid("Conv2d", "input shape ", Str(shape()), " does not match the weight shape ",
                              Str(weight.shape())));
  int64_t bs = shape()[0], cin_ = shape()[1], cout = weight.shape()[0], cin = weight.shape()[1];
  IntVec hw(weight.shape().begin() + 2, weight.shape().end());
  size_t n = hw.size();
  if (opt.groups < 1 || opt.groups * cin != cin_ || cout % opt.groups != 0)
    return FromStatus(Invalid("Conv2d", "input channels ", cin_, " do not match groups ", opt.groups, " x weight ",
                              "channels ", cin, " (weight ", Str(weight.shape()), ", ", cout, " output channels)"));
  auto stride = PerDim("Conv2d", "stride", opt.stride, n, 1);
  auto dilation = PerDim("Conv2d", "dilation", opt.dilation, n, 1);
  auto pads = PoolPads("Conv2d", opt.padding, ndim(), n);
  if (!stride.ok()) return FromStatus(stride.status());
  if (!dilation.ok()) return FromStatus(dilation.status());
  if (!pads.ok()) return FromStatus(pads.status());
  if (bias && (bias->ndim() != 1 || bias->size(0) != cout))
    return FromStatus(Invalid("Conv2d", "bias shape ", Str(bias->shape()), " must be (", cout, ")"));
  const auto ones = [](const IntVec& v) { return std::all_of(v.begin(), v.end(), [](int64_t s) { return s == 1; }); };
  const auto with_bias = [&](const Tensor& ret) {
    if (!bias) return ret;
    IntVec bshape = {1, -1};
    bshape.insert(bshape.end(), n, 1);
    return ret.Add(bias->Reshape(bshape));
  };
  // A stride-1 3x3 or 5x5 conv with enough channels, in inference, runs in a Winograd form (winograd.cc); its
  // gradient is the direct conv's (registered below, x and w found under the transforms).
  if (n == 2 && opt.groups == 1 && ones(*stride) && ones(*dilation)) {
    if (std::optional<Tensor> y = tensor_internal::WinogradConv2d(*this, weight, *pads, opt.acc_dtype)) {
      if (!y->ok()) return *y;
      RegisterConvGradient(y->uop(), uop(), weight.uop(), uop(), /*cl_input=*/true, *pads, hw, *stride,
                           kWinogradOverrideDepth);
      return with_bias(*y);
    }
  }
  // A strided pointwise conv (1x1, stride > 1, unpadded: ResNet's downsampling shortcuts) runs as a stride-1 conv over
  // a stored copy of the pixels it reads. Read in place, each tile row's broadcasts skip every other pixel and every
  // other input row, and at 56x56 the input rows (12544 bytes apart) alias in L1 across the channel loop: ResNet-50's
  // three shortcut convs took 1.67, 1.26 and 1.26 ms; over the copy (a quarter of the input, one elementwise kernel)
  // 0.88, 0.83-0.85 and 0.99-1.07 ms, the model 43.7-44.1 -> 40.8-42.8 ms (2-core Emerald Rapids). A computed input
  // is stored first as it is, the same node the block's next conv stores (see the lanes case below), so the copy
  // reads it rather than recomputing the residual chain that produced it.
  if (n == 2 && ndim() == 4 && hw[0] == 1 && hw[1] == 1 && ((*stride)[0] > 1 || (*stride)[1] > 1) &&
      (*dilation)[0] == 1 && (*dilation)[1] == 1 &&
      std::all_of(pads->begin(), pads->end(), [](const auto& p) { return !p.first && !p.second; })) {
    const Tensor base = ComputedElementwise(*this) ? Contiguous() : *this;
    const Tensor picked = base.Pool(hw, *stride, *dilation);  // (bs, cin, oy, ox, 1, 1)
    if (!picked.ok()) return picked;
    if (picked.numel() * cout >= (int64_t{1} << 20)) {
      ConvOptions dense = opt;
      dense.stride = {1};
      dense.padding = {0};
      return picked.Reshape({bs, cin_, picked.size(2), picked.size(3)}).Contiguous().Conv2d(weight, bias, dense);
    }
  }
  Tensor x = Pad(*pads).Pool(hw, *stride, *dilation);  // (bs, groups*cin, *oyx, *hw)
  if (!x.ok()) return x;
  // A pointwise conv over a channels-last input (a Winograd conv's output, winograd.cc) takes channel lanes too: with
  // pixel lanes each 16-pixel load gathers from rows Ci floats apart and the [Co, Ci] weights were read a column at a
  // time. ResNet-50 at batch 1 (2-core Zen 4): its stage-1 64 -> 256 1x1 after the Winograd 3x3 1.6 -> 0.7 ms, stage 2's
  // 128 -> 512 1.3 -> 0.55 ms; the model's kernel sums 41-44 -> 38-41 ms, now under WINO=0's (41-42 ms). A computed
  // input (the ReLU) is stored channels-last as it is read.
  const bool cl_read = ReadsChannelsLast(*this);
  const bool lanes = (cl_read || !PixelLanes(hw, *stride, *pads, x.shape())) &&
                     LaneWeights(opt.groups, cin, cout, hw, x.numel() * (cout / opt.groups));
  // An input computed elementwise (the CNN's relu(conv1 + bias)) is stored once rather than recomputed in the conv
  // kernels' loads: each input value is broadcast Co x KH x KW times, so the forward and the weight gradient of
  // conv2 each redid the add and max per broadcast (59.7 and 62.0 ms in the training step against 50.6 and 51.1 ms
  // with a stored input in conv_perf).
  // A conv with channel lanes and a spatial kernel reads its input from a padded channels-last copy ([B, H + pads,
  // W + pads, Ci]): its reduce runs ci innermost, so the tile rows' broadcast loads step through one cache line per
  // 16 input channels instead of one line per channel (NCHW: H * W floats apart), and with the padding in the copy
  // they carry no gates (gated, LLVM packed the rows' loads into one vector, masked it and shuffled each row back
  // out: 12 shuffles per 8 FMAs). A computed input is stored first as it is (NCHW; the weight gradient reads that
  // one): fused into the copy, a reduce producer (ONNX's conv -> BatchNorm -> ReLU) ran with channels-last stores
  // at a third of its speed. conv_perf --batch 1 on a 2-core Zen 3 (AVX2), best kernel times: ResNet-50's 3x3
  // convs forward 3.1-6.4 -> 1.4-2.6 ms, their stride-1 input gradients 3.7-11 -> 1.5-2.9 ms; `kiln-onnx bench
  // resnet50.onnx` 125-132 -> 97-102 ms. 1x1 convs (no padding, a plain matmul over Ci) keep their NCHW input:
  // channels-last, 2048 -> 512 at 7x7 took 1.7 -> 3.1 ms.
  const bool cl_input = lanes && hw[0] * hw[1] > 1;
  if (cl_input && ChannelsLastCopy(*this)) {
    x = Pad(*pads).Pool(hw, *stride, *dilation);  // already copied (the input gradient's output gradient)
  } else if (cl_input) {
    const Tensor base = Unstored(*this) ? Contiguous() : *this;
    x = StoreChannelsLast(base.Pad(*pads)).Pool(hw, *stride, *dilation);
    if (!x.ok()) return x;
  } else if (lanes && ComputedElementwise(*this)) {
    x = (cl_read ? StoreChannelsLast(*this) : Contiguous()).Pad(*pads).Pool(hw, *stride, *dilation);
    if (!x.ok()) return x;
  }
  const UOpPtr xpool = x.uop();
  int64_t g = opt.groups, rcout = cout / g;
  IntVec oyx(x.shape().begin() + 2, x.shape().begin() + 2 + n);
  IntVec r1 = {bs, g, cin, 1}, e1 = {bs, g, cin, rcout};
  r1.insert(r1.end(), oyx.begin(), oyx.end());
  r1.insert(r1.end(), hw.begin(), hw.end());
  e1.insert(e1.end(), oyx.begin(), oyx.end());
  e1.insert(e1.end(), hw.begin(), hw.end());
  IntVec perm = {0, 1, 3};
  for (size_t i = 0; i < n; ++i) perm.push_back(4 + i);
  perm.push_back(2);
  for (size_t i = 0; i < n; ++i) perm.push_back(4 + n + i);
  x = x.Reshape(r1).Expand(e1).Permute(perm);  // (bs, groups, rcout, *oyx, cin, *hw)
  IntVec wshape = {1, g, rcout};
  wshape.insert(wshape.end(), n, 1);
  wshape.push_back(cin);
  wshape.insert(wshape.end(), hw.begin(), hw.end());
  IntVec axes;
  for (size_t i = 0; i < 1 + n; ++i) axes.push_back(-1 - static_cast<int64_t>(i));
  IntVec out = {bs, cout};
  out.insert(out.end(), oyx.begin(), oyx.end());
  Tensor w = weight;
  if (lanes) {
    const int64_t kh = hw[0], kw = hw[1];
    // The packed order follows the reduce loops: with a channels-last input they run (ky, kx, ci), ci innermost,
    // and the weights are packed [Co / 16][KH][KW][Ci][16] so that the ci loop reads one contiguous run; packed
    // [Co / 16][Ci][KH][KW][16], each step jumped KH * KW * 16 floats (1152 bytes at 3x3) and the stage-4 3x3
    // convs of ResNet-50 (9.4 MB of weights, re-read from L2 per row block) ran at 150 GFLOPS: 1.57 -> 1.13-1.19 ms
    // each, stage 3's 0.92 -> 0.80-0.83 ms (2-core Emerald Rapids). 32-lane packing to match the 32-lane tiles
    // measured no faster.
    const IntVec pack = cl_input ? IntVec{0, 3, 4, 2, 1} : IntVec{0, 2, 3, 4, 1};
    const IntVec unpack = cl_input ? IntVec{0, 4, 3, 1, 2} : IntVec{0, 4, 1, 2, 3};
    w = weight.Reshape({cout / kConvPackLanes, kConvPackLanes, cin, kh, kw})
            .Permute(pack)
            .Contiguous()
            .Permute(unpack)
            .Reshape(weight.shape());
  }
  Tensor ret = x.Mul(w.Reshape(wshape)).Sum(Axes(absl::Span<const int64_t>(axes)), true, opt.acc_dtype).Reshape(out);
  if (ret.ok() && g == 1 && n == 2 && ones(*dilation)) {
    RegisterConvGradient(ret.uop(), uop(), weight.uop(), xpool, cl_input, *pads, hw, *stride);
  }
  return with_bias(ret);
}

Tensor Tensor::MaxPool2d(absl::Span<const int64_t> kernel, const PoolOptions& opt) const {
  if (!ok()) return *this;
  size_t n = kernel.size();
  IntVec k = ToVec(kernel);
  auto stride = PerDim("MaxPool2d", "stride", opt.stride.empty() ? k : opt.stride, n, 1);
  auto dilation = PerDim("MaxPool2d", "dilation", opt.dilation, n, 1);
  if (!stride.ok()) return FromStatus(stride.status());
  if (!dilation.ok()) return FromStatus(dilation.status());
  if (ndim() < static_cast<int64_t>(n)) return FromStatus(Invalid("MaxPool2d", "input rank too small for kernel ", Str(k)));
  auto pads = PoolPads("MaxPool2d", opt.padding, ndim(), n);
  if (!pads.ok()) return FromStatus(pads.status());
  Scalar lowest = dtype().IsFloat() ? Scalar(-std::numeric_limits<double>::infinity())
                  : dtype().IsBool() ? Scalar(false)
                                     : Scalar(DTypeMin(dtype()));
  IntVec axes;
  for (size_t i = 0; i < n; ++i) axes.push_back(-1 - static_cast<int64_t>(i));
  Tensor ret = Pad(*pads, lowest).Pool(k, *stride, *dilation).Max(Axes(absl::Span<const int64_t>(axes)));
  if (ret.ok() && numel() >= (int64_t{1} << 20))
    RegisterMaxPoolGradient(ret.uop(), uop(), *pads, lowest, k, *stride, *dilation);
  return ret;
}

Tensor Tensor::AvgPool2d(absl::Span<const int64_t> kernel, const PoolOptions& opt) const {
  if (!ok()) return *this;
  size_t n = kernel.size();
  IntVec k = ToVec(kernel);
  auto stride = PerDim("AvgPool2d", "stride", opt.stride.empty() ? k : opt.stride, n, 1);
  auto dilation = PerDim("AvgPool2d", "dilation", opt.dilation, n, 1);
  if (!stride.ok()) return FromStatus(stride.status());
  if (!dilation.ok()) return FromStatus(dilation.status());
  if (ndim() < static_cast<int64_t>(n)) return FromStatus(Invalid("AvgPool2d", "input rank too small for kernel ", Str(k)));
  auto pads = PoolPads("AvgPool2d", opt.padding, ndim(), n);
  if (!pads.ok()) return FromStatus(pads.status());
  IntVec axes;
  for (size_t i = 0; i < n; ++i) axes.push_back(-1 - static_cast<int64_t>(i));
  Axes ax{absl::Span<const int64_t>(axes)};
  if (opt.count_include_pad) return Pad(*pads).Pool(k, *stride, *dilation).Mean(ax);
  return Pad(*pads).Pool(k, *stride, *dilation).Sum(ax).Div(OnesLike().Pad(*pads).Pool(k, *stride, *dilation).Sum(ax));
}

Tensor Tensor::Softmax(int64_t axis) const {
  Tensor e = Sub(Max(axis, true)).Exp();
  return e.Div(e.Sum(axis, true));
}

Tensor Tensor::LogSoftmax(int64_t axis) const {
  Tensor m = Sub(Max(axis, true));
  return m.Sub(m.Exp().Sum(axis, true).Log());
}

Tensor Tensor::LayerNorm(int64_t normalized_dims, const std::optional<Tensor>& weight,
                         const std::optional<Tensor>& bias, double eps) const {
  if (!ok()) return *this;
  if (normalized_dims < 1 || normalized_dims > ndim())
    return FromStatus(Invalid("LayerNorm", "normalized_dims ", normalized_dims, " out of range for rank ", ndim()));
  IntVec axes;
  for (int64_t i = 0; i < normalized_dims; ++i) axes.push_back(-1 - i);
  Axes ax{absl::Span<const int64_t>(axes)};
  Tensor y = Sub(Mean(ax, true));
  Tensor r = y.Mul(y.Mul(y).Mean(ax, true).Add(eps).Rsqrt());
  if (weight) r = r.Mul(*weight);
  if (bias) r = r.Add(*bias);
  return r;
}

Tensor Tensor::BatchNorm(const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, const Tensor& mean,
                         const Tensor& invstd, int64_t axis) const {
  if (absl::Status st = FirstError({this, &mean, &invstd, weight ? &*weight : nullptr, bias ? &*bias : nullptr});
      !st.ok())
    return FromStatus(st);
  auto ax = NormAxis("BatchNorm", axis, ndim());
  if (!ax.ok()) return FromStatus(ax.status());
  IntVec s(ndim(), 1);
  s[*ax] = shape()[*ax];
  Tensor x = Sub(mean.Reshape(s));
  if (weight) x = x.Mul(weight->Reshape(s));
  Tensor r = x.Mul(invstd.ndim() == 1 ? invstd.Reshape(s) : invstd);
  return bias ? r.Add(bias->Reshape(s)) : r;
}

Tensor Tensor::SparseCategoricalCrossentropy(const Tensor& labels, int64_t ignore_index, double label_smoothing,
                                             const std::string& reduction) const {
  if (absl::Status st = FirstError({this, &labels}); !st.ok()) return FromStatus(st);
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0))
    return FromStatus(Invalid("SparseCategoricalCrossentropy", "label_smoothing must be in [0, 1]"));
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    return FromStatus(Invalid("SparseCategoricalCrossentropy", "reduction must be mean, sum or none"));
  if (!labels.dtype().IsInt())
    return FromStatus(Invalid("SparseCategoricalCrossentropy", "labels must be integers, got ", labels.dtype().Name()));
  if (ndim() < 1 || labels.shape() != Shape(shape().begin(), shape().end() - 1))
    return FromStatus(Invalid("SparseCategoricalCrossentropy", "labels shape ", Str(labels.shape()),
                              " must be the logits shape ", Str(shape()), " without the last dim"));
  Tensor log_probs = LogSoftmax(-1);
  Tensor mask = ignore_index != -1 ? labels.Ne(ignore_index) : labels.FullLike(true, dtypes::kBool);
  Tensor y = labels.OneHot(size(-1)).LogicalAnd(mask.Unsqueeze(-1));
  Tensor smoothing = log_probs.Mean(-1).Mul(mask).Mul(label_smoothing);
  Tensor unreduced = log_probs.Mul(y).Sum(-1).Mul(1.0 - label_smoothing).Add(smoothing);
  if (reduction == "mean") return unreduced.Sum().Div(mask.Sum()).Neg();
  if (reduction == "sum") return unreduced.Sum().Neg();
  return unreduced.Neg();
}

}  // namespace kiln
