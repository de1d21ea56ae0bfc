// Index arithmetic for the scheduler: index-dtype expressions over RANGEs, folded as they are built, and the
// mapping of an index vector back through one movement op ("rangeify", tinygrad schedule/indexing.py).
//
// An IndexVec holds one index expression per dim of a shaped node. A `valid` expression (bool, nullptr = always
// true) travels with it: PAD adds bounds conditions, and loads under it are gated (docs/kernel-ir.md §2).
//
// The builders fold constants and the identities that keep kernel ASTs small (x+0, x*1, x*0, x/1, x%1); x/c and x%c
// go through engine/symbolic's div/mod rules (FoldDivMod) and bounds come from its range analysis (range.h), so the
// scheduler has no arithmetic of its own to get wrong. Full simplification is engine/symbolic's job, in codegen.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/uop/uop.h"

namespace kiln::schedule {

using IndexVec = std::vector<UOpPtr>;

UOpPtr IConst(int64_t v);
UOpPtr IAdd(const UOpPtr& a, const UOpPtr& b);
UOpPtr IAdd(const UOpPtr& a, int64_t b);
UOpPtr IMul(const UOpPtr& a, int64_t c);
UOpPtr IDiv(const UOpPtr& a, int64_t c);  // c > 0; a >= 0 in every use
UOpPtr IMod(const UOpPtr& a, int64_t c);  // c > 0; a >= 0 in every use
// Boolean conjunction; nullptr stands for `true`.
UOpPtr BAnd(const UOpPtr& a, const UOpPtr& b);
// a < c and c <= a, folded to nullptr (true) when bounds prove them.
UOpPtr ILt(const UOpPtr& a, int64_t c);
UOpPtr IGe(const UOpPtr& a, int64_t c);

// Inclusive bounds of an index expression: engine/symbolic's VMinMax (cached on the node).
std::pair<int64_t, int64_t> Bounds(const UOpPtr& u);

// Row-major flat index of `idx` within `shape` (dims of size 1 contribute nothing).
UOpPtr Flatten(const IndexVec& idx, const Shape& shape);

// The index of `mv`'s source given the index of `mv` itself; `*valid` is and-ed with PAD's bounds conditions.
absl::StatusOr<IndexVec> MapMovement(const UOp& mv, const IndexVec& idx, UOpPtr* valid);

// The index of a source of an ALU node with a different (numpy-broadcast) shape: right-aligned, size-1 dims -> 0.
IndexVec BroadcastIndex(const IndexVec& idx, const Shape& from, const Shape& to);

}  // namespace kiln::schedule
