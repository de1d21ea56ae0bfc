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
