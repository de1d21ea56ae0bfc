// Arg: the typed payload of a UOp. A closed variant so that every arg can be hashed, compared,
// printed and parsed; user strings may appear (device names, Variable names) but renderers never
// emit them into generated code.
//
// Which alternative each op uses:
//   CONST       bool | int64 (every integer dtype; uint64 stored bit-for-bit) | double (floats)
//   BUFFER      int64 element count          DEFINE_LOCAL/DEFINE_REG  int64 element count
//   UNIQUE      int64                        PARAM                    int64 slot
//   DEVICE      string                       SPECIAL                  string ("gidx0", "core_id")
//   DEFINE_VAR  VarArg                       RANGE                    AxisArg
//   RESHAPE/EXPAND  IntVec shape             PERMUTE                  IntVec permutation
//   PAD         IntVec (before, after)*      SHRINK                   IntVec (start, end)*
//   FLIP        IntVec 0/1 per dim           GEP                      IntVec lanes
//   REDUCE_AXIS ReduceArg                    REDUCE                   Op (ADD, MUL or MAX)
//   others      monostate unless a pass documents otherwise (KERNEL/CUSTOM: string)
// Doubles compare bit-for-bit (so -0.0 != 0.0) after NaN canonicalisation (all NaNs are one).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/hash/hash.h"
#include "engine/uop/ops.h"

namespace kiln {

using IntVec = std::vector<int64_t>;

// Axis kinds of a RANGE, with tinygrad's letters for kernel names (g l L G R u r t).
enum class AxisType : uint8_t { kGlobal, kLocal, kLoop, kGroupReduce, kReduce, kUpcast, kUnroll, kThread };
char AxisLetter(AxisType t);
std::string_view AxisTypeName(AxisType t);

struct AxisArg {
  int64_t id = 0;
  AxisType type = AxisType::kLoop;
  friend bool operator==(const AxisArg& a, const AxisArg& b) { return a.id == b.id && a.type == b.type; }
  template <typename H>
  friend H AbslHashValue(H h, const AxisArg& a) { return H::combine(std::move(h), a.id, a.type); }
};

struct VarArg {
  std::string name;
  int64_t min = 0;
  int64_t max = 0;
  friend bool operator==(const VarArg& a, const VarArg& b) {
    return a.name == b.name && a.min == b.min && a.max == b.max;
  }
  template <typename H>
  friend H AbslHashValue(H h, const VarArg& a) { return H::combine(std::move(h), a.name, a.min, a.max); }
};

struct ReduceArg {
  Op op = Op::ADD;
  IntVec axes;  // sorted, unique, in range of the source's rank
  friend bool operator==(const ReduceArg& a, const ReduceArg& b) { return a.op == b.op && a.axes == b.axes; }
  template <typename H>
  friend H AbslHashValue(H h, const ReduceArg& a) { return H::combine(std::move(h), a.op, a.axes); }
};

// Double wrapper with bitwise equality and canonical NaN.
struct ConstFloat {
  double value = 0.0;
  ConstFloat() = default;
  explicit ConstFloat(double v);
  uint64_t Bits() const;
  friend bool operator==(const ConstFloat& a, const ConstFloat& b) { return a.Bits() == b.Bits(); }
  template <typename H>
  friend H AbslHashValue(H h, const ConstFloat& a) { return H::combine(std::move(h), a.Bits()); }
};

using Arg = std::variant<std::monostate, bool, int64_t, ConstFloat, std::string, IntVec, Op, AxisArg,
                         VarArg, ReduceArg>;

// Hash of an Arg (the variant's alternatives hashed by value; doubles by bits).
size_t HashArg(const Arg& a);

inline const IntVec* ArgIntVec(const Arg& a) { return std::get_if<IntVec>(&a); }

}  // namespace kiln
