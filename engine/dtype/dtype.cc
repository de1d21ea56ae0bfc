#include "engine/dtype/dtype.h"

#include <algorithm>
#include <array>
#include <limits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/dtype/dtype_names.h"

namespace kiln {
namespace {

struct ScalarInfo {
  std::string_view name;  // tinygrad's short name
  std::string_view long_name;
  int itemsize;
  int priority;  // tinygrad's priority: orders the candidates in least_upper_dtype
};

constexpr std::array<ScalarInfo, kNumScalarTypes> kInfo = {{
    {"void", "void", 0, -1},
    {"bool", "bool", 1, 0},
    {"char", "int8", 1, 1},
    {"uchar", "uint8", 1, 2},
    {"short", "int16", 2, 3},
    {"ushort", "uint16", 2, 4},
    {"int", "int32", 4, 5},
    {"uint", "uint32", 4, 6},
    {"long", "int64", 8, 7},
    {"ulong", "uint64", 8, 8},
    {"half", "float16", 2, 11},
    {"bfloat16", "bfloat16", 2, 12},
    {"float", "float32", 4, 13},
    {"double", "float64", 8, 14},
    {"index", "index", 8, -1},
}};

const ScalarInfo& Info(ScalarType s) { return kInfo[static_cast<int>(s)]; }

// Direct parents in the promotion lattice.
std::vector<ScalarType> Parents(ScalarType s) {
  using S = ScalarType;
  switch (s) {
    case S::kBool: return {S::kInt8, S::kUInt8};
    case S::kInt8: return {S::kInt16};
    case S::kInt16: return {S::kInt32};
    case S::kInt32: return {S::kInt64};
    case S::kInt64: return {S::kFloat16, S::kBFloat16};
    case S::kUInt8: return {S::kInt16, S::kUInt16};
    case S::kUInt16: return {S::kInt32, S::kUInt32};
    case S::kUInt32: return {S::kInt64, S::kUInt64};
    case S::kUInt64: return {S::kFloat16, S::kBFloat16};
    case S::kFloat16: return {S::kFloat32};
    case S::kBFloat16: return {S::kFloat32};
    case S::kFloat32: return {S::kFloat64};
    default: return {};
  }
}

// Bitmask of s and all its ancestors.
uint32_t Ancestors(ScalarType s) {
  uint32_t mask = 1u << static_cast<int>(s);
  for (ScalarType p : Parents(s)) mask |= Ancestors(p);
  return mask;
}

bool IsLattice(ScalarType s) {
  return s != ScalarType::kVoid && s != ScalarType::kIndex;
}

}  // namespace

int DType::ItemSize() const { return Info(scalar).itemsize; }

int64_t DType::ByteSize() const {
  if (is_ptr) return 8;
  return static_cast<int64_t>(ItemSize()) * count;
}

bool DType::IsFloat() const {
  return !is_ptr && (scalar == ScalarType::kFloat16 || scalar == ScalarType::kBFloat16 ||
                     scalar == ScalarType::kFloat32 || scalar == ScalarType::kFloat64);
}

bool DType::IsInt() const {
  return !is_ptr && scalar >= ScalarType::kInt8 &&
         (scalar <= ScalarType::kUInt64 || scalar == ScalarType::kIndex);
}

bool DType::IsUnsigned() const {
  return !is_ptr && (scalar == ScalarType::kUInt8 || scalar == ScalarType::kUInt16 ||
                     scalar == ScalarType::kUInt32 || scalar == ScalarType::kUInt64);
}

std::string_view ScalarName(ScalarType s) { return Info(s).name; }
std::string_view ScalarLongName(ScalarType s) { return Info(s).long_name; }

std::string DType::Name() const {
  std::string s(Info(scalar).name);
  if (count != 1) absl::StrAppend(&s, ".vec(", count, ")");
  if (is_ptr) {
    switch (addrspace) {
      case AddrSpace::kLocal: absl::StrAppend(&s, ".ptr(local)"); break;
      case AddrSpace::kReg: absl::StrAppend(&s, ".ptr(reg)"); break;
      default: absl::StrAppend(&s, ".ptr()"); break;
    }
  }
  return s;
}

std::optional<DType> ParseDType(std::string_view name) {
  std::string_view base = name;
  size_t dot = name.find('.');
  if (dot != std::string_view::npos) base = name.substr(0, dot);
  std::optional<ScalarType> st;
  for (int i = 0; i < kNumScalarTypes; ++i) {
    if (kInfo[i].name == base || kInfo[i].long_name == base) st = static_cast<ScalarType>(i);
  }
  if (base == "half") st = ScalarType::kFloat16;
  if (!st) return std::nullopt;
  DType d(*st);
  std::string_view rest = dot == std::string_view::npos ? "" : name.substr(dot);
  if (rest.rfind(".vec(", 0) == 0) {
    size_t close = rest.find(')');
    if (close == std::string_view::npos) return std::nullopt;
    int n = 0;
    if (!absl::SimpleAtoi(absl::string_view(rest.data() + 5, close - 5), &n) || n < 1 || n > 1024) return std::nullopt;
    d.count = static_cast<uint16_t>(n);
    rest = rest.substr(close + 1);
  }
  if (rest == ".ptr()") return d.Ptr(AddrSpace::kGlobal);
  if (rest == ".ptr(local)") return d.Ptr(AddrSpace::kLocal);
  if (rest == ".ptr(reg)") return d.Ptr(AddrSpace::kReg);
  if (!rest.empty()) return std::nullopt;
  return d;
}

std::optional<DType> LeastUpperDType(absl::Span<const DType> ds) {
  if (ds.empty()) return std::nullopt;
  for (DType d : ds) {
    if (d.count != ds[0].count || d.is_ptr) return std::nullopt;
  }
  bool all_same = std::all_of(ds.begin(), ds.end(), [&](DType d) { return d == ds[0]; });
  if (all_same) return ds[0];
  uint32_t common = ~0u;
  for (DType d : ds) {
    if (!IsLattice(d.scalar)) return std::nullopt;
    common &= Ancestors(d.scalar);
  }
  std::optional<ScalarType> best;
  for (int i = 0; i < kNumScalarTypes; ++i) {
    if ((common >> i & 1) == 0) continue;
    if (!best || kInfo[i].priority < Info(*best).priority) best = static_cast<ScalarType>(i);
  }
  if (!best) return std::nullopt;
  return DType(*best).Vec(ds[0].count);
}

DType LeastUpperFloat(DType d) {
  if (d.IsFloat()) return d;
  DType pair[2] = {d.Scalar(), dtypes::kDefaultFloat};
  std::optional<DType> r = LeastUpperDType(pair);
  return r ? r->Vec(d.count) : dtypes::kDefaultFloat.Vec(d.count);
}

DType SumAccDType(DType d) {
  if (d.IsUnsigned()) {
    DType pair[2] = {d.Scalar(), dtypes::kUInt32};
    return LeastUpperDType(pair)->Vec(d.count);
  }
  if (d.IsInt() || d.IsBool()) {
    if (d.scalar == ScalarType::kIndex) return d;
    DType pair[2] = {d.Scalar(), dtypes::kInt32};
    return LeastUpperDType(pair)->Vec(d.count);
  }
  if (d.IsFloat()) {
    DType pair[2] = {d.Scalar(), dtypes::kFloat32};
    return LeastUpperDType(pair)->Vec(d.count);
  }
  return d;
}

bool CanSafeCast(DType from, DType to) {
  if (from == to) return true;
  if (from.is_ptr || to.is_ptr || from.count != to.count) return false;
  if (to.scalar == ScalarType::kIndex) return from.IsInt() || from.IsBool();
  if (from.scalar == ScalarType::kIndex) return to.scalar == ScalarType::kInt64;
  if (from.IsBool()) return true;
  if (to.IsBool()) return false;
  if (to.IsFloat()) {
    if (from.IsFloat()) {
      if (to.scalar == ScalarType::kFloat64) return true;
      if (to.scalar == ScalarType::kFloat32) return from.scalar != ScalarType::kFloat64;
      return false;  // half <-> bfloat16 both lose
    }
    // integers: exact when the mantissa holds every value
    int mant = to.scalar == ScalarType::kFloat64   ? 53
               : to.scalar == ScalarType::kFloat32 ? 24
               : to.scalar == ScalarType::kFloat16 ? 11
                                                   : 8;
    int bits = from.ItemSize() * 8 - (from.IsUnsigned() ? 0 : 1);
    return bits <= mant;
  }
  if (from.IsFloat()) return false;
  // int -> int
  if (from.IsUnsigned() == to.IsUnsigned()) return to.ItemSize() >= from.ItemSize();
  if (from.IsUnsigned()) return to.ItemSize() > from.ItemSize();  // unsigned -> wider signed
  return false;                                                     // signed -> unsigned loses
}

int64_t DTypeMin(DType d) {
  switch (d.scalar) {
    case ScalarType::kBool: return 0;
    case ScalarType::kInt8: return std::numeric_limits<int8_t>::min();
    case ScalarType::kInt16: return std::numeric_limits<int16_t>::min();
    case ScalarType::kInt32: return std::numeric_limits<int32_t>::min();
    case ScalarType::kUInt8:
    case ScalarType::kUInt16:
    case ScalarType::kUInt32:
    case ScalarType::kUInt64: return 0;
    default: return std::numeric_limits<int64_t>::min();
  }
}

int64_t DTypeMax(DType d) {
  switch (d.scalar) {
    case ScalarType::kBool: return 1;
    case ScalarType::kInt8: return std::numeric_limits<int8_t>::max();
    case ScalarType::kInt16: return std::numeric_limits<int16_t>::max();
    case ScalarType::kInt32: return std::numeric_limits<int32_t>::max();
    case ScalarType::kUInt8: return std::numeric_limits<uint8_t>::max();
    case ScalarType::kUInt16: return std::numeric_limits<uint16_t>::max();
    case ScalarType::kUInt32: return std::numeric_limits<uint32_t>::max();
    default: return std::numeric_limits<int64_t>::max();
  }
}

}  // namespace kiln
