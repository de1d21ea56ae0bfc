// ALU ops, casts and the half/bfloat helpers of the llvm renderer (semantics documented in llvm_ir.h).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/codegen/render/llvm_ir_emitter.h"

namespace kiln::codegen::llvm_internal {
namespace {

DType FloatOf(DType d) { return dtypes::kFloat32.Vec(d.count); }
DType IntOfWidth(int bits, int count) {
  ScalarType s = bits == 16 ? ScalarType::kInt16 : bits == 32 ? ScalarType::kInt32 : ScalarType::kInt64;
  return DType(s).Vec(static_cast<uint16_t>(count));
}
std::string IntSplat(int bits, int64_t v, int count) {
  return Splat(absl::StrCat("i", bits), absl::StrCat(v), count);
}

}  // namespace

std::string Emitter::ToFloat(const std::string& v, DType d) {
  const DType f = FloatOf(d);
  std::string r = Tmp();
  if (d.scalar == ScalarType::kFloat16) {
    Line(absl::StrCat(r, " = fpext ", RegType(d), " ", v, " to ", RegType(f)));
    return r;
  }
  // bfloat -> float: the 16 bits become the high half of the float.
  const std::string i16 = RegType(IntOfWidth(16, d.count)), i32 = RegType(IntOfWidth(32, d.count));
  std::string a = Tmp(), b = Tmp(), c = Tmp();
  Line(absl::StrCat(a, " = bitcast ", RegType(d), " ", v, " to ", i16));
  Line(absl::StrCat(b, " = zext ", i16, " ", a, " to ", i32));
  Line(absl::StrCat(c, " = shl ", i32, " ", b, ", ", IntSplat(32, 16, d.count)));
  Line(absl::StrCat(r, " = bitcast ", i32, " ", c, " to ", RegType(f)));
  return r;
}

std::string Emitter::FromFloat(const std::string& v, DType to) {
  const DType f = FloatOf(to);
  std::string r = Tmp();
  if (to.scalar == ScalarType::kFloat16) {
    Line(absl::StrCat(r, " = fptrunc ", RegType(f), " ", v, " to ", RegType(to)));
    return r;
  }
  // float -> bfloat, round to nearest even; NaN keeps its high bits and is quieted.
  const int n = to.count;
  const std::string i16 = RegType(IntOfWidth(16, n)), i32 = RegType(IntOfWidth(32, n));
  const std::string i1 = RegType(dtypes::kBool.Vec(static_cast<uint16_t>(n)));
  std::string bits = Tmp(), hi = Tmp(), lsb = Tmp(), bias = Tmp(), sum = Tmp(), rounded = Tmp(), isnan = Tmp(),
              quiet = Tmp(), sel = Tmp(), narrow = Tmp();
  Line(absl::StrCat(bits, " = bitcast ", RegType(f), " ", v, " to ", i32));
  Line(absl::StrCat(hi, " = lshr ", i32, " ", bits, ", ", IntSplat(32, 16, n)));
  Line(absl::StrCat(lsb, " = and ", i32, " ", hi, ", ", IntSplat(32, 1, n)));
  Line(absl::StrCat(bias, " = add ", i32, " ", lsb, ", ", IntSplat(32, 0x7fff, n)));
  Line(absl::StrCat(sum, " = add ", i32, " ", bits, ", ", bias));
  Line(absl::StrCat(rounded, " = lshr ", i32, " ", sum, ", ", IntSplat(32, 16, n)));
  Line(absl::StrCat(isnan, " = fcmp uno ", RegType(f), " ", v, ", ", v));
  Line(absl::StrCat(quiet, " = or ", i32, " ", hi, ", ", IntSplat(32, 64, n)));
  Line(absl::StrCat(sel, " = select ", i1, " ", isnan, ", ", i32, " ", quiet, ", ", i32, " ", rounded));
  Line(absl::StrCat(narrow, " = trunc ", i32, " ", sel, " to ", i16));
  Line(absl::StrCat(r, " = bitcast ", i16, " ", narrow, " to ", RegType(to)));
  return r;
}

std::string Emitter::Intrinsic(const std::string& base, DType d, const std::vector<std::string>& args) {
  const std::string t = RegType(d);
  const std::string scal = d.scalar == ScalarType::kFloat64 ? "f64" : "f32";
  const std::string fn = absl::StrCat(base, ".", d.count > 1 ? absl::StrCat("v", d.count) : "", scal);
  std::string params, call;
  for (size_t k = 0; k < args.size(); ++k) {
    absl::StrAppend(&params, k ? ", " : "", t);
    absl::StrAppend(&call, k ? ", " : "", t, " ", args[k]);
  }
  decls_.insert(absl::StrCat("declare ", t, " @", fn, "(", params, ")"));
  std::string r = Tmp();
  Line(absl::StrCat(r, " = call ", t, " @", fn, "(", call, ")"));
  return r;
}

// Integer CDIV/CMOD/FLOORDIV/FLOORMOD that never trap (see llvm_ir.h).
std::string Emitter::IntDiv(Op op, DType d, const std::string& a, const std::string& b, const UOp* divisor) {
  const bool sign = !d.IsUnsigned() && d.scalar != ScalarType::kBool;
  const int bits = d.ItemSize() * 8;
  const std::string t = RegType(d);
  const std::string i1 = RegType(dtypes::kBool.Vec(d.count));
  bool safe = false;
  if (divisor->op() == Op::CONST) {
    int64_t v = static_cast<int64_t>(divisor->ConstValue());
    safe = v != 0 && (!sign || v != -1);
  }
  std::string ds = b, dz, dm1, bad;
  if (!safe) {
    dz = Tmp();
    Line(absl::StrCat(dz, " = icmp eq ", t, " ", b, ", zeroinitializer"));
    bad = dz;
    if (sign) {
      dm1 = Tmp();
      bad = Tmp();
      Line(absl::StrCat(dm1, " = icmp eq ", t, " ", b, ", ", IntSplat(bits, -1, d.count)));
      Line(absl::StrCat(bad, " = or ", i1, " ", dz, ", ", dm1));
    }
    ds = Tmp();
    Line(absl::StrCat(ds, " = select ", i1, " ", bad, ", ", t, " ", IntSplat(bits, 1, d.count), ", ", t, " ", b));
  }
  const bool want_q = op == Op::CDIV || op == Op::FLOORDIV;
  const bool want_r = op != Op::CDIV && (sign || op != Op::FLOORDIV);
  std::string q, r;
  if (want_q) {
    q = Tmp();
    Line(absl::StrCat(q, " = ", sign ? "sdiv " : "udiv ", t, " ", a, ", ", ds));
    if (!safe) {
      if (sign) {  // x / -1 = -x (wrapping)
        std::string neg = Tmp(), q1 = Tmp();
        Line(absl::StrCat(neg, " = sub ", t, " zeroinitializer, ", a));
        Line(absl::StrCat(q1, " = select ", i1, " ", dm1, ", ", t, " ", neg, ", ", t, " ", q));
        q = q1;
      }
      std::string q2 = Tmp();
      Line(absl::StrCat(q2, " = select ", i1, " ", dz, ", ", t, " zeroinitializer, ", t, " ", q));
      q = q2;
    }
  }
  if (want_r) {
    r = Tmp();
    Line(absl::StrCat(r, " = ", sign ? "srem " : "urem ", t, " ", a, ", ", ds));
    if (!safe) {
      std::string r1 = Tmp();
      Line(absl::StrCat(r1, " = select ", i1, " ", bad, ", ", t, " zeroinitializer, ", t, " ", r));
      r = r1;
    }
  }
  if (op == Op::CDIV) return q;
  if (op == Op::CMOD || (!sign && op == Op::FLOORMOD)) return r;
  if (!sign) return q;  // unsigned FLOORDIV
  // floor adjustment: the remainder is nonzero and its sign differs from the divisor's.
  std::string rnz = Tmp(), x = Tmp(), neg = Tmp(), adj = Tmp();
  Line(absl::StrCat(rnz, " = icmp ne ", t, " ", r, ", zeroinitializer"));
  Line(absl::StrCat(x, " = xor ", t, " ", r, ", ", b));
  Line(absl::StrCat(neg, " = icmp slt ", t, " ", x, ", zeroinitializer"));
  Line(absl::StrCat(adj, " = and ", i1, " ", rnz, ", ", neg));
  std::string out = Tmp();
  if (op == Op::FLOORDIV) {
    std::string z = Tmp();
    Line(absl::StrCat(z, " = zext ", i1, " ", adj, " to ", t));
    Line(absl::StrCat(out, " = sub ", t, " ", q, ", ", z));
  } else {
    std::string sum = Tmp();
    Line(absl::StrCat(sum, " = add ", t, " ", r, ", ", b));
    Line(absl::StrCat(out, " = select ", i1, " ", adj, ", ", t, " ", sum, ", ", t, " ", r));
  }
  return out;
}

absl::StatusOr<std::string> Emitter::IntOp(Op op, DType d, const std::vector<std::string>& a, const UOp& u) {
  const std::string t = RegType(d);
  const bool is_bool = d.scalar == ScalarType::kBool;
  const bool sign = !d.IsUnsigned() && !is_bool;
  const int bits = is_bool ? 1 : d.ItemSize() * 8;
  std::string r = Tmp();
  auto bin = [&](const char* inst) { Line(absl::StrCat(r, " = ", inst, " ", t, " ", a[0], ", ", a[1])); };
  switch (op) {
    case Op::ADD: bin(is_bool ? "or" : "add"); return r;
    case Op::SUB: bin(is_bool ? "xor" : "sub"); return r;
    case Op::MUL: bin(is_bool ? "and" : "mul"); return r;
    case Op::XOR: bin("xor"); return r;
    case Op::OR: bin("or"); return r;
    case Op::AND: bin("and"); return r;
    case Op::CMPLT: bin(sign ? "icmp slt" : "icmp ult"); return r;
    case Op::CMPNE: bin("icmp ne"); return r;
    case Op::CMPEQ: bin("icmp eq"); return r;
    case Op::MAX: {
      if (is_bool) { bin("or"); return r; }
      bin(sign ? "icmp sgt" : "icmp ugt");
      std::string s = Tmp();
      Line(absl::StrCat(s, " = select ", RegType(dtypes::kBool.Vec(d.count)), " ", r, ", ", t, " ", a[0], ", ", t,
                        " ", a[1]));
      return s;
    }
    case Op::NEG:
      if (is_bool) Line(absl::StrCat(r, " = xor ", t, " ", a[0], ", ", Splat("i1", "true", d.count)));
      else Line(absl::StrCat(r, " = sub ", t, " zeroinitializer, ", a[0]));
      return r;
    case Op::TRUNC: return a[0];
    case Op::SHL: case Op::SHR: {
      if (is_bool) return absl::UnimplementedError("llvm renderer: shift of bool");
      Line(absl::StrCat(r, " = and ", t, " ", a[1], ", ", IntSplat(bits, bits - 1, d.count)));
      std::string s = Tmp();
      const char* inst = op == Op::SHL ? "shl" : sign ? "ashr" : "lshr";
      Line(absl::StrCat(s, " = ", inst, " ", t, " ", a[0], ", ", r));
      return s;
    }
    case Op::CDIV: case Op::CMOD: case Op::FLOORDIV: case Op::FLOORMOD: case Op::FDIV:
      return IntDiv(op == Op::FDIV ? Op::CDIV : op, d, a[0], a[1], u.src(1).get());
    case Op::MULACC: {
      bin(is_bool ? "and" : "mul");
      std::string s = Tmp();
      Line(absl::StrCat(s, " = ", is_bool ? "or " : "add ", t, " ", r, ", ", a[2]));
      return s;
    }
    default:
      return absl::UnimplementedError(
          absl::StrCat("llvm renderer: ", std::string(OpName(op)), " is not supported on ", d.Name()));
  }
}

absl::StatusOr<std::string> Emitter::FloatOp(Op op, DType d, const std::vector<std::string>& a) {
  const std::string t = RegType(d);
  std::string r = Tmp();
  auto bin = [&](const char* inst) { Line(absl::StrCat(r, " = ", inst, " ", t, " ", a[0], ", ", a[1])); };
  const std::string one = ConstLiteral(d, Arg(ConstFloat(1.0)));
  switch (op) {
    // `contract` lets LLVM fuse a multiply feeding an add into one FMA (what C compilers do within an expression
    // by default): one rounding instead of two, and twice the multiply-add throughput in reduce loops.
    case Op::ADD: bin(fp_contract() ? "fadd contract" : "fadd"); return r;
    case Op::SUB: bin(fp_contract() ? "fsub contract" : "fsub"); return r;
    case Op::MUL: bin(fp_contract() ? "fmul contract" : "fmul"); return r;
    case Op::FDIV: case Op::CDIV: bin("fdiv"); return r;
    case Op::CMOD: bin("frem"); return r;
    case Op::CMPLT: bin("fcmp olt"); return r;
    case Op::CMPNE: bin("fcmp une"); return r;
    case Op::CMPEQ: bin("fcmp oeq"); return r;
    case Op::NEG: Line(absl::StrCat(r, " = fneg ", t, " ", a[0])); return r;
    case Op::RECIPROCAL: Line(absl::StrCat(r, " = fdiv ", t, " ", one, ", ", a[0])); return r;
    case Op::MAX: return Intrinsic("llvm.maximum", d, a);
    case Op::EXP2: return Intrinsic("llvm.exp2", d, a);
    case Op::LOG2: return Intrinsic("llvm.log2", d, a);
    case Op::SIN: return Intrinsic("llvm.sin", d, a);
    case Op::SQRT: return Intrinsic("llvm.sqrt", d, a);
    case Op::TRUNC: return Intrinsic("llvm.trunc", d, a);
    case Op::POW: return Intrinsic("llvm.pow", d, a);
    case Op::MULACC: {
      Line(absl::StrCat(r, " = fmul contract ", t, " ", a[0], ", ", a[1]));
      std::string s = Tmp();
      Line(absl::StrCat(s, " = fadd contract ", t, " ", r, ", ", a[2]));
      return s;
    }
    case Op::FLOORDIV: case Op::FLOORMOD: {
      bin("fdiv");
      std::string fl = Intrinsic("llvm.floor", d, {r});
      if (op == Op::FLOORDIV) return fl;
      std::string m = Tmp(), s = Tmp();
      Line(absl::StrCat(m, " = fmul ", t, " ", fl, ", ", a[1]));
      Line(absl::StrCat(s, " = fsub ", t, " ", a[0], ", ", m));
      return s;
    }
    default:
      return absl::UnimplementedError(
          absl::StrCat("llvm renderer: ", std::string(OpName(op)), " is not supported on ", d.Name()));
  }
}

absl::Status Emitter::EmitAlu(const UOp& u) {
  const Op op = u.op();
  std::vector<std::string> a;
  for (const UOpPtr& s : u.src()) a.push_back(Ref(s.get()));
  if (op == Op::WHERE) {
    std::string r = Tmp();
    const std::string t = RegType(u.dtype());
    Line(absl::StrCat(r, " = select ", RegType(u.src(0)->dtype()), " ", a[0], ", ", t, " ", a[1], ", ", t, " ",
                      a[2]));
    val_[&u] = r;
    return absl::OkStatus();
  }
  if (op == Op::THREEFRY || op == Op::WMMA)
    return absl::UnimplementedError(absl::StrCat("llvm renderer: ", std::string(OpName(op)), " must be decomposed by codegen"));
  DType d = u.src(0)->dtype();
  const bool widen = IsHalfLike(d);
  if (widen) {
    for (size_t k = 0; k < a.size(); ++k) a[k] = ToFloat(a[k], u.src(k)->dtype());
    d = FloatOf(d);
  }
  std::string r;
  if (d.IsFloat()) {
    KILN_ASSIGN_OR_RETURN(r, FloatOp(op, d, a));
  } else {
    KILN_ASSIGN_OR_RETURN(r, IntOp(op, d, a, u));
  }
  if (widen && !IsComparison(op)) r = FromFloat(r, u.dtype());
  val_[&u] = r;
  return absl::OkStatus();
}

absl::Status Emitter::EmitCast(const UOp& u) {
  const DType f = u.src(0)->dtype(), t = u.dtype();
  std::string v = Ref(u.src(0).get());
  if (f.count != t.count)
    return absl::InvalidArgumentError("llvm renderer: CAST/BITCAST must keep the vector width");
  const std::string ft = RegType(f), tt = RegType(t);
  auto emit = [&](const std::string& inst, const std::string& from_t, const std::string& x, const std::string& to_t) {
    std::string r = Tmp();
    Line(absl::StrCat(r, " = ", inst, " ", from_t, " ", x, " to ", to_t));
    return r;
  };
  if (u.op() == Op::BITCAST) {
    if (f.IsBool() || t.IsBool() || f.ItemSize() != t.ItemSize())
      return absl::InvalidArgumentError("llvm renderer: BITCAST needs equal-size non-bool types");
    val_[&u] = ft == tt ? v : emit("bitcast", ft, v, tt);
    return absl::OkStatus();
  }
  if (ft == tt) {  // e.g. int32 <-> uint32: same bits
    val_[&u] = v;
    return absl::OkStatus();
  }
  std::string r;
  if (t.IsBool()) {
    if (IsHalfLike(f)) v = ToFloat(v, f);
    const std::string vt = IsHalfLike(f) ? RegType(FloatOf(f)) : ft;
    r = Tmp();
    Line(absl::StrCat(r, " = ", f.IsFloat() ? "fcmp une " : "icmp ne ", vt, " ", v, ", zeroinitializer"));
  } else if (f.IsBool() || f.IsInt()) {
    const bool fsign = f.IsInt() && !f.IsUnsigned();
    if (t.IsInt()) {
      const int fb = f.IsBool() ? 1 : f.ItemSize() * 8, tb = t.ItemSize() * 8;
      r = emit(tb < fb ? "trunc" : fsign ? "sext" : "zext", ft, v, tt);
    } else if (t.scalar == ScalarType::kBFloat16) {
      r = FromFloat(emit(fsign ? "sitofp" : "uitofp", ft, v, RegType(FloatOf(t))), t);
    } else {
      r = emit(fsign ? "sitofp" : "uitofp", ft, v, tt);
    }
  } else if (t.IsInt()) {  // float -> int
    std::string x = v, xt = ft;
    if (f.scalar == ScalarType::kBFloat16) {
      x = ToFloat(v, f);
      xt = RegType(FloatOf(f));
    }
    r = emit(t.IsUnsigned() ? "fptoui" : "fptosi", xt, x, tt);
  } else {  // float -> float
    if (f.scalar == ScalarType::kBFloat16 || t.scalar == ScalarType::kBFloat16) {
      std::string x = v;  // through float
      if (f.scalar == ScalarType::kBFloat16 || f.scalar == ScalarType::kFloat16) x = ToFloat(v, f);
      else if (f.scalar == ScalarType::kFloat64) x = emit("fptrunc", ft, v, RegType(FloatOf(f)));
      const std::string xf = RegType(FloatOf(f));
      if (t.scalar == ScalarType::kBFloat16) r = FromFloat(x, t);
      else if (t.scalar == ScalarType::kFloat32) r = x;
      else r = emit(t.scalar == ScalarType::kFloat64 ? "fpext" : "fptrunc", xf, x, tt);
    } else {
      r = emit(t.ItemSize() > f.ItemSize() ? "fpext" : "fptrunc", ft, v, tt);
    }
  }
  val_[&u] = r;
  return absl::OkStatus();
}

}  // namespace kiln::codegen::llvm_internal
