#include "engine/onnx/host_array.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::onnx {
namespace {

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// double -> integer type T as a C conversion of the truncated value would (NaN -> 0, out of range saturates
// instead of being undefined behaviour).
template <typename T>
T DoubleToInt(double v) {
  if (std::isnan(v)) return 0;
  v = std::trunc(v);
  if (v <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

}  // namespace

uint16_t DoubleToHalf(double d) {
  const float f = static_cast<float>(d);
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant != 0 ? 0x200u : 0u));  // inf / nan
  // Round the float (not the double) to half: the double -> float step is exact for values representable in half
  // and for the halfway cases that matter here (onnx data is float32 at most for half conversions).
  int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {                                                  // subnormal half or zero
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent (-> inf): correct
  return static_cast<uint16_t>(sign | h);
}

double HalfToDouble(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) ? 1 : 0;
  const int32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), -24);
  } else if (exp == 0x1f) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(static_cast<double>(mant | 0x400u), exp - 25);
  }
  return sign ? -v : v;
}

uint16_t DoubleToBFloat16(double d) {
  const float f = static_cast<float>(d);
  uint32_t x = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

double BFloat16ToDouble(uint16_t b) {
  return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(b) << 16));
}

int64_t HostArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

double HostArray::GetDouble(int64_t i) const {
  const uint8_t* p = bytes.data() + i * dtype.ItemSize();
  switch (dtype.scalar) {
    case ScalarType::kBool: return p[0] != 0 ? 1.0 : 0.0;
    case ScalarType::kInt8: return Load<int8_t>(p);
    case ScalarType::kUInt8: return Load<uint8_t>(p);
    case ScalarType::kInt16: return Load<int16_t>(p);
    case ScalarType::kUInt16: return Load<uint16_t>(p);
    case ScalarType::kInt32: return Load<int32_t>(p);
    case ScalarType::kUInt32: return Load<uint32_t>(p);
    case ScalarType::kInt64: return static_cast<double>(Load<int64_t>(p));
    case ScalarType::kUInt64: return static_cast<double>(Load<uint64_t>(p));
    case ScalarType::kFloat16: return HalfToDouble(Load<uint16_t>(p));
    case ScalarType::kBFloat16: return BFloat16ToDouble(Load<uint16_t>(p));
    case ScalarType::kFloat32: return Load<float>(p);
    case ScalarType::kFloat64: return Load<double>(p);
    default: return 0.0;
  }
}

int64_t HostArray::GetInt(int64_t i) const {
  const uint8_t* p = bytes.data() + i * dtype.ItemSize();
  switch (dtype.scalar) {
    case ScalarType::kBool: return p[0] != 0 ? 1 : 0;
    case ScalarType::kInt8: return Load<int8_t>(p);
    case ScalarType::kUInt8: return Load<uint8_t>(p);
    case ScalarType::kInt16: return Load<int16_t>(p);
    case ScalarType::kUInt16: return Load<uint16_t>(p);
    case ScalarType::kInt32: return Load<int32_t>(p);
    case ScalarType::kUInt32: return Load<uint32_t>(p);
    case ScalarType::kInt64: return Load<int64_t>(p);
    case ScalarType::kUInt64: return static_cast<int64_t>(Load<uint64_t>(p));
    default: return DoubleToInt<int64_t>(GetDouble(i));
  }
}

void HostArray::SetDouble(int64_t i, double v) {
  uint8_t* p = bytes.data() + i * dtype.ItemSize();
  switch (dtype.scalar) {
    case ScalarType::kBool: p[0] = (v != 0.0) ? 1 : 0; return;
    case ScalarType::kInt8: Store(p, DoubleToInt<int8_t>(v)); return;
    case ScalarType::kUInt8: Store(p, DoubleToInt<uint8_t>(v)); return;
    case ScalarType::kInt16: Store(p, DoubleToInt<int16_t>(v)); return;
    case ScalarType::kUInt16: Store(p, DoubleToInt<uint16_t>(v)); return;
    case ScalarType::kInt32: Store(p, DoubleToInt<int32_t>(v)); return;
    case ScalarType::kUInt32: Store(p, DoubleToInt<uint32_t>(v)); return;
    case ScalarType::kInt64: Store(p, DoubleToInt<int64_t>(v)); return;
    case ScalarType::kUInt64: Store(p, DoubleToInt<uint64_t>(v)); return;
    case ScalarType::kFloat16: Store(p, DoubleToHalf(v)); return;
    case ScalarType::kBFloat16: Store(p, DoubleToBFloat16(v)); return;
    case ScalarType::kFloat32: Store(p, static_cast<float>(v)); return;
    case ScalarType::kFloat64: Store(p, v); return;
    default: return;
  }
}

void HostArray::SetInt(int64_t i, int64_t v) {
  uint8_t* p = bytes.data() + i * dtype.ItemSize();
  switch (dtype.scalar) {
    case ScalarType::kBool: p[0] = v != 0 ? 1 : 0; return;
    case ScalarType::kInt8: Store(p, static_cast<int8_t>(v)); return;
    case ScalarType::kUInt8: Store(p, static_cast<uint8_t>(v)); return;
    case ScalarType::kInt16: Store(p, static_cast<int16_t>(v)); return;
    case ScalarType::kUInt16: Store(p, static_cast<uint16_t>(v)); return;
    case ScalarType::kInt32: Store(p, static_cast<int32_t>(v)); return;
    case ScalarType::kUInt32: Store(p, static_cast<uint32_t>(v)); return;
    case ScalarType::kInt64: Store(p, v); return;
    case ScalarType::kUInt64: Store(p, static_cast<uint64_t>(v)); return;
    default: SetDouble(i, static_cast<double>(v)); return;
  }
}

std::vector<int64_t> HostArray::Ints() const {
  std::vector<int64_t> v(static_cast<size_t>(numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = GetInt(static_cast<int64_t>(i));
  return v;
}

std::vector<double> HostArray::Doubles() const {
  std::vector<double> v(static_cast<size_t>(numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = GetDouble(static_cast<int64_t>(i));
  return v;
}

HostArray HostArray::Zeros(DType dtype, Shape shape) {
  HostArray a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.bytes.assign(static_cast<size_t>(a.numel() * dtype.ItemSize()), 0);
  return a;
}

HostArray HostArray::FromInts(DType dtype, Shape shape, const std::vector<int64_t>& values) {
  HostArray a = Zeros(dtype, std::move(shape));
  for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < a.numel(); ++i) {
    a.SetInt(static_cast<int64_t>(i), values[i]);
  }
  return a;
}

HostArray HostArray::FromDoubles(DType dtype, Shape shape, const std::vector<double>& values) {
  HostArray a = Zeros(dtype, std::move(shape));
  for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < a.numel(); ++i) {
    a.SetDouble(static_cast<int64_t>(i), values[i]);
  }
  return a;
}

std::string ShapeString(const Shape& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

absl::StatusOr<int64_t> CheckedNumel(const Shape& shape, int64_t limit) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("negative dimension in shape ", ShapeString(shape)));
    if (d != 0 && n > limit / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), " has more than ", limit, " elements"));
    }
    n *= d;
  }
  if (n > limit) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(shape), " has more than ", limit, " elements"));
  }
  return n;
}

}  // namespace kiln::onnx
