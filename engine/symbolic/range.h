// Range analysis: a sound integer interval [vmin, vmax] for every node (tinygrad's _min_max).
//
// Contract: for every assignment of the Variables (DEFINE_VAR / BIND ranges), RANGE and SPECIAL
// indices (0 .. end-1) in their ranges, the node's value lies in [VMin, VMax], provided no integer
// overflow happens in the node's sources. Bool nodes are 0/1. When nothing better is known the
// dtype's range is returned (DTypeMin/DTypeMax; floats get [INT64_MIN, INT64_MAX]), as is any
// interval that would leave the dtype's range (the value may wrap). Division/modulo by zero is
// taken to give 0 (const_fold.h), so intervals of CDIV/CMOD by a divisor that may be 0 include 0.
//
// Rules: CONST, DEFINE_VAR (its VarArg), BIND (the variable's range), RANGE/SPECIAL (0 .. vmax(end)-1),
// ADD, SUB, MUL (sign cases), NEG, CDIV/CMOD (C truncation), FLOORDIV/FLOORMOD, MAX, SHL/SHR by a
// constant, CMPLT/CMPNE/CMPEQ, AND/OR/XOR (bools; non-negative ints), WHERE, CAST, AFTER.
//
// Results are cached in UOp::range_cache(): the first thread to finish a node publishes it
// (state 0 -> 1 -> 2 by compare-and-swap, then a release store); readers acquire. Thread-safe.
// Computing a node whose sources are not cached is iterative (explicit stack), so million-node
// chains are fine. Nodes whose range does not depend on their sources (floats, LOAD, SINK, ...)
// never visit their sources.
#pragma once

#include <cstdint>

#include "engine/uop/uop.h"

namespace kiln {

struct VRange {
  int64_t lo = 0;
  int64_t hi = 0;
  bool IsConst() const { return lo == hi; }
};

VRange VMinMax(const UOp& u);
inline VRange VMinMax(const UOpPtr& u) { return VMinMax(*u); }
inline int64_t VMin(const UOpPtr& u) { return VMinMax(*u).lo; }
inline int64_t VMax(const UOpPtr& u) { return VMinMax(*u).hi; }

}  // namespace kiln
