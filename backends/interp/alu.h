// Exact scalar semantics of every ALU op, per dtype: the definition the INTERP oracle uses.
//
// Values travel as a Lane: integers and bools in `i` (signed types sign-extended, unsigned zero-extended to 64
// bits, bool 0/1), floats in `f` as a double holding a value exactly representable in the lane's dtype.
//  - Integers wrap around (two's complement) at their width. CDIV/CMOD truncate (C); FLOORDIV/FLOORMOD round
//    down (Python). Division or modulo by 0 yields 0; x / -1 is 0 - x (wrapping, so INT_MIN / -1 = INT_MIN) and
//    x % -1 is 0: nothing traps. Shift amounts are taken modulo the bit width; SHR is arithmetic on signed types.
//  - float32 ops are computed in float, float64 in double; float16/bfloat16 ops are computed in float32 and rounded
//    to the dtype (round to nearest even). MULACC is a*b rounded, then + c rounded (no fused multiply-add).
//  - MAX(a, b) = b > a ? b : a (so MAX(NaN, x) = NaN, MAX(x, NaN) = x, as tinygrad's Python backend).
//  - CAST float -> int: NaN -> 0, otherwise truncate toward zero and saturate at the dtype's bounds;
//    int -> float and float -> narrower float round to nearest even (float16/bfloat16 via float32);
//    anything -> bool is "!= 0".
//  - Bool: ADD/OR/MAX = or, MUL/AND = and, XOR, comparisons with false < true.
#pragma once

#include <cstdint>

#include "engine/dtype/dtype.h"
#include "engine/uop/ops.h"

namespace kiln::backends::interp {

union Lane {
  int64_t i;
  double f;
};

// Rounds a float32 value to float16 / bfloat16 (bits) and back.
uint16_t FloatToHalfBits(float f);
float HalfBitsToFloat(uint16_t h);
uint16_t FloatToBF16Bits(float f);
float BF16BitsToFloat(uint16_t b);

// Canonicalises an int64 bit pattern to the scalar int dtype `d` (wraps, sign/zero extends).
int64_t WrapInt(ScalarType d, int64_t v);
// Rounds a double to float dtype `d` (exact result stored as double).
double RoundFloat(ScalarType d, double v);

// Unary/binary/ternary ALU op on operands of scalar dtype `src` (comparisons return bool lanes).
Lane EvalAlu(Op op, ScalarType src, const Lane* args);
Lane EvalCast(ScalarType from, ScalarType to, Lane v);

// Raw little-endian bits of a lane in dtype `d` (ItemSize bytes) and back.
void LaneToBytes(ScalarType d, Lane v, uint8_t* out);
Lane LaneFromBytes(ScalarType d, const uint8_t* in);

}  // namespace kiln::backends::interp
