// Winograd convolution (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016; tinygrad's WINO):
// a stride-1 r x r conv computed per m x m output tile as Y = A^T [(G g G^T) (.) (B^T d B)] A over the tile's
// alpha x alpha input window d (alpha = m + r - 1): each tile costs alpha^2 multiply-adds per input and output
// channel where the direct conv costs m^2 r^2. Forms: F(4x4, 5x5) 64 against 400 (the Fashion-MNIST CNN's conv2),
// F(2x2, 5x5) 36 against 100, F(6x6, 3x3) 64 against 324, F(4x4, 3x3) 36 against 144; Conv2d takes the cheapest
// per shape (tiles x alpha^2 with the transforms' share, and the weights' reads where they exceed the caches) where it
// is under 60% of the direct conv's.
//
// The transforms are sums of a window's values with small constant weights, written out term by term (zero weights
// skipped, +-1 as adds) and stacked by selects (SelectStack), so each transform is one elementwise kernel whose
// stacked axes the CPU heuristic upcasts whole (codegen/elementwise_axes.cc, StackedAxesWhole) and whose selects fold
// per lane (expand.cc, SubstitutePicking): every lane computes its own value only.
//
// Kernels: the weights copied [r, r, Ci, Co] and transformed, U = G g G^T stored [alpha^2, Ci, Co] (constant calls in
// a JIT trace over constant weights); the input stored channels-last and padded to whole tiles; its transform
// V = B^T d B stored [B, TY, TX, alpha^2, Ci]; the product M = V U over Ci (a batched matmul), stored
// [B, TY, TX, alpha^2, Co]; the output transform A^T M A stored channels-last [B, TY*m, TX*m, Co], returned as an NCHW
// view (cropped to OH x OW). The matrices are Cook-Toom's for the points 0, 1, -1, 2, -2 (alpha = 6) and 0, 1, -1,
// 2, -2, 1/2, -1/2 (alpha = 8) with infinity; each product A^T[(G g) (.) (B^T d)] was checked exactly against the
// direct correlation in rational arithmetic when written down. Rounding, max |error| / max |output| against float64
// (winograd_test): F(4x4, 3x3) 3-5e-6, F(4x4, 5x5) 5.7e-6 on the CNN's conv2, F(6x6, 3x3) 3e-5, and up to 1.1e-4
// for an F(4x4, 5x5) over a sparse input (a padded output gradient: the error follows the windows, not the outputs);
// the direct conv 1-4e-6. WINO=0 keeps every conv direct.
#include <array>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "engine/base/env.h"
#include "engine/tensor/tensor.h"
#include "engine/tensor/tensor_internal.h"

namespace kiln::tensor_internal {
namespace {

// One Winograd variant F(m, r): A^T (m x alpha), G (alpha x r), B^T (alpha x alpha), row-major.
struct Variant {
  int m, r, alpha;
  std::vector<double> at, g, bt;
};

// B^T for the points 0, 1, -1, 2, -2, infinity (alpha = 6): shared by F(2, 5) and F(4, 3).
const std::vector<double> kBt6 = {4, 0,  -5, 0,  1, 0,  //
                                  0, -4, -4, 1,  1, 0,  //
                                  0, 4,  -4, -1, 1, 0,  //
                                  0, -2, -1, 2,  1, 0,  //
                                  0, 2,  -1, -2, 1, 0,  //
                                  0, 4,  0,  -5, 0, 1};

// B^T for the points 0, 1, -1, 2, -2, 1/2, -1/2, infinity (alpha = 8): shared by F(4, 5) and F(6, 3).
const std::vector<double> kBt8 = {-1, 0,        21.0 / 4, 0,         -21.0 / 4, 0,         1, 0,  //
                                  0,  1,        1,        -17.0 / 4, -17.0 / 4, 1,         1, 0,  //
                                  0,  -1,       1,        17.0 / 4,  -17.0 / 4, -1,        1, 0,  //
                                  0,  1.0 / 2,  1.0 / 4,  -5.0 / 2,  -5.0 / 4,  2,         1, 0,  //
                                  0,  -1.0 / 2, 1.0 / 4,  5.0 / 2,   -5.0 / 4,  -2,        1, 0,  //
                                  0,  2,        4,        -5.0 / 2,  -5,        1.0 / 2,   1, 0,  //
                                  0,  -2,       4,        5.0 / 2,   -5,        -1.0 / 2,  1, 0,  //
                                  0,  -1,       0,        21.0 / 4,  0,         -21.0 / 4, 0, 1};

// G's rows for alpha = 8 and r taps: -1 at 0, then (p^j / f) per finite point, 1 at infinity.
std::vector<double> G8(int r) {
  const double rows[7][5] = {{-1, 0, 0, 0, 0},
                             {-2.0 / 9, -2.0 / 9, -2.0 / 9, -2.0 / 9, -2.0 / 9},
                             {-2.0 / 9, 2.0 / 9, -2.0 / 9, 2.0 / 9, -2.0 / 9},
                             {1.0 / 90, 1.0 / 45, 2.0 / 45, 4.0 / 45, 8.0 / 45},
                             {1.0 / 90, -1.0 / 45, 2.0 / 45, -4.0 / 45, 8.0 / 45},
                             {32.0 / 45, 16.0 / 45, 8.0 / 45, 4.0 / 45, 2.0 / 45},
                             {32.0 / 45, -16.0 / 45, 8.0 / 45, -4.0 / 45, 2.0 / 45}};
  std::vector<double> g;
  for (const auto& row : rows) g.insert(g.end(), row, row + r);
  for (int j = 0; j < r; ++j) g.push_back(j == r - 1 ? 1 : 0);
  return g;
}

// A^T for alpha = 8 and m outputs: p^i per finite point, 1 at infinity in the last row.
std::vector<double> At8(int m) {
  const double pts[7] = {0, 1, -1, 2, -2, 0.5, -0.5};
  std::vector<double> at;
  for (int i = 0; i < m; ++i) {
    for (double p : pts) at.push_back(i == 0 ? 1 : std::pow(p, i));
    at.push_back(i == m - 1 ? 1 : 0);
  }
  return at;
}

const Variant& F4x5() {
  static const Variant v{4, 5, 8, At8(4), G8(5), kBt8};
  return v;
}

const Variant& F6x3() {
  static const Variant v{6, 3, 8, At8(6), G8(3), kBt8};
  return v;
}

const Variant& F2x5() {
  static const Variant v{2,
                         5,
                         6,
                         {1, 1, 1, 1, 1, 0,  //
                          0, 1, -1, 2, -2, 1},
                         {1.0 / 4,  0,         0,        0,        0,         //
                          -1.0 / 6, -1.0 / 6,  -1.0 / 6, -1.0 / 6, -1.0 / 6,  //
                          -1.0 / 6, 1.0 / 6,   -1.0 / 6, 1.0 / 6,  -1.0 / 6,  //
                          1.0 / 24, 1.0 / 12,  1.0 / 6,  1.0 / 3,  2.0 / 3,   //
                          1.0 / 24, -1.0 / 12, 1.0 / 6,  -1.0 / 3, 2.0 / 3,   //
                          0,        0,         0,        0,        1},
                         kBt6};
  return v;
}

const Variant& F4x3() {
  static const Variant v{4,
                         3,
                         6,
                         {1, 1, 1,  1, 1,  0,  //
                          0, 1, -1, 2, -2, 0,  //
                          0, 1, 1,  4, 4,  0,  //
                          0, 1, -1, 8, -8, 1},
                         {1.0 / 4, 0, 0,                 //
                          -1.0 / 6, -1.0 / 6, -1.0 / 6,  //
                          -1.0 / 6, 1.0 / 6, -1.0 / 6,   //
                          1.0 / 24, 1.0 / 12, 1.0 / 6,   //
                          1.0 / 24, -1.0 / 12, 1.0 / 6,  //
                          0, 0, 1},
                         kBt6};
  return v;
}

// out[a] = sum_i mat[a][i] * in[i] (mat rows x in.size()), the zero weights skipped, +-1 as adds and subtracts.
std::vector<Tensor> Combine(const std::vector<double>& mat, int rows,
                            const std::vector<Tensor>& in) {
  const int cols = static_cast<int>(in.size());
  std::vector<Tensor> out;
  for (int a = 0; a < rows; ++a) {
    std::optional<Tensor> acc;
    for (int i = 0; i < cols; ++i) {
      const double c = mat[a * cols + i];
      if (c == 0) continue;
      if (!acc)
        acc = c == 1 ? in[i] : c == -1 ? in[i].Neg() : in[i].Mul(c);
      else if (c == 1)
        acc = acc->Add(in[i]);
      else if (c == -1)
        acc = acc->Sub(in[i]);
      else
        acc = acc->Add(in[i].Mul(c));
    }
    out.push_back(acc ? *acc : in[0].Mul(0.0));
  }
  return out;
}

// The 2-D transform mat (.) grid (.) mat^T of a rows_in x rows_in grid of tensors: rows first, then columns.
std::vector<std::vector<Tensor>> Transform2d(const std::vector<double>& mat, int rows,
                                             const std::vector<std::vector<Tensor>>& grid) {
  std::vector<std::vector<Tensor>> half;  // half[i][b]: row i transformed along its columns
  for (const std::vector<Tensor>& row : grid) half.push_back(Combine(mat, rows, row));
  std::vector<std::vector<Tensor>> out(rows);
  for (int b = 0; b < rows; ++b) {
    std::vector<Tensor> col;
    for (const std::vector<Tensor>& h : half) col.push_back(h[b]);
    std::vector<Tensor> t = Combine(mat, rows, col);
    for (int a = 0; a < rows; ++a) out[a].push_back(t[a]);
  }
  return out;
}

// Tensor::Stack as selects: each value broadcast along a new axis `dim` and chosen in its slot, where a padded
// all-true mask says it lies. Stack's pads and adds leave a "+ 0" per other slot, which float math may not drop
// (-0 + 0 is +0); a select on the slot folds exactly once the axis is upcast (codegen's "where(index comparison that
// folds to a constant)"), each lane keeping its own value's terms only.
Tensor SelectStack(const std::vector<Tensor>& ts, int64_t dim) {
  const int64_t n = static_cast<int64_t>(ts.size());
  std::optional<Tensor> acc;
  for (int64_t k = 0; k < n; ++k) {
    const Tensor t = ts[k].Unsqueeze(dim);
    const int64_t d = dim < 0 ? dim + t.ndim() : dim;
    // The value broadcast along the new axis (not padded into its slot: its loads stay ungated, and the work
    // estimate counts it once per element rather than once per slot).
    IntVec wide(t.shape().begin(), t.shape().end());
    wide[d] = n;
    const Tensor slot = t.Expand(wide);
    if (!acc) {
      acc = slot;
      continue;
    }
    std::vector<std::pair<int64_t, int64_t>> pads(t.ndim(), {0, 0});
    pads[d] = {k, n - 1 - k};
    acc = t.FullLike(true, dtypes::kBool).Pad(pads).Where(slot, *acc);
  }
  return *acc;
}

// The grid's tensors stacked along two new axes `dim` (rows) and `dim` + 1 (columns): each small enough for the
// heuristic to upcast whole (an upcast spans at most 16 lanes).
Tensor StackGrid(const std::vector<std::vector<Tensor>>& grid, int64_t dim) {
  std::vector<Tensor> rows;
  for (const std::vector<Tensor>& row : grid) rows.push_back(SelectStack(row, dim));
  return SelectStack(rows, dim);
}

// Element (i, j) of the last two axes of t, those axes dropped.
Tensor At2(const Tensor& t, int64_t i, int64_t j) {
  std::vector<std::pair<int64_t, int64_t>> b;
  for (int64_t d = 0; d + 2 < t.ndim(); ++d) b.emplace_back(0, t.shape()[d]);
  b.emplace_back(i, i + 1);
  b.emplace_back(j, j + 1);
  IntVec shape(t.shape().begin(), t.shape().end() - 2);
  return t.Shrink(b).Reshape(shape);
}

// Whether computing `t` runs a reduce that no stored buffer separates from it (elementwise and movement ops above
// a REDUCE_AXIS).
bool ReducesUnstored(const Tensor& t) {
  return Reaches(
      t, [](const UOp* u) { return IsElementwise(u->op()) || IsMovement(u->op()); },
      [](const UOp* u) { return u->op() == Op::REDUCE_AXIS; });
}

// Time in multiply-adds per input and output channel and image: the product's tiles x alpha^2, the transforms'
// share, and the weights' reads. Every image reuses the weights, so a batch of B reads each weight once per B images;
// a float read from memory costs about as long as kWeightReadCost multiply-adds (2-core Zen 4: ~100 G FMA/s against
// ~6 G floats/s from DRAM). The transformed weights are alpha^2 / r^2 times the direct conv's: at a small output
// (ResNet-50's 7x7 stage 4 at batch 1, four tiles per image) the product only streams them, 2.2 ms against the direct
// conv's 1.3 ms.
constexpr double kWeightReadCost = 16.0;
// Weights up to this size are taken to stay in the caches between calls (the Fashion-MNIST CNN's transformed conv2
// and conv4 weights, 0.5-0.6 MiB): no read cost.
constexpr double kCachedWeightBytes = 1 << 20;

// The read cost of weights of `slots` floats per channel pair, per channel pair and image.
double WeightReads(double slots, int64_t b, int64_t ci, int64_t co) {
  const bool cached = slots * static_cast<double>(ci * co) * 4 <= kCachedWeightBytes;
  return cached ? 0.0 : kWeightReadCost * slots / static_cast<double>(b);
}

double Cost(const Variant& v, int64_t b, int64_t oh, int64_t ow, int64_t ci, int64_t co) {
  const double tiles = static_cast<double>(CeilDiv(oh, v.m) * CeilDiv(ow, v.m));
  const double a2 = v.alpha * v.alpha;
  return tiles * a2 * (1.0 + 8.0 / static_cast<double>(co) + 4.0 / static_cast<double>(ci)) +
         WeightReads(a2, b, ci, co);
}

double DirectCost(int64_t r, int64_t b, int64_t oh, int64_t ow, int64_t ci, int64_t co) {
  const double r2 = static_cast<double>(r * r);
  return static_cast<double>(oh * ow) * r2 + WeightReads(r2, b, ci, co);
}

}  // namespace

std::optional<Tensor> WinogradConv2d(const Tensor& x, const Tensor& w,
                                     const std::vector<std::pair<int64_t, int64_t>>& pads,
                                     std::optional<DType> acc_dtype) {
  if (GetKnob(Knob::kWino) == 0 || x.ndim() != 4 || w.ndim() != 4) return std::nullopt;
  // The CPU only: its heuristic upcasts the transforms' stacked axes (heuristic.cc); the GPU heuristic does not, so
  // there every output would compute all alpha^2 slots. INTERP, the tests' oracle, keeps the direct conv.
  if (x.device().rfind("CPU", 0) != 0) return std::nullopt;
  // Inference only: a conv whose input or weights require grad (a training step) stays direct. The Fashion-MNIST
  // step measured the same either way (232-238 against 238-240 ms at batch 512: its backward convs dominate) while
  // the transforms' kernels took its cold first step from 1.7 s to 4.5 s of compiling.
  if (x.requires_grad() || w.requires_grad()) return std::nullopt;
  if (x.dtype() != dtypes::kFloat32 || w.dtype() != dtypes::kFloat32) return std::nullopt;
  if (acc_dtype && *acc_dtype != dtypes::kFloat32) return std::nullopt;
  const int64_t b = x.size(0), ci = x.size(1), co = w.size(0), r = w.size(2);
  if (w.size(1) != ci || w.size(3) != r || (r != 3 && r != 5)) return std::nullopt;
  const int64_t oh = x.size(2) + pads[2].first + pads[2].second - r + 1;
  const int64_t ow = x.size(3) + pads[3].first + pads[3].second - r + 1;
  // Enough channels that the product dominates the transforms, outputs in whole 16-lane vectors, and enough work
  // that three more kernels pay (LaneWeights' bound).
  if (ci < 16 || co % 16 != 0 || oh < 2 || ow < 2) return std::nullopt;
  if (b * co * oh * ow * ci * r * r < (int64_t{1} << 20)) return std::nullopt;
  const Variant* best = nullptr;
  double best_cost = 0.6 * DirectCost(r, b, oh, ow, ci, co);  // a Winograd form pays below 60% of the direct
  const std::vector<const Variant*> variants = r == 5
                                                   ? std::vector<const Variant*>{&F2x5(), &F4x5()}
                                                   : std::vector<const Variant*>{&F4x3(), &F6x3()};
  for (const Variant* v : variants) {
    const double c = Cost(*v, b, oh, ow, ci, co);
    if (c < best_cost) best = v, best_cost = c;
  }
  if (best == nullptr) return std::nullopt;
  const Variant& v = *best;
  const int64_t m = v.m, alpha = v.alpha, ty = CeilDiv(oh, m), tx = CeilDiv(ow, m);
  const int64_t hp = ty * m + r - 1,
                wp = tx * m + r - 1;  // the padded input every tile's window lies in

  // The input, padded (its own padding, then to whole tiles) and stored channels-last: the transform reads 16
  // channels per vector, ungated.
  const std::pair<int64_t, int64_t> none{0, 0};
  // An input computed by a reduce (the CNN's relu(conv1 + bias)) is stored first as it is: fused into the
  // channels-last copy, conv1's reduce ran with the copy's loop order, 3.6x slower (2.10 ms against 0.59 ms at batch
  // 32). Elementwise work over stored buffers (relu(conv3 + bias) over conv3's channels-last Winograd output) fuses
  // into the copy, each element computed once.
  const Tensor base = ReducesUnstored(x) ? x.Contiguous() : x;
  const Tensor xp = base.Pad({none,
                              none,
                              {pads[2].first, hp - x.size(2) - pads[2].first},
                              {pads[3].first, wp - x.size(3) - pads[3].first}})
                        .Permute({0, 2, 3, 1})
                        .Contiguous();  // [B, HP, WP, Ci]
  // The tiles' windows: [B, Ci, TY, TX, alpha, alpha] -> [B, TY, TX, Ci, alpha, alpha] (views).
  const Tensor d =
      xp.Permute({0, 3, 1, 2}).Pool({alpha, alpha}, {m, m}, {1, 1}).Permute({0, 2, 3, 1, 4, 5});
  std::vector<std::vector<Tensor>> dg(alpha);
  for (int64_t i = 0; i < alpha; ++i)
    for (int64_t j = 0; j < alpha; ++j) dg[i].push_back(At2(d, i, j));  // [B, TY, TX, Ci]
  const int64_t a2 = alpha * alpha;
  const Tensor vt = StackGrid(Transform2d(v.bt, static_cast<int>(alpha), dg), 3)
                        .Contiguous()
                        .Reshape({b, ty, tx, a2, ci});

  // The weights' transform reads them copied [r, r, Ci, Co], Co in vectors (in place each lane read another row).
  const Tensor wt =
      w.Permute({2, 3, 1, 0}).Contiguous().Permute({2, 3, 0, 1});  // [Ci, Co, r, r] view
  std::vector<std::vector<Tensor>> wg(r);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < r; ++j) wg[i].push_back(At2(wt, i, j));  // [Ci, Co]
  const Tensor u = StackGrid(Transform2d(v.g, static_cast<int>(alpha), wg), 0)
                       .Contiguous()
                       .Reshape({a2, ci, co});

  const Tensor prod = vt.Reshape({b, ty, tx, a2, ci, 1})
                          .Mul(u.Reshape({1, 1, 1, a2, ci, co}))
                          .Sum(Axes({4}), false, acc_dtype)
                          .Contiguous();  // [B, TY, TX, a2, Co]
  const Tensor mg =
      prod.Reshape({b, ty, tx, alpha, alpha, co}).Permute({0, 1, 2, 5, 3, 4});  // [B,TY,TX,Co,a,a]
  std::vector<std::vector<Tensor>> pg(alpha);
  for (int64_t i = 0; i < alpha; ++i)
    for (int64_t j = 0; j < alpha; ++j) pg[i].push_back(At2(mg, i, j));  // [B, TY, TX, Co]
  std::vector<std::vector<Tensor>> yg =
      Transform2d(v.at, static_cast<int>(m), pg);  // m x m of [B, TY, TX, Co]
  // Channels-last output: [B, TY, m, TX, m, Co] is [B, OH', OW', Co].
  std::vector<Tensor> rows;
  for (const std::vector<Tensor>& row : yg)
    rows.push_back(SelectStack(row, 3));  // [B, TY, TX, m, Co]
  // Stored with the tile's m x m axes apart (upcast whole, see StackGrid), then viewed as rows and columns.
  Tensor y = SelectStack(rows, 2)  // [B, TY, m, TX, m, Co]
                 .Contiguous()
                 .Reshape({b, ty * m, tx * m, co})
                 .Shrink({{0, b}, {0, oh}, {0, ow}, {0, co}})
                 .Permute({0, 3, 1, 2});
  if (!y.ok()) return y;
  return y;
}

}  // namespace kiln::tensor_internal
