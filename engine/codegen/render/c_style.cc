// C-style renderers: the statement walk over the linear program (semantics in c_style.h).
#include "engine/codegen/render/c_style.h"

#include <algorithm>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/base/status.h"
#include "engine/codegen/render/c_style_emitter.h"

namespace kiln::codegen {
namespace cstyle_internal {

std::string Emitter::ScalarName(ScalarType s) const {
  const bool cl = Cl();
  switch (s) {
    case ScalarType::kBool:
      return "bool";
    case ScalarType::kInt8:
      return cl ? "char" : "signed char";
    case ScalarType::kUInt8:
      return cl ? "uchar" : "unsigned char";
    case ScalarType::kInt16:
      return "short";
    case ScalarType::kUInt16:
      return cl ? "ushort" : "unsigned short";
    case ScalarType::kInt32:
      return "int";
    case ScalarType::kUInt32:
      return cl ? "uint" : "unsigned int";
    case ScalarType::kInt64:
      return cl ? "long" : "long long";
    case ScalarType::kUInt64:
      return cl ? "ulong" : "unsigned long long";
    case ScalarType::kFloat16:
    case ScalarType::kBFloat16:
    case ScalarType::kFloat32:
      return "float";
    case ScalarType::kFloat64:
      return "double";
    default:
      return "void";
  }
}

std::string Emitter::RegType(DType d) const {
  std::string s = ScalarName(d.scalar);
  if (d.count > 1) {
    // Vector types exist for the non-bool scalars whose names are single words in both dialects.
    std::string base = s;
    if (!Cl()) {
      static const std::pair<const char*, const char*> kCuda[] = {
          {"signed char", "char"},      {"unsigned char", "uchar"},
          {"unsigned short", "ushort"}, {"unsigned int", "uint"},
          {"long long", "longlong"},    {"unsigned long long", "ulonglong"}};
      for (const auto& [from, to] : kCuda)
        if (s == from) base = to;
    }
    return absl::StrCat(base, d.count);
  }
  return s;
}

std::string Emitter::MemType(DType d) const {
  if (d.scalar == ScalarType::kBool) return ScalarName(ScalarType::kUInt8);
  if (IsHalfLike(d)) return ScalarName(ScalarType::kUInt16);
  return RegType(d);
}

std::string Emitter::UnsignedOf(DType d) const {
  switch (d.ItemSize()) {
    case 1:
      return ScalarName(ScalarType::kUInt8);
    case 2:
      return ScalarName(ScalarType::kUInt16);
    case 4:
      return ScalarName(ScalarType::kUInt32);
    default:
      return ScalarName(ScalarType::kUInt64);
  }
}

void Emitter::Def(size_t i, const UOp& u, const std::string& type, const std::string& expr) {
  const std::string n = Name(i);
  Line(absl::StrCat(type, " ", n, " = ", expr, ";"));
  val_[&u] = n;
}

std::string Emitter::Ref(const UOp* u) {
  if (u->op() == Op::CONST) return Const(u->dtype(), u->arg());
  auto it = val_.find(u);
  if (it != val_.end()) return it->second;
  if (err_.ok()) {
    err_ = absl::InvalidArgumentError(
        absl::StrCat("c-style renderer: ", std::string(OpName(u->op())),
                     " is used before it is defined in the linear program"));
  }
  return "0";
}

absl::Status Emitter::EmitSpecial(size_t i, const UOp& u) {
  const std::string& s = u.ArgStr();
  const bool group = s.rfind("gidx", 0) == 0, local = s.rfind("lidx", 0) == 0,
             global = s.rfind("idx", 0) == 0;
  const size_t digits = group || local ? 4 : 3;
  if ((!group && !local && !global) || s.size() != digits + 1 || s[digits] < '0' || s[digits] > '2')
    return absl::UnimplementedError(
        "c-style renderer: SPECIAL must be gidx0..2, lidx0..2 or idx0..2");
  const int k = s[digits] - '0';
  std::string e;
  if (Cl()) {
    e = absl::StrCat(group ? "get_group_id(" : local ? "get_local_id(" : "get_global_id(", k, ")");
  } else {
    const char* dim = k == 0 ? "x" : k == 1 ? "y" : "z";
    e = group   ? absl::StrCat("blockIdx.", dim)
        : local ? absl::StrCat("threadIdx.", dim)
                : absl::StrCat("(blockIdx.", dim, "*blockDim.", dim, "+threadIdx.", dim, ")");
  }
  Def(i, u, RegType(u.dtype()), absl::StrCat("(", RegType(u.dtype()), ")", e));
  return absl::OkStatus();
}

namespace {
// The gate of a LOAD (src 2) / STORE (src 2), or of a still-gated INDEX; null when ungated.
const UOp* GateOf(const UOp& mem_op) {
  if (mem_op.num_src() > 2) return mem_op.src(2).get();
  const UOp* idx = mem_op.src(0).get();
  if (idx->op() == Op::INDEX && idx->num_src() == 3) return idx->src(2).get();
  return nullptr;
}
}  // namespace

absl::Status Emitter::EmitLoad(size_t i, const UOp& u) {
  const std::string ptr = Ref(u.src(0).get());
  const DType d = u.dtype();
  const UOp* ix = u.src(0).get();
  const bool global =
      !(ix->op() == Op::INDEX && ix->src(0)->dtype().addrspace != AddrSpace::kGlobal);
  std::string v;
  if (!global) {
    v = absl::StrCat("*", ptr);
  } else if (d.scalar == ScalarType::kBool) {
    v = absl::StrCat("(*", ptr, " != 0)");
  } else if (IsHalfLike(d)) {
    if (d.count > 1)
      return absl::UnimplementedError("c-style renderer: vector loads of half/bfloat16");
    Need(d.scalar == ScalarType::kFloat16 ? kHalf : kBFloat);
    v = absl::StrCat(d.scalar == ScalarType::kFloat16 ? "kiln_h2f(*" : "kiln_b2f(*", ptr, ")");
  } else {
    v = absl::StrCat("*", ptr);
  }
  if (const UOp* gate = GateOf(u)) {
    const std::string alt = u.num_src() >= 2 ? Ref(u.src(1).get()) : Const(d, Arg(int64_t{0}));
    v = absl::StrCat(Ref(gate), " ? ", v, " : ",
                     alt);  // the untaken side of ?: never touches memory
  }
  Def(i, u, RegType(d), v);
  return absl::OkStatus();
}

absl::Status Emitter::EmitStore(const UOp& u) {
  const std::string ptr = Ref(u.src(0).get());
  const DType vd = u.src(1)->dtype();
  std::string v = Ref(u.src(1).get());
  const bool to_reg =
      u.src(0)->op() == Op::INDEX && u.src(0)->src(0)->dtype().addrspace == AddrSpace::kReg;
  const bool to_local =
      u.src(0)->op() == Op::INDEX && u.src(0)->src(0)->dtype().addrspace == AddrSpace::kLocal;
  if (vd.scalar == ScalarType::kBool && !to_reg && !to_local) {
    v = absl::StrCat("(", MemType(vd), ")", v);
  } else if (IsHalfLike(vd) && !to_reg && !to_local) {
    if (vd.count > 1)
      return absl::UnimplementedError("c-style renderer: vector stores of half/bfloat16");
    Need(vd.scalar == ScalarType::kFloat16 ? kHalf : kBFloat);
    v = absl::StrCat(vd.scalar == ScalarType::kFloat16 ? "kiln_f2h(" : "kiln_f2b(", v, ")");
  }
  std::string st = absl::StrCat("*", ptr, " = ", v, ";");
  if (const UOp* gate = GateOf(u)) st = absl::StrCat("if (", Ref(gate), ") ", st);
  Line(st);
  return absl::OkStatus();
}

absl::Status Emitter::EmitVector(size_t i, const UOp& u) {
  const DType d = u.dtype();
  if (u.op() == Op::VECTORIZE) {
    if (IsHalfLike(d) && d.count > 1) {  // a WMMA fragment: EmitWmma packs the lanes itself
      std::vector<const UOp*> lanes;
      for (const UOpPtr& s : u.src()) {
        Ref(s.get());  // defined before use
        lanes.push_back(s.get());
      }
      half_vec_[&u] = std::move(lanes);
      return absl::OkStatus();
    }
    if (IsHalfLike(d) || d.IsBool())
      return absl::UnimplementedError("c-style renderer: VECTORIZE of bool/half");
    std::vector<std::string> parts;
    for (const UOpPtr& s : u.src()) parts.push_back(Ref(s.get()));
    const std::string t = RegType(d);
    Def(i, u, t,
        Cl() ? absl::StrCat("(", t, ")(", absl::StrJoin(parts, ", "), ")")
             : absl::StrCat("make_", t, "(", absl::StrJoin(parts, ", "), ")"));
    return absl::OkStatus();
  }
  // GEP: one lane -> scalar, several -> a new vector.
  const IntVec& lanes = u.ArgVec();
  const std::string v = Ref(u.src(0).get());
  static const char* const kLane[] = {"x", "y", "z", "w"};
  auto lane = [&](int64_t l) -> std::string {
    if (Cl()) return absl::StrCat(v, ".s", absl::StrFormat("%x", l));
    return l < 4 ? absl::StrCat(v, ".", kLane[l]) : "0";
  };
  for (int64_t l : lanes)
    if (l < 0 || l >= u.src(0)->dtype().count || (!Cl() && l >= 4))
      return absl::InvalidArgumentError("c-style renderer: GEP lane out of range");
  if (lanes.size() == 1) {
    Def(i, u, RegType(d), lane(lanes[0]));
    return absl::OkStatus();
  }
  std::vector<std::string> parts;
  for (int64_t l : lanes) parts.push_back(lane(l));
  const std::string t = RegType(d);
  Def(i, u, t,
      Cl() ? absl::StrCat("(", t, ")(", absl::StrJoin(parts, ", "), ")")
           : absl::StrCat("make_", t, "(", absl::StrJoin(parts, ", "), ")"));
  return absl::OkStatus();
}

// WMMA(A, B, C) m16n8k16 on CUDA: one mma.sync through an inline-PTX helper. A and B are half-like VECTORIZEs
// (their float registers are narrowed to 16-bit patterns and packed two per 32-bit register), C a float4.
absl::Status Emitter::EmitWmma(size_t i, const UOp& u) {
  const IntVec* shape = ArgIntVec(u.arg());
  if (Cl()) return absl::UnimplementedError("c-style renderer: WMMA on OpenCL");
  if (shape == nullptr || *shape != IntVec{16, 8, 16} || u.dtype() != DType(ScalarType::kFloat32).Vec(4))
    return absl::UnimplementedError("c-style renderer: WMMA other than m16n8k16 with float accumulators");
  const UOp* a = u.src(0).get();
  const UOp* b = u.src(1).get();
  auto ia = half_vec_.find(a), ib = half_vec_.find(b);
  if (ia == half_vec_.end() || ib == half_vec_.end() || ia->second.size() != 8 || ib->second.size() != 4 ||
      a->dtype().scalar != b->dtype().scalar)
    return absl::InvalidArgumentError("c-style renderer: WMMA needs 8- and 4-lane half/bfloat16 VECTORIZE fragments");
  const bool bf = a->dtype().scalar == ScalarType::kBFloat16;
  Need(bf ? kBFloat : kHalf);
  Need(bf ? kMmaBF16 : kMmaF16);
  auto pack = [&](const std::vector<const UOp*>& v, size_t j) {
    return absl::StrCat("(", HalfBits(v[j]), " | (", HalfBits(v[j + 1]), " << 16))");
  };
  std::vector<std::string> args;
  for (size_t j = 0; j < 8; j += 2) args.push_back(pack(ia->second, j));
  for (size_t j = 0; j < 4; j += 2) args.push_back(pack(ib->second, j));
  args.push_back(Ref(u.src(2).get()));
  Def(i, u, "float4", absl::StrCat(bf ? "kiln_mma_bf16(" : "kiln_mma_f16(", absl::StrJoin(args, ", "), ")"));
  return absl::OkStatus();
}

// A fragment lane as its 16-bit pattern. A lane that is a global LOAD of that dtype re-reads the stored bits (the
// compiler merges the two reads and drops the unused widening), so fragments skip the float round trip.
std::string Emitter::HalfBits(const UOp* lane) {
  const char* f2 = lane->dtype().scalar == ScalarType::kBFloat16 ? "kiln_f2b(" : "kiln_f2h(";
  const UOp* ix = lane->op() == Op::LOAD ? lane->src(0).get() : nullptr;
  if (ix != nullptr && ix->op() == Op::INDEX && ix->src(0)->dtype().addrspace == AddrSpace::kGlobal &&
      ix->src(0)->dtype().scalar == lane->dtype().scalar && lane->dtype().count == 1) {
    std::string bits = absl::StrCat("(unsigned int)(*", Ref(ix), ")");
    if (const UOp* gate = GateOf(*lane)) {
      const std::string alt =
          lane->num_src() >= 2 ? absl::StrCat(f2, Ref(lane->src(1).get()), ")") : std::string("0u");
      bits = absl::StrCat("(", Ref(gate), " ? ", bits, " : (unsigned int)", alt, ")");
    }
    return bits;
  }
  return absl::StrCat("(unsigned int)", f2, Ref(lane), ")");
}

absl::Status Emitter::EmitOne(size_t i, const UOp& u) {
  if (u.dtype().Base().scalar == ScalarType::kIndex)
    return absl::InvalidArgumentError(
        absl::StrCat("c-style renderer: index dtype reached the renderer (",
                     std::string(OpName(u.op())), "); codegen lowers it"));
  if (u.dtype().scalar == ScalarType::kFloat64) need_fp64_ = true;
  switch (u.op()) {
    case Op::CONST:
    case Op::SINK:
    case Op::NOOP:
    case Op::GROUP:
      return absl::OkStatus();
    case Op::BARRIER:
      Line(Cl() ? "barrier(CLK_LOCAL_MEM_FENCE);" : "__syncthreads();");
      return absl::OkStatus();
    case Op::AFTER:
      val_[&u] = Ref(u.src(0).get());
      return absl::OkStatus();
    case Op::PARAM:
      if (u.ArgInt() < 0 || u.ArgInt() > 4096)
        return absl::InvalidArgumentError("c-style renderer: bad PARAM slot");
      val_[&u] = absl::StrCat("data", u.ArgInt());
      return absl::OkStatus();
    case Op::DEFINE_VAR: {
      auto it = std::find(p_.vars.begin(), p_.vars.end(), &u);
      if (it == p_.vars.end())
        return absl::InvalidArgumentError(
            "c-style renderer: DEFINE_VAR missing from Program::vars");
      Def(i, u, RegType(u.dtype()),
          absl::StrCat("(", RegType(u.dtype()), ")var", it - p_.vars.begin()));
      return absl::OkStatus();
    }
    case Op::SPECIAL:
      return EmitSpecial(i, u);
    case Op::DEFINE_REG:
    case Op::DEFINE_LOCAL: {
      const bool local = u.op() == Op::DEFINE_LOCAL;
      const std::string n = absl::StrCat(local ? "temp" : "acc", i);
      const DType e = u.dtype().Base();
      Line(absl::StrCat(local ? (Cl() ? "__local " : "__shared__ ") : "", RegType(e), " ", n, "[",
                        std::max<int64_t>(1, u.ArgInt()), "];"));
      val_[&u] = n;
      return absl::OkStatus();
    }
    case Op::INDEX: {
      const std::string base = Ref(u.src(0).get());
      std::string p = absl::StrCat("(", base, "+", Ref(u.src(1).get()), ")");
      if (u.dtype().count > 1) {  // a contiguous vector access at an element offset
        const std::string space =
            u.src(0)->dtype().addrspace == AddrSpace::kLocal ? "__local " : "__global ";
        p = absl::StrCat("((", Cl() ? space : "", RegType(u.dtype().Base()), "*)", p, ")");
      }
      val_[&u] = p;
      return absl::OkStatus();
    }
    case Op::LOAD:
      return EmitLoad(i, u);
    case Op::STORE:
      return EmitStore(u);
    case Op::RANGE: {
      const std::string t = RegType(u.dtype()), n = Name(i);
      Line(absl::StrCat("for (", t, " ", n, " = 0; ", n, " < ", Ref(u.src(0).get()), "; ", n,
                        "++) {"));
      val_[&u] = n;
      open_.push_back(&u);
      ++depth_;
      return absl::OkStatus();
    }
    case Op::IF:
      Line(absl::StrCat("if (", Ref(u.src(0).get()), ") {"));
      open_.push_back(&u);
      ++depth_;
      return absl::OkStatus();
    case Op::END:
    case Op::ENDIF: {
      const UOp* closes = u.op() == Op::END ? u.src(u.num_src() - 1).get() : u.src(0).get();
      if (open_.empty() || open_.back() != closes)
        return absl::InvalidArgumentError(
            "c-style renderer: END/ENDIF does not close the innermost open block");
      open_.pop_back();
      --depth_;
      Line("}");
      return absl::OkStatus();
    }
    case Op::VECTORIZE:
    case Op::GEP:
      return EmitVector(i, u);
    case Op::WMMA:
      return EmitWmma(i, u);
    case Op::CAST:
    case Op::BITCAST: {
      KILN_ASSIGN_OR_RETURN(std::string e, Cast(u));
      Def(i, u, RegType(u.dtype()), e);
      return absl::OkStatus();
    }
    default:
      if (IsALU(u.op())) {
        KILN_ASSIGN_OR_RETURN(std::string e, Alu(u));
        Def(i, u, RegType(u.dtype()), e);
        return absl::OkStatus();
      }
      return absl::UnimplementedError(
          absl::StrCat("c-style renderer: op ", std::string(OpName(u.op())), " is not supported"));
  }
}

absl::StatusOr<std::string> Emitter::Run() {
  if (!IsValidKernelName(p_.name))
    return absl::InvalidArgumentError(
        "c-style renderer: kernel name must be a generated identifier");
  int64_t nbufs = static_cast<int64_t>(p_.buffers.size());
  for (const BufferParam& b : p_.buffers) nbufs = std::max(nbufs, b.slot + 1);
  absl::flat_hash_map<int64_t, DType> slot_dtype;
  for (const BufferParam& b : p_.buffers) slot_dtype[b.slot] = b.dtype;
  for (const UOpPtr& u : p_.uops) {
    if (u->op() == Op::PARAM) {
      if (u->ArgInt() < 0 || u->ArgInt() > 4096)
        return absl::InvalidArgumentError("c-style renderer: bad PARAM slot");
      nbufs = std::max(nbufs, u->ArgInt() + 1);
      slot_dtype[u->ArgInt()] = u->dtype().Base();
    }
  }
  for (const UOpPtr& v : p_.vars) {
    if (v->op() != Op::DEFINE_VAR || (v->dtype() != dtypes::kInt32 && v->dtype() != dtypes::kInt64))
      return absl::InvalidArgumentError(
          "c-style renderer: Program::vars must be int32/int64 DEFINE_VARs");
  }
  local_threads_ = std::max<int64_t>(1, p_.local_size[0] * p_.local_size[1] * p_.local_size[2]);
  for (size_t i = 0; i < p_.uops.size(); ++i) {
    KILN_RETURN_IF_ERROR(EmitOne(i, *p_.uops[i]));
    KILN_RETURN_IF_ERROR(err_);
  }
  if (!open_.empty())
    return absl::InvalidArgumentError("c-style renderer: RANGE/IF without a matching END/ENDIF");

  std::vector<std::string> params;
  for (int64_t s = 0; s < nbufs; ++s) {
    auto it = slot_dtype.find(s);
    const DType d = it == slot_dtype.end() ? dtypes::kUInt8 : it->second;
    if (d.scalar == ScalarType::kFloat64) need_fp64_ = true;
    params.push_back(absl::StrCat(Cl() ? "__global " : "", MemType(d), "* data", s));
  }
  for (size_t k = 0; k < p_.vars.size(); ++k)
    params.push_back(absl::StrCat(ScalarName(ScalarType::kInt64), " var", k));
  std::string out = absl::StrCat(
      Cl() ? "// kiln opencl renderer: kernel " : "// kiln cuda renderer: kernel ", p_.name, "\n");
  if (Cl() && need_fp64_) absl::StrAppend(&out, "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n");
  absl::StrAppend(&out, Preamble());
  if (Cl()) {
    absl::StrAppend(&out, "__kernel void ", p_.name, "(", absl::StrJoin(params, ", "), ") {\n");
  } else {
    absl::StrAppend(&out, "extern \"C\" __global__ void __launch_bounds__(", local_threads_, ") ",
                    p_.name, "(", absl::StrJoin(params, ", "), ") {\n");
  }
  absl::StrAppend(&out, body_, "}\n");
  return out;
}

}  // namespace cstyle_internal

CStyleRenderer::CStyleRenderer(CDialect dialect) : dialect_(dialect) {
  caps_.has_local = true;
  caps_.has_threads = false;
  caps_.supports_half = true;
  caps_.supports_bfloat16 = true;
  caps_.vector_bytes = 16;
  caps_.local_max = dialect == CDialect::kCuda ? 1024 : 256;  // 256: what every OpenCL GPU accepts
  if (dialect == CDialect::kCuda) {
    caps_.global_max[0] = (int64_t{1} << 31) - 1;
    caps_.global_max[1] = 65535;
    caps_.global_max[2] = 65535;
    caps_.tensor_cores = CudaTensorCores();
  } else {
    caps_.global_max[0] = caps_.global_max[1] = caps_.global_max[2] = (int64_t{1} << 31) - 1;
  }
}

std::string CStyleRenderer::name() const {
  return dialect_ == CDialect::kOpenCL ? "opencl" : "cuda";
}

absl::StatusOr<std::string> CStyleRenderer::Render(const Program& program) const {
  cstyle_internal::Emitter e(program, dialect_);
  return e.Run();
}

}  // namespace kiln::codegen
