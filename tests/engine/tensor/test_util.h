// Helpers for the Tensor tests: graph-level checks (no realization) and deterministic input data.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/tensor/tensor.h"
#include "engine/uop/uop.h"

namespace kiln::testing {

// The shape as a std::vector, for EXPECT_EQ against a braced list.
inline std::vector<int64_t> Sh(const Tensor& t) { return {t.shape().begin(), t.shape().end()}; }
using V = std::vector<int64_t>;

inline int CountOp(const Tensor& t, Op op) {
  if (!t.ok()) return 0;
  int n = 0;
  for (const UOp* u : Toposort(t.uop())) n += u->op() == op;
  return n;
}
inline bool HasOp(const Tensor& t, Op op) { return CountOp(t, op) > 0; }

// n floats sin(0.37 i + phase) * scale: deterministic, sign-mixed inputs without a random generator.
inline std::vector<float> SineData(int64_t n, float scale, float phase) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + phase) * scale;
  return v;
}

// A square NCHW conv as float64 loops: x [b, ci, hw, hw], w [co, ci, k, k] and an output gradient dy [b, co, oh, oh]
// (oh = (hw + 2 pad - k) / stride + 1) give the output y, the input gradient dx and the weight gradient dw.
struct ConvLoops {
  std::vector<double> y, dx, dw;
};
inline ConvLoops ConvByLoops(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& dy,
                             int64_t b, int64_t ci, int64_t co, int64_t hw, int64_t k, int64_t pad,
                             int64_t stride = 1) {
  const int64_t oh = (hw + 2 * pad - k) / stride + 1;
  ConvLoops r{std::vector<double>(dy.size(), 0.0), std::vector<double>(x.size(), 0.0),
              std::vector<double>(w.size(), 0.0)};
  for (int64_t n = 0; n < b; ++n)
    for (int64_t o = 0; o < co; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < oh; ++xx)
          for (int64_t c = 0; c < ci; ++c)
            for (int64_t ky = 0; ky < k; ++ky)
              for (int64_t kx = 0; kx < k; ++kx) {
                const int64_t iy = y * stride + ky - pad, ix = xx * stride + kx - pad;
                if (iy < 0 || ix < 0 || iy >= hw || ix >= hw) continue;
                const int64_t xi = ((n * ci + c) * hw + iy) * hw + ix;
                const int64_t wi = ((o * ci + c) * k + ky) * k + kx;
                const int64_t yi = ((n * co + o) * oh + y) * oh + xx;
                r.y[yi] += static_cast<double>(x[xi]) * w[wi];
                r.dx[xi] += static_cast<double>(dy[yi]) * w[wi];
                r.dw[wi] += static_cast<double>(dy[yi]) * x[xi];
              }
  return r;
}

// docs/kernel-ir.md §1: every elementwise node's sources have the node's shape.
inline bool ElementwiseSourcesMatch(const Tensor& t) {
  for (const UOp* u : Toposort(t.uop())) {
    if (!IsElementwise(u->op()) || u->op() == Op::BITCAST) continue;
    for (const UOpPtr& s : u->src()) {
      if (!s->has_shape() || s->shape() != u->shape()) return false;
    }
  }
  return true;
}

}  // namespace kiln::testing
