// ALU ops, casts and the half/bfloat helpers of the llvm renderer (semantics documented in llvm_ir.h).
#include <iterator>
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

// 2^x in float32 as arithmetic rather than a libm call: a call to exp2f is opaque to LLVM's SLP vectorizer, which
// left every epilogue with an exp scalar (MiniLM's GELU, softmax, the CNN's log-softmax). x = n + f with n = rint(x)
// and |f| <= 1/2; 2^f by its Taylor series to degree 7 (truncation error under 6e-9 relative, a tenth of float's ulp);
// 2^n as two power-of-two factors 2^(n>>1) * 2^(n - (n>>1)), each a normal float, so results from the subnormals to
// the overflow to inf round once, at the last multiply. x is clamped to [-151, 129] first (beyond, the result is 0 or
// inf either way) and a NaN is returned as it came.
std::string Emitter::Exp2F32(DType d, const std::string& x) {
  const int n = d.count;
  const std::string t = RegType(d), i32 = RegType(IntOfWidth(32, n));
  const std::string i1 = RegType(dtypes::kBool.Vec(static_cast<uint16_t>(n)));
  auto lit = [&](double v) { return ConstLiteral(d, Arg(ConstFloat(v))); };
  auto line = [&](const std::string& rhs) {
    std::string r = Tmp();
    Line(absl::StrCat(r, " = ", rhs));
    return r;
  };
  const std::string lo = line(absl::StrCat("fcmp olt ", t, " ", x, ", ", lit(-151.0)));
  const std::string x1 = line(absl::StrCat("select ", i1, " ", lo, ", ", t, " ", lit(-151.0), ", ", t, " ", x));
  const std::string hi = line(absl::StrCat("fcmp ogt ", t, " ", x1, ", ", lit(129.0)));
  const std::string x2 = line(absl::StrCat("select ", i1, " ", hi, ", ", t, " ", lit(129.0), ", ", t, " ", x1));
  const std::string nan = line(absl::StrCat("fcmp uno ", t, " ", x, ", ", x));
  const std::string xc = line(absl::StrCat("select ", i1, " ", nan, ", ", t, " ", lit(0.0), ", ", t, " ", x2));
  const std::string nf = Intrinsic("llvm.rint", d, {xc});
  const std::string f = line(absl::StrCat("fsub ", t, " ", xc, ", ", nf));
  // ln(2)^k / k!, k = 7 down to 0.
  static constexpr double kCoef[] = {1.525273380405984e-05, 1.5403530393381608e-04, 1.3333558146428443e-03,
                                     9.618129107628477e-03,  5.550410866482158e-02,   2.402265069591007e-01,
                                     6.931471805599453e-01,  1.0};
  std::string p = lit(kCoef[0]);
  for (size_t k = 1; k < std::size(kCoef); ++k) {
    const std::string m = line(absl::StrCat("fmul contract ", t, " ", p, ", ", f));
    p = line(absl::StrCat("fadd contract ", t, " ", m, ", ", lit(kCoef[k])));
  }
  const std::string ni = line(absl::StrCat("fptosi ", t, " ", nf, " to ", i32));
  const std::string na = line(absl::StrCat("ashr ", i32, " ", ni, ", ", IntSplat(32, 1, n)));
  const std::string nb = line(absl::StrCat("sub ", i32, " ", ni, ", ", na));
  auto pow2 = [&](const std::string& e) {
    const std::string biased = line(absl::StrCat("add ", i32, " ", e, ", ", IntSplat(32, 127, n)));
    const std::string bits = line(absl::StrCat("shl ", i32, " ", biased, ", ", IntSplat(32, 23, n)));
    return line(absl::StrCat("bitcast ", i32, " ", bits, " to ", t));
  };
  const std::string fa = pow2(na), fb = pow2(nb);
  const std::string r1 = line(absl::StrCat("fmul ", t, " ", p, ", ", fa));
  const std::string r2 = line(absl::StrCat("fmul ", t, " ", r1, ", ", fb));
  return line(absl::StrCat("select ", i1, " ", nan, ", ", t, " ", x, ", ", t, " ", r2));
}

// Only outside reduce loops (epilogues, elementwise kernels): inside one (attention's sum of exp(s - max) * v) the
// noinline call per iteration cost SmolLM2's prefill attention 6.2 ms against 0.67 with libm's exp2f (decode 82 -> 52
// tok/s), so there EXP2 stays the intrinsic.
// The kernel calls 2^x rather than inlining it: an epilogue of 256 outputs with an inline exp each (MiniLM's GELU
// tile) is a block past the CPU compiler's size bound for optimized code (backends/cpu: kMaxOptimizedBlock), and
// compiled unoptimized it ran 4x slower than with scalar library calls. The scalar @kiln_exp2 names 4-, 8- and
// 16-lane variants through "vector-function-abi-variant", so LLVM's SLP vectorizer replaces a bundle of calls with one
// call of the vector body. Each body is Exp2F32's arithmetic, defined once in the module (noinline: the inliner
// runs before the SLP vectorizer) and kept alive for it by @llvm.compiler.used.
std::string Emitter::Exp2CallF32(DType d, const std::string& x) {
  const int n = d.count;
  if (n != 1 && n != 4 && n != 8 && n != 16) return Exp2F32(d, x);
  if (decls_.insert("; kiln_exp2").second) {
    for (int lanes : {1, 4, 8, 16}) {
      const DType v = dtypes::kFloat32.Vec(static_cast<uint16_t>(lanes));
      std::string saved = std::move(body_);
      body_.clear();
      const std::string r = Exp2F32(v, "%x");
      std::string fn = absl::StrCat("define internal ", RegType(v), " @kiln_exp2", lanes == 1 ? "" : absl::StrCat("_v", lanes),
                                    "(", RegType(v), " %x) #2 {\nentry:\n", body_, "  ret ", RegType(v), " ", r, "\n}");
      body_ = std::move(saved);
      decls_.insert(std::move(fn));
    }
    decls_.insert("@llvm.compiler.used = appending global [3 x ptr] [ptr @kiln_exp2_v4, ptr @kiln_exp2_v8, "
                  "ptr @kiln_exp2_v16], section \"llvm.metadata\"");
    decls_.insert("attributes #2 = { noinline nounwind willreturn memory(none) }");
    decls_.insert("attributes #3 = { nounwind willreturn memory(none) \"vector-function-abi-variant\"=\""
                  "_ZGV_LLVM_N4v_kiln_exp2(kiln_exp2_v4),_ZGV_LLVM_N8v_kiln_exp2(kiln_exp2_v8),"
                  "_ZGV_LLVM_N16v_kiln_exp2(kiln_exp2_v16)\" }");
  }
  const std::string t = RegType(d);
  std::string r = Tmp();
  Line(absl::StrCat(r, " = call ", t, " @kiln_exp2", n == 1 ? "" : absl::StrCat("_v", n), "(", t, " ", x,
                    ")", n == 1 ? " #3" : ""));
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
    case Op::EXP2:
      return d.scalar == ScalarType::kFloat32 && !InReduceLoop() ? Exp2CallF32(d, a[0])
                                                                 : Intrinsic("llvm.exp2", d, a);
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
