// Graph helpers shared by the codegen passes: iterative bottom-up rebuilds, substitution, the set of RANGEs a node
// lives in, integer bounds, and a small index-math folder (used until engine/symbolic's Simplify is wired in).
// All functions are iterative (no recursion on graph depth) and never abort on well-typed input.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/uop/uop.h"

namespace kiln::codegen {

// Visits every node reachable from root once, children first. Each node is rebuilt with its (already rewritten)
// sources, then `fn(original, rebuilt)` may return a replacement (null = keep `rebuilt`). Replacements are not
// visited again. Returns the rewritten root.
using RebuildFn = std::function<UOpPtr(const UOp* orig, const UOpPtr& rebuilt)>;
UOpPtr RewriteBottomUp(const UOpPtr& root, const RebuildFn& fn);

// Replaces every occurrence of the map's keys (by node) with their values.
UOpPtr Substitute(const UOpPtr& root, const absl::flat_hash_map<const UOp*, UOpPtr>& map);

// The RANGE nodes a node must run inside: RANGE r -> {r} + ranges of its end; END(vals..., ranges...) and
// REDUCE(val, ranges...) remove the ranges they close; others: the union of their sources. Sorted by pointer.
class RangeSets {
 public:
  explicit RangeSets(const UOpPtr& root);
  const std::vector<const UOp*>& Of(const UOp* u) const;

 private:
  UOpPtr root_;  // holds every node keyed in sets_ for as long as this object lives
  absl::flat_hash_map<const UOp*, std::vector<const UOp*>> sets_;
  std::vector<const UOp*> empty_;
};

// Folds constant index/bool arithmetic and identities (x+0, x*1, x*0, x/1, x%1, (x+c1)+c2, WHERE(c,a,a)).
UOpPtr FoldIndexMath(const UOpPtr& root);
// FoldIndexMath's step at one node (up to 8 local folds); null when nothing folds.
UOpPtr FoldIndexMathAt(const UOpPtr& u);

// The CONST value of an int/index CONST, else false.
bool ConstInt(const UOpPtr& u, int64_t* v);

// An index as base + c: (null, c) for a constant, (x, c) for ADD(x, c) or ADD(c, x), else (idx, 0).
std::pair<UOpPtr, int64_t> SplitOffset(const UOpPtr& idx);

}  // namespace kiln::codegen
