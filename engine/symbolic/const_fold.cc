#include "engine/symbolic/const_fold.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace kiln {

namespace {

int Bits(DType d) { return d.IsBool() ? 1 : d.ItemSize() * 8; }

double RoundBFloat16(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(f)) return v;
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7fffu + ((b >> 16) & 1u);  // round to nearest even
  b &= 0xffff0000u;
  std::memcpy(&f, &b, 4);
  return f;
}

// IEEE binary16, rounded once from the double (to nearest, ties to even): 10 fraction bits, normals from 2^-14,
// subnormals in steps of 2^-24, and everything from 65520 up overflows to infinity. Written out rather than through
// _Float16, which clang 14 (the fuzz preset's compiler) does not support on x86.
double RoundFloat16(double v) {
  if (std::isnan(v) || std::isinf(v) || v == 0) return v;
  const double a = std::fabs(v);
  int e = 0;
  std::frexp(a, &e);                           // a = m * 2^e, m in [0.5, 1)
  const int ulp = std::max(e - 11, -24);       // the spacing of halves around a: 2^ulp
  double q = std::ldexp(std::nearbyint(std::ldexp(a, -ulp)), ulp);  // exact scaling; rounds to nearest even
  if (q > 65504.0) q = std::numeric_limits<double>::infinity();
  return std::copysign(q, v);
}

int64_t FloorDiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (a == std::numeric_limits<int64_t>::min() && b == -1) return a;
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t FloorMod(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

}  // namespace

int64_t WrapInt(DType d, int64_t v) {
  if (d.IsBool()) return v != 0 ? 1 : 0;
  int bits = Bits(d);
  if (bits >= 64 || bits <= 0) return v;
  uint64_t mask = (uint64_t{1} << bits) - 1;
  uint64_t u = static_cast<uint64_t>(v) & mask;
  if (!d.IsUnsigned() && (u >> (bits - 1)) != 0) u |= ~mask;  // sign-extend
  return static_cast<int64_t>(u);
}

double RoundFloat(DType d, double v) {
  switch (d.scalar) {
    case ScalarType::kFloat32: return static_cast<float>(v);
    case ScalarType::kFloat16: return RoundFloat16(v);
    case ScalarType::kBFloat16: return RoundBFloat16(v);
    default: return v;
  }
}

std::optional<int64_t> ExecIntAlu(Op op, DType d, absl::Span<const int64_t> v) {
  const bool uns = d.IsUnsigned();
  const bool is_bool = d.IsBool();
  auto u = [&](int i) { return static_cast<uint64_t>(v[i]); };
  auto wrap = [&](uint64_t r) { return WrapInt(d, static_cast<int64_t>(r)); };
  switch (op) {
    case Op::NEG: return is_bool ? (v[0] == 0 ? 1 : 0) : wrap(uint64_t{0} - u(0));
    case Op::TRUNC: return v[0];
    case Op::ADD: return is_bool ? int64_t{(v[0] | v[1]) != 0} : wrap(u(0) + u(1));
    case Op::SUB: return wrap(u(0) - u(1));
    case Op::MUL: return is_bool ? int64_t{(v[0] & v[1]) != 0} : wrap(u(0) * u(1));
    case Op::SHL:
    case Op::SHR: {
      if (v[1] < 0 || v[1] >= Bits(d)) return std::nullopt;
      if (op == Op::SHL) return wrap(u(0) << v[1]);
      if (uns) return wrap(u(0) >> v[1]);
      return v[0] >> v[1];  // arithmetic shift
    }
    case Op::CDIV:
    case Op::CMOD: {
      if (v[1] == 0) return 0;
      if (uns) return wrap(op == Op::CDIV ? u(0) / u(1) : u(0) % u(1));
      if (v[0] == std::numeric_limits<int64_t>::min() && v[1] == -1)
        return op == Op::CDIV ? v[0] : 0;
      return wrap(static_cast<uint64_t>(op == Op::CDIV ? v[0] / v[1] : v[0] % v[1]));
    }
    case Op::FLOORDIV:
    case Op::FLOORMOD: {
      if (v[1] == 0) return 0;
      if (uns) return wrap(op == Op::FLOORDIV ? u(0) / u(1) : u(0) % u(1));
      return wrap(static_cast<uint64_t>(op == Op::FLOORDIV ? FloorDiv(v[0], v[1])
                                                            : FloorMod(v[0], v[1])));
    }
    case Op::MAX: return uns ? static_cast<int64_t>(std::max(u(0), u(1))) : std::max(v[0], v[1]);
    case Op::CMPLT: return uns ? int64_t{u(0) < u(1)} : int64_t{v[0] < v[1]};
    case Op::CMPNE: return int64_t{v[0] != v[1]};
    case Op::CMPEQ: return int64_t{v[0] == v[1]};
    case Op::AND: return v[0] & v[1];
    case Op::OR: return v[0] | v[1];
    case Op::XOR: return wrap(u(0) ^ u(1));
    case Op::WHERE: return v[0] != 0 ? v[1] : v[2];
    case Op::MULACC: return is_bool ? int64_t{((v[0] & v[1]) | v[2]) != 0} : wrap(u(0) * u(1) + u(2));
    default: return std::nullopt;
  }
}

std::optional<double> ExecFloatAlu(Op op, DType d, absl::Span<const double> v) {
  double r;
  switch (op) {
    case Op::NEG: r = -v[0]; break;
    case Op::EXP2: r = std::exp2(v[0]); break;
    case Op::LOG2: r = std::log2(v[0]); break;
    case Op::SIN: r = std::sin(v[0]); break;
    case Op::SQRT: r = std::sqrt(v[0]); break;
    case Op::RECIPROCAL: r = 1.0 / v[0]; break;
    case Op::TRUNC: r = std::trunc(v[0]); break;
    case Op::ADD: r = v[0] + v[1]; break;
    case Op::SUB: r = v[0] - v[1]; break;
    case Op::MUL: r = v[0] * v[1]; break;
    case Op::FDIV: r = v[0] / v[1]; break;
    case Op::POW: r = std::pow(v[0], v[1]); break;
    case Op::MAX: r = std::fmax(v[0], v[1]); break;
    case Op::CMPLT: return v[0] < v[1] ? 1.0 : 0.0;
    case Op::CMPNE: return v[0] != v[1] ? 1.0 : 0.0;
    case Op::CMPEQ: return v[0] == v[1] ? 1.0 : 0.0;
    case Op::WHERE: r = v[0] != 0.0 ? v[1] : v[2]; break;
    case Op::MULACC: r = v[0] * v[1] + v[2]; break;
    default: return std::nullopt;
  }
  return RoundFloat(d, r);
}

UOpPtr MakeConst(DType d, int64_t v) {
  if (d.IsFloat()) return UOp::Const(d, static_cast<double>(v));
  return UOp::Const(d, WrapInt(d, v));
}

namespace {

// Converts CONST value c (of its own dtype) to dtype `to` (C-like casts; float -> int truncates,
// NaN -> 0, out of range saturates as UOp::ConstArg does, then wraps).
UOpPtr CastConst(const UOp& c, DType to) {
  DType from = c.dtype();
  if (to.IsFloat()) return UOp::Const(to, RoundFloat(to, c.ConstValue()));
  if (to.IsBool()) return UOp::ConstBool(c.ConstValue() != 0.0);
  if (from.IsFloat()) {
    double x = std::trunc(c.ConstValue());
    Arg a = UOp::ConstArg(to, x);
    return UOp::Const(to, WrapInt(to, std::get<int64_t>(a)));
  }
  return UOp::Const(to, WrapInt(to, ConstInt(c)));
}

}  // namespace

UOpPtr FoldConstAlu(const UOp& u) {
  for (const UOpPtr& s : u.src()) {
    if (!s->IsConst()) return nullptr;
  }
  if (u.op() == Op::CAST) return CastConst(*u.src(0), u.dtype());
  if (!IsALU(u.op()) || u.op() == Op::THREEFRY) return nullptr;
  // The dtype the values are computed in: the sources' (branches' for WHERE).
  DType vd = u.op() == Op::WHERE ? u.src(1)->dtype() : u.src(0)->dtype();
  size_t n = u.num_src();
  if (vd.IsFloat()) {
    double vals[3];
    for (size_t i = 0; i < n; ++i) vals[i] = u.src(i)->ConstValue();
    std::optional<double> r = ExecFloatAlu(u.op(), vd, absl::MakeConstSpan(vals, n));
    if (!r) return nullptr;
    if (u.dtype().IsBool()) return UOp::ConstBool(*r != 0.0);
    return UOp::Const(u.dtype(), *r);
  }
  int64_t vals[3];
  for (size_t i = 0; i < n; ++i) vals[i] = ConstInt(*u.src(i));
  std::optional<int64_t> r = ExecIntAlu(u.op(), vd, absl::MakeConstSpan(vals, n));
  if (!r) return nullptr;
  if (u.dtype().IsBool()) return UOp::ConstBool(*r != 0);
  return UOp::Const(u.dtype(), *r);
}

}  // namespace kiln
