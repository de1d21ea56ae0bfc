// engine/symbolic: algebraic and index simplification (tinygrad's uop/symbolic.py + divandmod.py).
//
// Three rule sets, each a PatternMatcher built once (function-local static) and shared:
//   SymbolicSimple()  constant folding of every ALU op on CONSTs (const_fold.h semantics: ints
//                     wrap per dtype, C-style CDIV/CMOD, division by zero folds to 0 and never
//                     traps) and local identities (x+0, x*1, x*0, x//1, x%1, x+x*-1, x//x, x%x,
//                     double negation, max(x,x), x&x, where(c,x,x), where(true,a,b), casts of
//                     consts, comparisons of a node with itself).
//   Symbolic()        SymbolicSimple + commutative canonical order (constants to the right, then
//                     a deterministic structural order like tinygrad's tuplize: op, leaf
//                     name/id/value, sources in turn; Key() below depth 4), associative constant collection, term combining, comparison folding
//                     by range analysis, and div/mod folding (rules_divmod.cc).
//   Sym()             Symbolic + lowering-friendly distribution rules ((x+y)*c -> x*c+y*c, ...).
// Integer rules that depend on signs (CDIV/CMOD truncate toward zero) fire only when range
// analysis (range.h) proves the operands' signs allow them; FLOORDIV/FLOORMOD become CDIV/CMOD
// when both operands are non-negative. Integer rules assume no overflow (as tinygrad does).
//
// Rule names are their trailing algebra comments ("x*1 -> x"); TRACK_MATCH_STATS counts them.
#pragma once

#include "engine/rewrite/pattern_matcher.h"
#include "engine/uop/uop.h"

namespace kiln {

const PatternMatcher& SymbolicSimple();
const PatternMatcher& Symbolic();
const PatternMatcher& Sym();

// GraphRewrite(u, Symbolic()) (tinygrad's UOp.simplify). Aborts only on an internal rule loop.
UOpPtr Simplify(const UOpPtr& u);

// The div/mod rules of rules_divmod.cc applied to x / c or x % c (op CDIV or CMOD, c > 1) as they are built:
// the folded expression (quotient and remainder linear in x's terms, a nested div/mod collapsed, a common factor
// divided out), or null when nothing folds. Range analysis (range.h) proves the signs the folds need.
UOpPtr FoldDivMod(Op op, const UOpPtr& x, int64_t c);

// Deterministic canonical order for the sources of a commutative op: whether `a` goes before
// `b`. Non-CONSTs before CONSTs; then structurally: op, leaf name / axis id / value, dtype,
// sources lexicographically; below 4 levels by Key(). A strict total order on distinct nodes.
bool CanonicalBefore(const UOp& a, const UOp& b);

}  // namespace kiln
