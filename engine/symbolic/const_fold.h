// Value semantics of ALU ops on constants: the one definition shared by constant folding
// (SymbolicSimple) and Evaluate (launch dims, the soundness oracle), tinygrad's exec_alu.
//
// Integers: values are int64 holding the dtype's value (uint64 bit-for-bit, other unsigned types
// non-negative). Arithmetic wraps to the dtype's width (two's complement), index wraps at 64 bits.
// CDIV/CMOD truncate toward zero (C), FLOORDIV/FLOORMOD round down (Python). Division or modulo by
// zero gives 0 and INT64_MIN / -1 gives INT64_MIN: folding never traps. Shifts by a count outside
// [0, bit width) are not folded (nullopt).
// Floats: computed in double and rounded to the dtype (float16 / bfloat16 / float32 / float64).
// Bools: 0/1; ADD is OR, MUL is AND (tinygrad's bool semantics).
#pragma once

#include <cstdint>
#include <optional>

#include "absl/types/span.h"
#include "engine/dtype/dtype.h"
#include "engine/uop/ops.h"
#include "engine/uop/uop.h"

namespace kiln {

// v wrapped to dtype d's width (sign- or zero-extended back to int64); bool -> 0/1.
int64_t WrapInt(DType d, int64_t v);
// v rounded to the float dtype d (double for float64; unchanged for non-float dtypes).
double RoundFloat(DType d, double v);

// Integer/bool ALU on values of dtype `d`: the operands' dtype (for comparisons the sources',
// for WHERE the branches'; the condition is 0/1). Comparisons return 0/1. nullopt for ops that
// are not integer ALU ops (FDIV, transcendental ops, THREEFRY) and for undefined shifts.
std::optional<int64_t> ExecIntAlu(Op op, DType d, absl::Span<const int64_t> v);
// Float ALU on values of float dtype `d` (comparisons return 0/1). nullopt for integer-only ops.
std::optional<double> ExecFloatAlu(Op op, DType d, absl::Span<const double> v);

// The integer value of an int/bool CONST (int64 bits for uint64).
inline int64_t ConstInt(const UOp& c) {
  if (const auto* i = std::get_if<int64_t>(&c.arg())) return *i;
  if (const auto* b = std::get_if<bool>(&c.arg())) return *b ? 1 : 0;
  return static_cast<int64_t>(c.ConstValue());
}
// A CONST of dtype d holding v (wrapped to d; floats converted).
UOpPtr MakeConst(DType d, int64_t v);

// Folds an ALU or CAST node whose sources are all CONST into a CONST of the node's dtype; null
// if the node is not foldable (non-const source, undefined shift, THREEFRY, ...).
UOpPtr FoldConstAlu(const UOp& u);

}  // namespace kiln
