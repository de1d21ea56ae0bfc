// DType: kiln's data types, with tinygrad's names, sizes and promotion lattice.
//
// A DType is a small value: a scalar type, a vector width (`count`, 1 for scalars; vectors appear
// only in kernel-level IR after UPCAST), and a pointer flag with an address space (pointers appear
// only in kernel-level IR: PARAM, INDEX, DEFINE_REG/DEFINE_LOCAL). `index` is the dtype of symbolic
// index arithmetic (RANGE, Variables); codegen lowers it to int32 or int64.
//
// Promotion follows tinygrad's `least_upper_dtype`: the least upper bound in the lattice
//   bool -> {int8, uint8};  int8 -> int16 -> int32 -> int64 -> {float16, bfloat16}
//   uint8 -> {int16, uint16};  uint16 -> {int32, uint32};  uint32 -> {int64, uint64};
//   uint64 -> {float16, bfloat16};  {float16, bfloat16} -> float32 -> float64
// so int32+float16 = float16, int64+uint64 = float16, float16+bfloat16 = float32.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/types/span.h"

namespace kiln {

enum class ScalarType : uint8_t {
  kVoid,
  kBool,
  kInt8,
  kUInt8,
  kInt16,
  kUInt16,
  kInt32,
  kUInt32,
  kInt64,
  kUInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kIndex,  // symbolic index arithmetic; lowered to int32/int64 by codegen
};
inline constexpr int kNumScalarTypes = static_cast<int>(ScalarType::kIndex) + 1;

enum class AddrSpace : uint8_t { kNone, kGlobal, kLocal, kReg };

struct DType {
  ScalarType scalar = ScalarType::kVoid;
  uint16_t count = 1;         // vector width; 1 = scalar
  bool is_ptr = false;        // pointer to `scalar` elements (kernel-level IR only)
  AddrSpace addrspace = AddrSpace::kNone;  // meaningful when is_ptr

  constexpr DType() = default;
  constexpr DType(ScalarType s) : scalar(s) {}  // NOLINT(google-explicit-constructor)

  constexpr DType Vec(uint16_t n) const {
    DType d = *this;
    d.count = n;
    return d;
  }
  constexpr DType Scalar() const { return DType(scalar); }
  constexpr DType Ptr(AddrSpace a = AddrSpace::kGlobal) const {
    DType d = *this;
    d.is_ptr = true;
    d.addrspace = a;
    return d;
  }
  // The element type a pointer points at (vector width kept).
  constexpr DType Base() const {
    DType d = *this;
    d.is_ptr = false;
    d.addrspace = AddrSpace::kNone;
    return d;
  }

  // Size in bytes of one element of the scalar type (bool = 1, index = 8, void = 0).
  int ItemSize() const;
  // ItemSize() * count; pointers are 8.
  int64_t ByteSize() const;

  bool IsFloat() const;     // float16, bfloat16, float32, float64
  bool IsInt() const;       // signed or unsigned integers and index (not bool)
  bool IsUnsigned() const;  // uint8..uint64
  bool IsBool() const { return scalar == ScalarType::kBool && !is_ptr; }

  // tinygrad spelling: "float", "half", "int", "uchar", "float.vec(4)", "float.ptr()".
  std::string Name() const;

  friend constexpr bool operator==(DType a, DType b) {
    return a.scalar == b.scalar && a.count == b.count && a.is_ptr == b.is_ptr &&
           a.addrspace == b.addrspace;
  }
  friend constexpr bool operator!=(DType a, DType b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H h, DType d) {
    return H::combine(std::move(h), d.scalar, d.count, d.is_ptr, d.addrspace);
  }
};

namespace dtypes {
inline constexpr DType kVoid{ScalarType::kVoid};
inline constexpr DType kBool{ScalarType::kBool};
inline constexpr DType kInt8{ScalarType::kInt8};
inline constexpr DType kUInt8{ScalarType::kUInt8};
inline constexpr DType kInt16{ScalarType::kInt16};
inline constexpr DType kUInt16{ScalarType::kUInt16};
inline constexpr DType kInt32{ScalarType::kInt32};
inline constexpr DType kUInt32{ScalarType::kUInt32};
inline constexpr DType kInt64{ScalarType::kInt64};
inline constexpr DType kUInt64{ScalarType::kUInt64};
inline constexpr DType kFloat16{ScalarType::kFloat16};
inline constexpr DType kBFloat16{ScalarType::kBFloat16};
inline constexpr DType kFloat32{ScalarType::kFloat32};
inline constexpr DType kFloat64{ScalarType::kFloat64};
inline constexpr DType kIndex{ScalarType::kIndex};
inline constexpr DType kDefaultFloat = kFloat32;
inline constexpr DType kDefaultInt = kInt32;
}  // namespace dtypes

// Parses a name as printed by DType::Name() (also accepts "float32", "int32", "uint8", ...).
std::optional<DType> ParseDType(std::string_view name);

// The scalar name alone ("float").
std::string_view ScalarName(ScalarType s);

// Least upper bound of scalar dtypes in the promotion lattice (vector widths must agree; the
// result keeps the common width). Empty input -> nullopt. void/index/pointers promote only to
// themselves: LeastUpper(index, index) = index, anything else with them = nullopt.
std::optional<DType> LeastUpperDType(absl::Span<const DType> ds);
// LeastUpperDType(d, default float) if d is not already a float (tinygrad's least_upper_float).
DType LeastUpperFloat(DType d);
// Accumulator dtype for a sum: ints widen to int32/uint32 (kept if wider), bool -> int32,
// floats to at least float32 (tinygrad's sum_acc_dtype with SUM_DTYPE=float32).
DType SumAccDType(DType d);

// Whether a value of `from` can be converted to `to` without loss (every value representable).
bool CanSafeCast(DType from, DType to);

// Value range of a scalar dtype, as doubles for floats and int64 bounds for ints
// (uint64 max is reported as INT64_MAX: index math never exceeds it).
int64_t DTypeMin(DType d);
int64_t DTypeMax(DType d);

}  // namespace kiln
