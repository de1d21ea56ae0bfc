#include "backends/interp/alu.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace kiln::backends::interp {
namespace {

bool IsF(ScalarType s) {
  return s == ScalarType::kFloat16 || s == ScalarType::kBFloat16 || s == ScalarType::kFloat32 ||
         s == ScalarType::kFloat64;
}
bool IsU(ScalarType s) {
  return s == ScalarType::kUInt8 || s == ScalarType::kUInt16 || s == ScalarType::kUInt32 || s == ScalarType::kUInt64;
}
int Bits(ScalarType s) {
  switch (s) {
    case ScalarType::kBool: return 1;
    case ScalarType::kInt8:
    case ScalarType::kUInt8: return 8;
    case ScalarType::kInt16:
    case ScalarType::kUInt16: return 16;
    case ScalarType::kInt32:
    case ScalarType::kUInt32: return 32;
    default: return 64;
  }
}

Lane I(int64_t v) {
  Lane l;
  l.i = v;
  return l;
}
Lane F(double v) {
  Lane l;
  l.f = v;
  return l;
}
Lane B(bool v) { return I(v ? 1 : 0); }

uint32_t F2U(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float U2F(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint64_t Threefry2x32(uint64_t x, uint64_t key) {
  auto rotl = [](uint32_t v, int r) { return (v << r) | (v >> (32 - r)); };
  const uint32_t x0 = static_cast<uint32_t>(x), x1 = static_cast<uint32_t>(x >> 32);
  const uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  const uint32_t ks[3] = {k1, k0 ^ k1 ^ 0x1BD11BDAu, k0};
  static constexpr int kRot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  uint32_t xr0 = x0 + ks[2], xr1 = x1 + ks[0];
  for (int i = 0; i < 5; ++i) {
    for (int r : kRot[i % 2]) {
      xr0 = xr0 + xr1;
      xr1 = xr0 ^ rotl(xr1, r);
    }
    xr0 = xr0 + ks[i % 3];
    xr1 = xr1 + ks[(i + 1) % 3] + static_cast<uint32_t>(i + 1);
  }
  return (static_cast<uint64_t>(xr1) << 32) | xr0;
}

// IEEE 754-2019 maximum, as LLVM's llvm.maximum (the CPU backend): nan if either is nan; +0 > -0.
template <typename T>
T Maximum(T x, T y) {
  if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<T>::quiet_NaN();
  if (x == y) return std::signbit(x) ? y : x;
  return y > x ? y : x;
}

Lane FloatOp(Op op, ScalarType s, const Lane* a) {
  if (s == ScalarType::kFloat64) {
    const double x = a[0].f, y = a[1].f;
    switch (op) {
      case Op::EXP2: return F(std::exp2(x));
      case Op::LOG2: return F(std::log2(x));
      case Op::SIN: return F(std::sin(x));
      case Op::SQRT: return F(std::sqrt(x));
      case Op::RECIPROCAL: return F(1.0 / x);
      case Op::NEG: return F(-x);
      case Op::TRUNC: return F(std::trunc(x));
      case Op::ADD: return F(x + y);
      case Op::SUB: return F(x - y);
      case Op::MUL: return F(x * y);
      case Op::FDIV: return F(x / y);
      case Op::POW: return F(std::pow(x, y));
      case Op::MAX: return F(Maximum(x, y));
      case Op::CMPLT: return B(x < y);
      case Op::CMPNE: return B(x != y);
      case Op::CMPEQ: return B(x == y);
      case Op::MULACC: {
        volatile double p = x * y;
        return F(p + a[2].f);
      }
      default: return F(std::numeric_limits<double>::quiet_NaN());
    }
  }
  // float32, float16, bfloat16: computed in float32, rounded to the dtype.
  const float x = static_cast<float>(a[0].f), y = static_cast<float>(a[1].f);
  float r;
  switch (op) {
    case Op::EXP2: r = std::exp2(x); break;
    case Op::LOG2: r = std::log2(x); break;
    case Op::SIN: r = std::sin(x); break;
    case Op::SQRT: r = std::sqrt(x); break;
    case Op::RECIPROCAL: r = 1.0f / x; break;
    case Op::NEG: r = -x; break;
    case Op::TRUNC: r = std::trunc(x); break;
    case Op::ADD: r = x + y; break;
    case Op::SUB: r = x - y; break;
    case Op::MUL: r = x * y; break;
    case Op::FDIV: r = x / y; break;
    case Op::POW: r = std::pow(x, y); break;
    case Op::MAX: r = Maximum(x, y); break;
    case Op::CMPLT: return B(x < y);
    case Op::CMPNE: return B(x != y);
    case Op::CMPEQ: return B(x == y);
    case Op::MULACC: {
      float p = static_cast<float>(RoundFloat(s, static_cast<double>(x * y)));
      r = p + static_cast<float>(a[2].f);
      break;
    }
    default: r = std::numeric_limits<float>::quiet_NaN(); break;
  }
  return F(RoundFloat(s, static_cast<double>(r)));
}

Lane BoolOp(Op op, const Lane* a) {
  const bool x = a[0].i != 0, y = a[1].i != 0;
  switch (op) {
    case Op::ADD:
    case Op::OR:
    case Op::MAX: return B(x || y);
    case Op::MUL:
    case Op::AND: return B(x && y);
    case Op::XOR:
    case Op::CMPNE: return B(x != y);
    case Op::CMPEQ: return B(x == y);
    case Op::CMPLT: return B(!x && y);
    case Op::SUB: return B(x != y);
    case Op::NEG: return B(x);
    default: return B(false);
  }
}

Lane IntOp(Op op, ScalarType s, const Lane* a) {
  const bool u = IsU(s);
  const int bits = Bits(s);
  const int64_t x = a[0].i, y = a[1].i;
  const uint64_t ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
  auto w = [&](uint64_t v) { return I(WrapInt(s, static_cast<int64_t>(v))); };
  switch (op) {
    case Op::NEG: return w(0 - ux);
    case Op::ADD: return w(ux + uy);
    case Op::SUB: return w(ux - uy);
    case Op::MUL: return w(ux * uy);
    case Op::AND: return w(ux & uy);
    case Op::OR: return w(ux | uy);
    case Op::XOR: return w(ux ^ uy);
    case Op::SHL: return w(ux << (uy & static_cast<uint64_t>(bits - 1)));
    case Op::SHR: {
      const int sh = static_cast<int>(uy & static_cast<uint64_t>(bits - 1));
      return u ? w(ux >> sh) : w(static_cast<uint64_t>(x >> sh));
    }
    case Op::MAX: return u ? (uy > ux ? a[1] : a[0]) : (y > x ? a[1] : a[0]);
    case Op::CMPLT: return B(u ? ux < uy : x < y);
    case Op::CMPNE: return B(x != y);
    case Op::CMPEQ: return B(x == y);
    case Op::CDIV:
    case Op::FLOORDIV: {
      if (y == 0) return I(0);
      if (u) return w(ux / uy);
      if (y == -1) return w(0 - ux);
      int64_t q = x / y;
      if (op == Op::FLOORDIV && (x % y != 0) && ((x < 0) != (y < 0))) --q;
      return w(static_cast<uint64_t>(q));
    }
    case Op::CMOD:
    case Op::FLOORMOD: {
      if (y == 0) return I(0);
      if (u) return w(ux % uy);
      if (y == -1) return I(0);
      int64_t r = x % y;
      if (op == Op::FLOORMOD && r != 0 && ((r < 0) != (y < 0))) r += y;
      return w(static_cast<uint64_t>(r));
    }
    case Op::MULACC: return w(ux * uy + static_cast<uint64_t>(a[2].i));
    case Op::THREEFRY: return w(Threefry2x32(ux, uy));
    default: return I(0);
  }
}

}  // namespace

uint16_t FloatToHalfBits(float f) {
  const uint32_t x = F2U(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));  // inf / nan
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);  // underflow -> 0
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;  // may carry into the exponent (-> inf): correct
  return static_cast<uint16_t>(sign | half);
}

float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return U2F(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return U2F(sign);
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return U2F(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t FloatToBF16Bits(float f) {
  uint32_t x = F2U(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float BF16BitsToFloat(uint16_t b) { return U2F(static_cast<uint32_t>(b) << 16); }

int64_t WrapInt(ScalarType d, int64_t v) {
  switch (d) {
    case ScalarType::kBool: return v != 0;
    case ScalarType::kInt8: return static_cast<int8_t>(v);
    case ScalarType::kUInt8: return static_cast<uint8_t>(v);
    case ScalarType::kInt16: return static_cast<int16_t>(v);
    case ScalarType::kUInt16: return static_cast<uint16_t>(v);
    case ScalarType::kInt32: return static_cast<int32_t>(v);
    case ScalarType::kUInt32: return static_cast<uint32_t>(v);
    default: return v;
  }
}

double RoundFloat(ScalarType d, double v) {
  switch (d) {
    case ScalarType::kFloat32: return static_cast<float>(v);
    case ScalarType::kFloat16: return HalfBitsToFloat(FloatToHalfBits(static_cast<float>(v)));
    case ScalarType::kBFloat16: return BF16BitsToFloat(FloatToBF16Bits(static_cast<float>(v)));
    default: return v;
  }
}

Lane EvalAlu(Op op, ScalarType src, const Lane* args) {
  if (op == Op::WHERE) return args[0].i != 0 ? args[1] : args[2];
  if (src == ScalarType::kBool) return BoolOp(op, args);
  if (IsF(src)) return FloatOp(op, src, args);
  return IntOp(op, src, args);
}

Lane EvalCast(ScalarType from, ScalarType to, Lane v) {
  if (to == ScalarType::kBool) return B(IsF(from) ? v.f != 0.0 : v.i != 0);
  if (IsF(to)) {
    if (IsF(from)) return F(RoundFloat(to, v.f));
    double d = IsU(from) ? static_cast<double>(static_cast<uint64_t>(v.i)) : static_cast<double>(v.i);
    if (to == ScalarType::kFloat32 || to == ScalarType::kFloat16 || to == ScalarType::kBFloat16) {
      // Round the integer straight to float32 (one rounding), then to the narrower type.
      float f = IsU(from) ? static_cast<float>(static_cast<uint64_t>(v.i)) : static_cast<float>(v.i);
      return F(RoundFloat(to, static_cast<double>(f)));
    }
    return F(d);
  }
  // -> integer
  if (IsF(from)) {
    const double x = v.f;
    if (std::isnan(x)) return I(0);
    const double t = std::trunc(x);
    if (IsU(to)) {
      const double hi = to == ScalarType::kUInt64 ? 18446744073709551615.0 : static_cast<double>(DTypeMax(DType(to)));
      if (t <= 0) return I(0);
      if (t >= hi) return I(WrapInt(to, to == ScalarType::kUInt64 ? -1 : DTypeMax(DType(to))));
      return I(WrapInt(to, static_cast<int64_t>(static_cast<uint64_t>(t))));
    }
    const int64_t lo = DTypeMin(DType(to)), hi = DTypeMax(DType(to));
    if (t <= static_cast<double>(lo)) return I(lo);
    if (t >= static_cast<double>(hi)) return I(hi);
    return I(static_cast<int64_t>(t));
  }
  return I(WrapInt(to, v.i));
}

void LaneToBytes(ScalarType d, Lane v, uint8_t* out) {
  switch (d) {
    case ScalarType::kFloat64: std::memcpy(out, &v.f, 8); return;
    case ScalarType::kFloat32: {
      float f = static_cast<float>(v.f);
      std::memcpy(out, &f, 4);
      return;
    }
    case ScalarType::kFloat16:
    case ScalarType::kBFloat16: {
      uint16_t h = d == ScalarType::kFloat16 ? FloatToHalfBits(static_cast<float>(v.f))
                                             : FloatToBF16Bits(static_cast<float>(v.f));
      std::memcpy(out, &h, 2);
      return;
    }
    default: {
      const int n = DType(d).ItemSize();
      uint64_t u = static_cast<uint64_t>(v.i);
      std::memcpy(out, &u, n);  // little-endian
      return;
    }
  }
}

Lane LaneFromBytes(ScalarType d, const uint8_t* in) {
  switch (d) {
    case ScalarType::kFloat64: {
      double f;
      std::memcpy(&f, in, 8);
      return F(f);
    }
    case ScalarType::kFloat32: {
      float f;
      std::memcpy(&f, in, 4);
      return F(f);
    }
    case ScalarType::kFloat16:
    case ScalarType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, in, 2);
      return F(d == ScalarType::kFloat16 ? HalfBitsToFloat(h) : BF16BitsToFloat(h));
    }
    default: {
      const int n = DType(d).ItemSize();
      uint64_t u = 0;
      std::memcpy(&u, in, n);
      return I(WrapInt(d, static_cast<int64_t>(u)));
    }
  }
}

}  // namespace kiln::backends::interp
