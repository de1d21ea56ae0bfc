// C-style renderers: constants, ALU ops, casts and the preamble helpers (semantics in c_style.h).
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "engine/base/status.h"
#include "engine/codegen/render/c_style_emitter.h"
#include "engine/codegen/render/llvm_ir.h"

namespace kiln::codegen::cstyle_internal {
namespace {

// IEEE binary16 bits -> the float of equal value (exact).
float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

}  // namespace

std::string Emitter::BitsToFloat(const std::string& bits) const {
  return Cl() ? absl::StrCat("as_float((uint)(", bits, "))")
              : absl::StrCat("__uint_as_float((unsigned int)(", bits, "))");
}

std::string Emitter::FloatToBits(const std::string& f) const {
  return Cl() ? absl::StrCat("as_uint(", f, ")") : absl::StrCat("__float_as_uint(", f, ")");
}

std::string Emitter::Const(DType d, const Arg& a) {
  double f = 0.0;
  int64_t i = 0;
  if (const auto* b = std::get_if<bool>(&a)) {
    f = *b;
    i = *b;
  }
  if (const auto* n = std::get_if<int64_t>(&a)) {
    f = static_cast<double>(*n);
    i = *n;
  }
  if (const auto* c = std::get_if<ConstFloat>(&a)) {
    f = c->value;
    i = std::isfinite(f) && std::fabs(f) < 9.2e18 ? static_cast<int64_t>(f) : 0;
  }
  const DType s = d.Scalar();
  std::string lit;
  auto float_lit = [&](float v) {
    if (std::isfinite(v)) return absl::StrFormat("(%af)", v);
    const uint32_t bits = std::isnan(v) ? 0x7fc00000u : std::bit_cast<uint32_t>(v);
    return BitsToFloat(absl::StrFormat("0x%08Xu", bits));
  };
  switch (s.scalar) {
    case ScalarType::kBool:
      lit = (std::holds_alternative<ConstFloat>(a) ? f != 0.0 : i != 0) ? "true" : "false";
      break;
    case ScalarType::kFloat16:
      lit = float_lit(HalfBitsToFloat(DoubleToHalfBits(f)));
      break;
    case ScalarType::kBFloat16:
      lit = float_lit(std::bit_cast<float>(static_cast<uint32_t>(DoubleToBFloat16Bits(f)) << 16));
      break;
    case ScalarType::kFloat32:
      lit = float_lit(static_cast<float>(f));
      break;
    case ScalarType::kFloat64: {
      need_fp64_ = true;
      if (std::isfinite(f)) {
        lit = absl::StrFormat("(%a)", f);
      } else {
        const uint64_t bits = std::isnan(f) ? 0x7ff8000000000000ull : std::bit_cast<uint64_t>(f);
        lit = Cl() ? absl::StrFormat("as_double((ulong)0x%016XUL)", bits)
                   : absl::StrFormat("__longlong_as_double((long long)0x%016XULL)", bits);
      }
      break;
    }
    default: {
      const int bits = s.ItemSize() * 8;
      uint64_t u = static_cast<uint64_t>(i);
      if (bits < 64) u &= (uint64_t{1} << bits) - 1;
      // The bit pattern in the unsigned type of the width, converted to the type (two's complement wrap).
      lit =
          absl::StrFormat("((%s)0x%X%s)", RegType(s), u, bits == 64 ? (Cl() ? "UL" : "ULL") : "u");
      break;
    }
  }
  if (d.count <= 1) return lit;
  const std::string t = RegType(d);
  if (Cl()) return absl::StrCat("((", t, ")(", lit, "))");
  std::string args;
  for (int k = 0; k < d.count; ++k) absl::StrAppend(&args, k ? ", " : "", lit);
  return absl::StrCat("make_", t, "(", args, ")");
}

std::string Emitter::RoundTo(DType d, const std::string& float_expr) {
  if (d.scalar == ScalarType::kFloat16) {
    Need(kHalf);
    return absl::StrCat("kiln_rh(", float_expr, ")");
  }
  Need(kBFloat);
  return absl::StrCat("kiln_rb(", float_expr, ")");
}

std::string Emitter::Math(const char* fn, DType d, const std::vector<std::string>& a) {
  std::string f = fn;
  if (!Cl() && d.scalar != ScalarType::kFloat64) f += "f";
  std::string args;
  for (size_t k = 0; k < a.size(); ++k) absl::StrAppend(&args, k ? ", " : "", a[k]);
  return absl::StrCat(f, "(", args, ")");
}

absl::StatusOr<std::string> Emitter::IntAlu(Op op, DType d, const std::vector<std::string>& a,
                                            const UOp& u) {
  const std::string t = RegType(d);
  if (d.IsBool()) {
    switch (op) {
      case Op::ADD:
      case Op::OR:
      case Op::MAX:
        return absl::StrCat("(", a[0], " || ", a[1], ")");
      case Op::MUL:
      case Op::AND:
        return absl::StrCat("(", a[0], " && ", a[1], ")");
      case Op::SUB:
      case Op::XOR:
      case Op::CMPNE:
        return absl::StrCat("(", a[0], " != ", a[1], ")");
      case Op::CMPEQ:
        return absl::StrCat("(", a[0], " == ", a[1], ")");
      case Op::CMPLT:
        return absl::StrCat("(!", a[0], " && ", a[1], ")");
      case Op::NEG:
        return absl::StrCat("(!", a[0], ")");
      case Op::MULACC:
        return absl::StrCat("((", a[0], " && ", a[1], ") || ", a[2], ")");
      default:
        return absl::UnimplementedError(
            absl::StrCat("c-style renderer: ", std::string(OpName(op)), " on bool"));
    }
  }
  const bool sign = !d.IsUnsigned();
  const int bits = d.ItemSize() * 8;
  // Wrapping arithmetic in an unsigned type at least 32 bits wide (no signed overflow, no int promotion surprises).
  const std::string w =
      bits == 64 ? ScalarName(ScalarType::kUInt64) : ScalarName(ScalarType::kUInt32);
  auto wrap = [&](const std::string& x) { return absl::StrCat("(", w, ")", x); };
  auto bin = [&](const char* o) {
    return absl::StrCat("((", t, ")(", wrap(a[0]), " ", o, " ", wrap(a[1]), "))");
  };
  auto cmp = [&](const char* o) { return absl::StrCat("(", a[0], " ", o, " ", a[1], ")"); };
  // Division: the divisor is safe when it is a CONST other than 0 (and -1 for signed types).
  bool safe = false;
  if (u.num_src() > 1 && u.src(1)->op() == Op::CONST) {
    const int64_t v = static_cast<int64_t>(u.src(1)->ConstValue());
    safe = v != 0 && (!sign || v != -1);
  }
  const std::string& x = a[0];
  const std::string y = a.size() > 1 ? a[1] : "";
  auto cdiv = [&]() -> std::string {
    if (safe) return absl::StrCat("((", t, ")(", x, " / ", y, "))");
    if (!sign) return absl::StrCat("(", y, " == 0 ? (", t, ")0 : (", t, ")(", x, " / ", y, "))");
    return absl::StrCat("(", y, " == 0 ? (", t, ")0 : ", y, " == (", t, ")-1 ? (", t, ")(0u - ",
                        wrap(x), ") : (", t, ")(", x, " / ", y, "))");
  };
  auto cmod = [&]() -> std::string {
    if (safe) return absl::StrCat("((", t, ")(", x, " % ", y, "))");
    if (!sign) return absl::StrCat("(", y, " == 0 ? (", t, ")0 : (", t, ")(", x, " % ", y, "))");
    return absl::StrCat("(", y, " == 0 || ", y, " == (", t, ")-1 ? (", t, ")0 : (", t, ")(", x,
                        " % ", y, "))");
  };
  switch (op) {
    case Op::ADD:
      return bin("+");
    case Op::SUB:
      return bin("-");
    case Op::MUL:
      return bin("*");
    case Op::XOR:
      return bin("^");
    case Op::OR:
      return bin("|");
    case Op::AND:
      return bin("&");
    case Op::CMPLT:
      return cmp("<");
    case Op::CMPNE:
      return cmp("!=");
    case Op::CMPEQ:
      return cmp("==");
    case Op::MAX:
      return absl::StrCat("(", x, " > ", y, " ? ", x, " : ", y, ")");
    case Op::NEG:
      return absl::StrCat("((", t, ")(0u - ", wrap(x), "))");
    case Op::TRUNC:
      return x;
    case Op::SHL:
      return absl::StrCat("((", t, ")(", wrap(x), " << (", y, " & ", bits - 1, ")))");
    case Op::SHR:
      return absl::StrCat("((", t, ")(", x, " >> (", y, " & ", bits - 1, ")))");
    case Op::CDIV:
    case Op::FDIV:
      return cdiv();
    case Op::CMOD:
      return cmod();
    case Op::FLOORDIV:
    case Op::FLOORMOD: {
      if (!sign) return op == Op::FLOORDIV ? cdiv() : cmod();
      const std::string q = cdiv(), r = cmod();
      const std::string adj = absl::StrCat("(", r, " != 0 && ((", r, " ^ ", y, ") < 0))");
      if (op == Op::FLOORDIV) return absl::StrCat("((", t, ")(", q, " - (", adj, " ? 1 : 0)))");
      return absl::StrCat("(", adj, " ? (", t, ")(", wrap(r), " + ", wrap(y), ") : ", r, ")");
    }
    case Op::MULACC:
      return absl::StrCat("((", t, ")(", wrap(a[0]), " * ", wrap(a[1]), " + ", wrap(a[2]), "))");
    default:
      return absl::UnimplementedError(absl::StrCat("c-style renderer: ", std::string(OpName(op)),
                                                   " is not supported on ", d.Name()));
  }
}

absl::StatusOr<std::string> Emitter::FloatAlu(Op op, DType d, const std::vector<std::string>& a) {
  const bool dbl = d.scalar == ScalarType::kFloat64;
  auto bin = [&](const char* o) { return absl::StrCat("(", a[0], " ", o, " ", a[1], ")"); };
  switch (op) {
    case Op::ADD:
      return bin("+");
    case Op::SUB:
      return bin("-");
    case Op::MUL:
      return bin("*");
    case Op::FDIV:
    case Op::CDIV:
      return bin("/");
    case Op::CMOD:
      return Math("fmod", d, a);
    case Op::CMPLT:
      return bin("<");
    case Op::CMPNE:
      return bin("!=");
    case Op::CMPEQ:
      return bin("==");
    case Op::NEG:
      return absl::StrCat("(-", a[0], ")");
    case Op::RECIPROCAL:
      return absl::StrCat("(", dbl ? "1.0" : "1.0f", " / ", a[0], ")");
    case Op::MAX:
      Need(dbl ? kFMaxD : kFMaxF);
      return absl::StrCat(dbl ? "kiln_fmaxd(" : "kiln_fmaxf(", a[0], ", ", a[1], ")");
    case Op::EXP2:
      return Math("exp2", d, a);
    case Op::LOG2:
      return Math("log2", d, a);
    case Op::SIN:
      return Math("sin", d, a);
    case Op::SQRT:
      return Math("sqrt", d, a);
    case Op::TRUNC:
      return Math("trunc", d, a);
    case Op::POW:
      return Math("pow", d, a);
    case Op::MULACC:
      return absl::StrCat("(", a[0], " * ", a[1], " + ", a[2], ")");
    case Op::FLOORDIV:
      return Math("floor", d, {bin("/")});
    case Op::FLOORMOD:
      return absl::StrCat("(", a[0], " - ", Math("floor", d, {bin("/")}), " * ", a[1], ")");
    default:
      return absl::UnimplementedError(absl::StrCat("c-style renderer: ", std::string(OpName(op)),
                                                   " is not supported on ", d.Name()));
  }
}

absl::StatusOr<std::string> Emitter::Alu(const UOp& u) {
  const Op op = u.op();
  std::vector<std::string> a;
  for (const UOpPtr& s : u.src()) a.push_back(Ref(s.get()));
  if (op == Op::WHERE) return absl::StrCat("(", a[0], " ? ", a[1], " : ", a[2], ")");
  if (op == Op::THREEFRY || op == Op::WMMA)
    return absl::UnimplementedError(absl::StrCat("c-style renderer: ", std::string(OpName(op)),
                                                 " must be decomposed by codegen"));
  const DType d = u.src(0)->dtype();
  if (d.count > 1 || u.dtype().count > 1)
    return absl::UnimplementedError(
        "c-style renderer: vector ALU ops (codegen expands upcasts to scalars)");
  if (d.IsFloat()) {
    KILN_ASSIGN_OR_RETURN(std::string r, FloatAlu(op, d, a));
    if (IsHalfLike(d) && !IsComparison(op)) r = RoundTo(d, r);
    return r;
  }
  return IntAlu(op, d, a, u);
}

absl::StatusOr<std::string> Emitter::Cast(const UOp& u) {
  const DType f = u.src(0)->dtype(), t = u.dtype();
  const std::string x = Ref(u.src(0).get());
  if (f.count != 1 || t.count != 1)
    return absl::UnimplementedError("c-style renderer: vector CAST/BITCAST");
  const std::string tt = RegType(t);
  if (u.op() == Op::BITCAST) {
    if (f.IsBool() || t.IsBool() || f.ItemSize() != t.ItemSize())
      return absl::InvalidArgumentError(
          "c-style renderer: BITCAST needs equal-size non-bool types");
    const std::string ut = UnsignedOf(f);
    std::string bits;  // the bit pattern in the unsigned type of the width
    if (f.scalar == ScalarType::kFloat16) {
      Need(kHalf);
      bits = absl::StrCat("kiln_f2h(", x, ")");
    } else if (f.scalar == ScalarType::kBFloat16) {
      Need(kBFloat);
      bits = absl::StrCat("kiln_f2b(", x, ")");
    } else if (f.scalar == ScalarType::kFloat32) {
      bits = FloatToBits(x);
    } else if (f.scalar == ScalarType::kFloat64) {
      bits = Cl() ? absl::StrCat("as_ulong(", x, ")")
                  : absl::StrCat("(unsigned long long)__double_as_longlong(", x, ")");
    } else {
      bits = absl::StrCat("(", ut, ")", x);
    }
    if (t.scalar == ScalarType::kFloat16) {
      Need(kHalf);
      return absl::StrCat("kiln_h2f((", ut, ")(", bits, "))");
    }
    if (t.scalar == ScalarType::kBFloat16) {
      Need(kBFloat);
      return absl::StrCat("kiln_b2f((", ut, ")(", bits, "))");
    }
    if (t.scalar == ScalarType::kFloat32) return BitsToFloat(bits);
    if (t.scalar == ScalarType::kFloat64)
      return Cl() ? absl::StrCat("as_double((ulong)(", bits, "))")
                  : absl::StrCat("__longlong_as_double((long long)(", bits, "))");
    return absl::StrCat("((", tt, ")(", bits, "))");
  }
  if (t.IsBool()) return absl::StrCat("(", x, " != 0)");
  if (IsHalfLike(t)) {
    if (f == t) return x;
    return RoundTo(t, absl::StrCat("(float)(", x, ")"));
  }
  if (RegType(f) == tt) return x;
  return absl::StrCat("((", tt, ")(", x, "))");
}

std::string Emitter::Preamble() const {
  // Written once with placeholders: FN (function qualifiers), U16/U32, F2U/U2F (float <-> uint bits), RINT.
  static constexpr const char* kHalfText = R"(FN U16 kiln_f2h(float f) {
  U32 x = F2U(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return (U16)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (U16)(sign | 0x7c00u);
  if (a < 0x38800000u) return (U16)(sign | (U32)RINT(U2F(a) * 16777216.0f));
  U32 r = a - 0x38000000u;
  r = r + 0xfffu + ((r >> 13) & 1u);
  return (U16)(sign | (r >> 13));
}
FN float kiln_h2f(U16 h) {
  U32 sign = ((U32)h & 0x8000u) << 16, e = ((U32)h >> 10) & 0x1fu, m = (U32)h & 0x3ffu;
  if (e == 0u) { float v = (float)m * 5.9604644775390625e-8f; return sign ? -v : v; }
  if (e == 31u) return U2F(sign | 0x7f800000u | (m << 13));
  return U2F(sign | ((e + 112u) << 23) | (m << 13));
}
FN float kiln_rh(float f) { return kiln_h2f(kiln_f2h(f)); }
)";
  static constexpr const char* kBFloatText = R"(FN U16 kiln_f2b(float f) {
  U32 x = F2U(f);
  if (f != f) return (U16)((x >> 16) | 64u);
  return (U16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
FN float kiln_b2f(U16 b) { return U2F((U32)b << 16); }
FN float kiln_rb(float f) { return kiln_b2f(kiln_f2b(f)); }
)";
  static constexpr const char* kFMaxFText =
      "FN float kiln_fmaxf(float a, float b) { return (a != a || b != b) ? a + b : a > b ? a : b > "
      "a ? b : "
      "(F2U(a) >> 31) ? b : a; }\n";
  static constexpr const char* kFMaxDText =
      "FN double kiln_fmaxd(double a, double b) { return (a != a || b != b) ? a + b : a > b ? a : "
      "b > a ? b : "
      "(D2U(a) >> 63) ? b : a; }\n";
  // mma.sync m16n8k16 (sm_80+): A in 4 and B in 2 registers of two 16-bit elements each (the lower-indexed element
  // in the low half), C and D four floats; fragment layout in docs/kernel-ir.md (WMMA).
  static constexpr const char* kMmaText = R"(FN float4 kiln_mma_TY(U32 a0, U32 a1, U32 a2, U32 a3, U32 b0, U32 b1, float4 c) {
  float4 d;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.TY.TY.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
               : "=f"(d.x), "=f"(d.y), "=f"(d.z), "=f"(d.w)
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c.x), "f"(c.y), "f"(c.z), "f"(c.w));
  return d;
}
)";
  std::string text;
  if (need_[kHalf]) text += kHalfText;
  if (need_[kBFloat]) text += kBFloatText;
  if (need_[kFMaxF]) text += kFMaxFText;
  if (need_[kFMaxD]) text += kFMaxDText;
  if (need_[kMmaF16]) text += absl::StrReplaceAll(kMmaText, {{"TY", "f16"}});
  if (need_[kMmaBF16]) text += absl::StrReplaceAll(kMmaText, {{"TY", "bf16"}});
  if (text.empty()) return text;
  if (Cl()) {
    return absl::StrReplaceAll(text, {{"FN ", "inline "},
                                      {"U16", "ushort"},
                                      {"U32", "uint"},
                                      {"F2U(", "as_uint("},
                                      {"U2F(", "as_float("},
                                      {"D2U(", "as_ulong("},
                                      {"RINT(", "rint("}});
  }
  return absl::StrReplaceAll(text, {{"FN ", "__device__ inline "},
                                    {"U16", "unsigned short"},
                                    {"U32", "unsigned int"},
                                    {"F2U(", "__float_as_uint("},
                                    {"U2F(", "__uint_as_float("},
                                    {"D2U(", "(unsigned long long)__double_as_longlong("},
                                    {"RINT(", "rintf("}});
}

}  // namespace kiln::codegen::cstyle_internal
