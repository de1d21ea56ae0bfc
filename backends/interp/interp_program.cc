#include "backends/interp/interp_program.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"

namespace kiln::backends::interp {

struct Inst {
  Op op = Op::NOOP;
  DType dtype;
  int out = -1;    // first lane of the result
  int lanes = 0;   // result lanes
  std::vector<int> src;         // first lane of each source
  std::vector<int> src_lanes;   // lanes of each source
  std::vector<DType> src_dtype;
  Lane cval{};                  // CONST value
  int buf_kind = 0;             // INDEX: 0 = PARAM slot, 1 = DEFINE_REG number
  int64_t buf = -1;
  int index = -1;               // LOAD/STORE: instruction number of the INDEX
  int index_gate = -1;          // INDEX: lane of its gate (-1 = none)
  int gate = -1, alt = -1;      // LOAD: gate/alt lanes; STORE: gate lane
  int jump = -1;                // RANGE -> END, END -> RANGE, IF -> ENDIF
  int special = -1;             // 0 core_id, 1..3 gidx0..2, 4..6 lidx0..2
  int var = -1;                 // DEFINE_VAR: position in the vars list
  std::vector<int64_t> gep;
  bool dot = false;             // WMMA m1n16k4: the CPU's integer dot product, per work-item (no warp)
};

struct InterpProgram::State {
  std::vector<Lane> lanes;
  absl::Span<const runtime::DeviceMemory> bufs;
  std::vector<std::vector<uint8_t>> regs;
  absl::Span<const int64_t> vars;
  int64_t core = 0, gidx[3] = {0, 0, 0}, lidx[3] = {0, 0, 0};
};

InterpProgram::~InterpProgram() = default;

namespace {

absl::Status Bad(const std::string& name, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("INTERP kernel ", name, ": ", why));
}

int SpecialKind(const std::string& s) {
  if (s == "core_id") return 0;
  if (s.size() == 5 && (s.rfind("gidx", 0) == 0 || s.rfind("lidx", 0) == 0) && s[4] >= '0' && s[4] <= '2')
    return (s[0] == 'g' ? 1 : 4) + (s[4] - '0');
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<InterpProgram>> InterpProgram::Create(const codegen::Program& p) {
  std::unique_ptr<InterpProgram> prog(new InterpProgram());
  prog->name_ = p.name;
  prog->threads_ = std::max(1, p.threads);
  const std::string& name = p.name;
  absl::flat_hash_map<const UOp*, int> inst_of;
  std::vector<int> open_ranges, open_ifs;
  int lanes = 0;
  for (size_t pc = 0; pc < p.uops.size(); ++pc) {
    const UOpPtr& u = p.uops[pc];
    if (!u) return Bad(name, "null uop");
    Inst in;
    in.op = u->op();
    in.dtype = u->dtype();
    for (const UOpPtr& s : u->src()) {
      auto it = inst_of.find(s.get());
      if (it == inst_of.end())
        return Bad(name, absl::StrCat(std::string(OpName(u->op())), " at ", pc, " uses a source not defined before it"));
      const Inst& si = prog->insts_[it->second];
      in.src.push_back(si.out);
      in.src_lanes.push_back(si.lanes);
      in.src_dtype.push_back(si.dtype);
    }
    auto value_lanes = [&] {
      in.lanes = u->dtype().count;
      in.out = lanes;
      lanes += in.lanes;
    };
    switch (u->op()) {
      case Op::PARAM: {
        const int64_t* slot = std::get_if<int64_t>(&u->arg());
        if (slot == nullptr || *slot < 0 || *slot > 4096 || !u->dtype().is_ptr) return Bad(name, "bad PARAM");
        if (static_cast<int64_t>(prog->param_dtypes_.size()) <= *slot) prog->param_dtypes_.resize(*slot + 1);
        prog->param_dtypes_[*slot] = u->dtype().Base().Scalar();
        prog->max_slot_ = std::max(prog->max_slot_, *slot);
        in.buf = *slot;
        break;
      }
      case Op::DEFINE_REG:
      case Op::DEFINE_LOCAL: {
        const int64_t* n = std::get_if<int64_t>(&u->arg());
        if (n == nullptr || *n < 0 || *n > (int64_t{1} << 24) || !u->dtype().is_ptr) return Bad(name, "bad DEFINE_REG");
        in.buf = static_cast<int64_t>(prog->reg_sizes_.size());
        in.buf_kind = 1;
        prog->reg_dtypes_.push_back(u->dtype().Base().Scalar());
        prog->reg_sizes_.push_back(*n * u->dtype().count);
        break;
      }
      case Op::AFTER: {
        const Inst& base = prog->insts_[inst_of.at(u->src(0).get())];
        in.out = base.out;
        in.lanes = base.lanes;
        in.buf = base.buf;
        in.buf_kind = base.buf_kind;
        break;
      }
      case Op::INDEX: {
        const Inst& base = prog->insts_[inst_of.at(u->src(0).get())];
        if (base.buf < 0 || (base.op != Op::PARAM && base.op != Op::DEFINE_REG && base.op != Op::DEFINE_LOCAL &&
                             base.op != Op::AFTER))
          return Bad(name, "INDEX is not on a buffer");
        if (!u->src(1)->dtype().IsInt()) return Bad(name, "INDEX needs an integer index");
        in.buf = base.buf;
        in.buf_kind = base.buf_kind;
        if (u->num_src() == 3) in.index_gate = in.src[2];
        in.lanes = 1;
        in.out = lanes;
        lanes += 1;
        break;
      }
      case Op::LOAD:
      case Op::STORE: {
        const Inst& ix = prog->insts_[inst_of.at(u->src(0).get())];
        if (ix.op != Op::INDEX) return Bad(name, absl::StrCat(std::string(OpName(u->op())), " not on an INDEX"));
        in.index = inst_of.at(u->src(0).get());
        if (u->op() == Op::LOAD) {
          if (u->num_src() >= 2) in.alt = in.src[1];
          if (u->num_src() == 3) in.gate = in.src[2];
          if (u->num_src() == 2) return Bad(name, "LOAD with an alt but no gate");
          value_lanes();
        } else {
          if (u->num_src() == 3) in.gate = in.src[2];
          in.lanes = 0;
        }
        break;
      }
      case Op::RANGE:
        if (!u->dtype().IsInt()) return Bad(name, "RANGE needs an integer dtype");
        open_ranges.push_back(static_cast<int>(pc));
        value_lanes();
        break;
      case Op::END: {
        const UOp* r = u->src(u->num_src() - 1).get();
        auto it = inst_of.find(r);
        if (r->op() != Op::RANGE || open_ranges.empty() || open_ranges.back() != it->second)
          return Bad(name, "END does not close the innermost open RANGE");
        in.jump = open_ranges.back();
        prog->insts_[in.jump].jump = static_cast<int>(pc);
        open_ranges.pop_back();
        break;
      }
      case Op::IF:
        open_ifs.push_back(static_cast<int>(pc));
        break;
      case Op::ENDIF:
        if (open_ifs.empty() || inst_of.at(u->src(0).get()) != open_ifs.back())
          return Bad(name, "ENDIF does not close the innermost IF");
        prog->insts_[open_ifs.back()].jump = static_cast<int>(pc);
        open_ifs.pop_back();
        break;
      case Op::CONST: {
        const Arg& a = u->arg();
        if (const auto* f = std::get_if<ConstFloat>(&a)) {
          in.cval.f = u->dtype().IsFloat() ? RoundFloat(u->dtype().scalar, f->value) : 0.0;
          if (!u->dtype().IsFloat()) in.cval = EvalCast(ScalarType::kFloat64, u->dtype().scalar, Lane{.f = f->value});
        } else if (const auto* i = std::get_if<int64_t>(&a)) {
          ScalarType from = u->dtype().IsUnsigned() ? ScalarType::kUInt64 : ScalarType::kInt64;
          in.cval = EvalCast(from, u->dtype().scalar, Lane{.i = *i});
        } else if (const auto* b = std::get_if<bool>(&a)) {
          in.cval = EvalCast(ScalarType::kBool, u->dtype().scalar, Lane{.i = *b ? 1 : 0});
        } else {
          return Bad(name, "CONST without a value");
        }
        value_lanes();
        break;
      }
      case Op::DEFINE_VAR: {
        const auto* v = std::get_if<VarArg>(&u->arg());
        if (v == nullptr) return Bad(name, "DEFINE_VAR without a VarArg");
        for (size_t k = 0; k < p.vars.size(); ++k)
          if (p.vars[k] == u) in.var = static_cast<int>(k);
        if (in.var < 0) return Bad(name, "DEFINE_VAR missing from the program's vars");
        value_lanes();
        break;
      }
      case Op::SPECIAL: {
        const auto* s = std::get_if<std::string>(&u->arg());
        in.special = s == nullptr ? -1 : SpecialKind(*s);
        if (in.special < 0) return Bad(name, "unknown SPECIAL");
        value_lanes();
        break;
      }
      case Op::GEP:
        if (const IntVec* v = ArgIntVec(u->arg())) in.gep = *v;
        if (static_cast<int>(in.gep.size()) != u->dtype().count) return Bad(name, "GEP lanes do not match its dtype");
        for (int64_t l : in.gep)
          if (l < 0 || l >= in.src_lanes[0]) return Bad(name, "GEP lane out of range");
        value_lanes();
        break;
      case Op::VECTORIZE:
        if (static_cast<int>(u->num_src()) != u->dtype().count) return Bad(name, "VECTORIZE arity != width");
        value_lanes();
        break;
      case Op::WMMA: {
        const IntVec* shape = ArgIntVec(u->arg());
        const ScalarType sa = u->src(0)->dtype().scalar, sb = u->src(1)->dtype().scalar;
        if (shape != nullptr && *shape == IntVec{1, 16, 4}) {  // the CPU tensor core (codegen/program.h)
          if (u->dtype() != dtypes::kInt32.Vec(16) || in.src_lanes[0] != 4 || in.src_lanes[1] != 64 ||
              in.src_lanes[2] != 16 ||
              !((sa == ScalarType::kUInt8 && sb == ScalarType::kInt8) ||
                (sa == ScalarType::kInt8 && sb == ScalarType::kUInt8)))
            return Bad(name, "WMMA m1n16k4: only 8-bit x 8-bit (one unsigned) with int32 accumulators");
          in.dot = true;
          value_lanes();
          break;
        }
        if (shape == nullptr || *shape != IntVec{16, 8, 16} || u->dtype().count != 4 || u->dtype().scalar != ScalarType::kFloat32 ||
            in.src_lanes[0] != 8 || in.src_lanes[1] != 4 || in.src_lanes[2] != 4)
          return Bad(name, "WMMA: only m16n8k16 with 8/4/4 fragment lanes and float32 accumulators");
        prog->has_wmma_ = true;
        value_lanes();
        break;
      }
      case Op::BITCAST:
        if (u->src(0)->dtype().ByteSize() != u->dtype().ByteSize()) return Bad(name, "BITCAST between sizes");
        value_lanes();
        break;
      case Op::CAST:
        value_lanes();
        break;
      case Op::NOOP:
      case Op::BARRIER:
      case Op::SINK:
      case Op::GROUP:
        break;
      default:
        if (!IsALU(u->op()))
          return Bad(name, absl::StrCat("op ", std::string(OpName(u->op())), " cannot be interpreted"));
        if (u->dtype().is_ptr || u->dtype().scalar == ScalarType::kVoid) return Bad(name, "ALU op with a bad dtype");
        value_lanes();
        break;
    }
    inst_of[u.get()] = static_cast<int>(pc);
    prog->insts_.push_back(std::move(in));
  }
  if (!open_ranges.empty()) return Bad(name, "RANGE without END");
  if (!open_ifs.empty()) return Bad(name, "IF without ENDIF");
  for (const UOpPtr& v : p.vars) prog->vars_.push_back(std::get<VarArg>(v->arg()));
  prog->num_lanes_ = lanes;
  return prog;
}

absl::Status InterpProgram::RunOne(State& st) const {
  KILN_ASSIGN_OR_RETURN(int stop, RunUntilWmma(st, 0));
  if (stop >= 0) return Bad(name_, "WMMA outside a warp launch");
  return absl::OkStatus();
}

absl::StatusOr<int> InterpProgram::RunUntilWmma(State& st, int start) const {
  std::vector<Lane>& L = st.lanes;
  const int n = static_cast<int>(insts_.size());
  Lane args[3];
  auto mem = [&](const Inst& ix, int64_t idx, int count, const char* what, uint8_t** ptr,
                 DType* elem) -> absl::Status {
    size_t nbytes;
    uint8_t* base;
    if (ix.buf_kind == 0) {
      *elem = param_dtypes_[ix.buf];
      base = static_cast<uint8_t*>(st.bufs[ix.buf].ptr);
      nbytes = st.bufs[ix.buf].nbytes;
    } else {
      *elem = reg_dtypes_[ix.buf];
      base = st.regs[ix.buf].data();
      nbytes = st.regs[ix.buf].size();
    }
    const int64_t isz = elem->ItemSize();
    const int64_t nel = static_cast<int64_t>(nbytes) / isz;
    if (idx < 0 || idx > nel - count || base == nullptr)
      return absl::OutOfRangeError(absl::StrCat("INTERP kernel ", name_, ": ", what, " out of bounds: ",
                                                ix.buf_kind == 0 ? "buffer slot " : "register ", ix.buf, " index ",
                                                idx, " size ", nel));
    *ptr = base + idx * isz;
    return absl::OkStatus();
  };
  for (int pc = start; pc < n; ++pc) {
    const Inst& in = insts_[pc];
    switch (in.op) {
      case Op::WMMA: {
        if (!in.dot) return pc;
        // D[i] = C[i] + sum_j A[j] * B[16j + i], exact products, int32 wrapping (codegen/program.h).
        for (int i = 0; i < 16; ++i) {
          uint32_t d = static_cast<uint32_t>(L[in.src[2] + i].i);
          for (int j = 0; j < 4; ++j)
            d += static_cast<uint32_t>(L[in.src[0] + j].i * L[in.src[1] + 16 * j + i].i);
          L[in.out + i].i = static_cast<int32_t>(d);
        }
        break;
      }
      case Op::CONST:
        for (int l = 0; l < in.lanes; ++l) L[in.out + l] = in.cval;
        break;
      case Op::DEFINE_VAR: L[in.out].i = st.vars[in.var]; break;
      case Op::SPECIAL:
        L[in.out].i = in.special == 0 ? st.core : in.special <= 3 ? st.gidx[in.special - 1] : st.lidx[in.special - 4];
        break;
      case Op::RANGE:
        L[in.out].i = 0;
        if (L[in.src[0]].i <= 0) pc = in.jump;  // skip the body and its END
        break;
      case Op::END: {
        const Inst& r = insts_[in.jump];
        if (++L[r.out].i < L[r.src[0]].i) pc = in.jump;
        break;
      }
      case Op::IF:
        if (L[in.src[0]].i == 0) pc = in.jump;
        break;
      case Op::INDEX: L[in.out].i = L[in.src[1]].i; break;
      case Op::LOAD: {
        const Inst& ix = insts_[in.index];
        const bool off = (in.gate >= 0 && L[in.gate].i == 0) || (ix.index_gate >= 0 && L[ix.index_gate].i == 0);
        if (off) {
          for (int l = 0; l < in.lanes; ++l) {
            if (in.alt >= 0) L[in.out + l] = L[in.alt + (in.src_lanes[1] == 1 ? 0 : l)];
            else L[in.out + l].i = 0, L[in.out + l].f = 0.0;
          }
          break;
        }
        uint8_t* ptr;
        DType elem;
        KILN_RETURN_IF_ERROR(mem(ix, L[ix.out].i, in.lanes, "LOAD", &ptr, &elem));
        for (int l = 0; l < in.lanes; ++l) {
          Lane v = LaneFromBytes(elem.scalar, ptr + l * elem.ItemSize());
          L[in.out + l] = elem.scalar == in.dtype.scalar ? v : EvalCast(elem.scalar, in.dtype.scalar, v);
        }
        break;
      }
      case Op::STORE: {
        const Inst& ix = insts_[in.index];
        if ((in.gate >= 0 && L[in.gate].i == 0) || (ix.index_gate >= 0 && L[ix.index_gate].i == 0)) break;
        const int count = in.src_lanes[1];
        uint8_t* ptr;
        DType elem;
        KILN_RETURN_IF_ERROR(mem(ix, L[ix.out].i, count, "STORE", &ptr, &elem));
        const ScalarType vs = in.src_dtype[1].scalar;
        for (int l = 0; l < count; ++l) {
          Lane v = L[in.src[1] + l];
          if (vs != elem.scalar) v = EvalCast(vs, elem.scalar, v);
          LaneToBytes(elem.scalar, v, ptr + l * elem.ItemSize());
        }
        break;
      }
      case Op::VECTORIZE:
        for (int l = 0; l < in.lanes; ++l) L[in.out + l] = L[in.src[l]];
        break;
      case Op::GEP:
        for (int l = 0; l < in.lanes; ++l) L[in.out + l] = L[in.src[0] + in.gep[l]];
        break;
      case Op::CAST:
        for (int l = 0; l < in.lanes; ++l)
          L[in.out + l] = EvalCast(in.src_dtype[0].scalar, in.dtype.scalar, L[in.src[0] + (in.src_lanes[0] == 1 ? 0 : l)]);
        break;
      case Op::BITCAST: {
        uint8_t bytes[256];
        const DType sd = in.src_dtype[0];
        if (sd.ByteSize() > 256) return Bad(name_, "BITCAST too wide");
        for (int l = 0; l < sd.count; ++l) LaneToBytes(sd.scalar, L[in.src[0] + l], bytes + l * sd.ItemSize());
        for (int l = 0; l < in.lanes; ++l)
          L[in.out + l] = LaneFromBytes(in.dtype.scalar, bytes + l * in.dtype.ItemSize());
        break;
      }
      case Op::PARAM:
      case Op::DEFINE_REG:
      case Op::DEFINE_LOCAL:
      case Op::AFTER:
      case Op::ENDIF:
      case Op::NOOP:
      case Op::BARRIER:
      case Op::SINK:
      case Op::GROUP:
        break;
      default: {
        // ALU: operands in the sources' dtype (WHERE: the branches'), lane-wise with scalar broadcast.
        const ScalarType s = in.op == Op::WHERE ? in.src_dtype[1].scalar : in.src_dtype[0].scalar;
        const size_t ns = in.src.size();
        for (int l = 0; l < in.lanes; ++l) {
          for (size_t k = 0; k < ns && k < 3; ++k) args[k] = L[in.src[k] + (in.src_lanes[k] == 1 ? 0 : l)];
          L[in.out + l] = EvalAlu(in.op, s, args);
        }
        break;
      }
    }
  }
  return -1;
}

// PTX ISA "Matrix Fragments for mma.m16n8k16" (.f16/.bf16 A and B, .f32 C and D); g = lane / 4, t = lane % 4.
void InterpProgram::Wmma(const Inst& in, State* warp) const {
  double a[16][16], b[16][8], c[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const std::vector<Lane>& L = warp[lane].lanes;
    const int g = lane / 4, t = lane % 4;
    for (int j = 0; j < 8; ++j) a[g + 8 * ((j >> 1) & 1)][2 * t + (j & 1) + 8 * (j >> 2)] = L[in.src[0] + j].f;
    for (int j = 0; j < 4; ++j) b[2 * t + (j & 1) + 8 * (j >> 1)][g] = L[in.src[1] + j].f;
    for (int i = 0; i < 4; ++i) c[g + 8 * (i >> 1)][2 * t + (i & 1)] = L[in.src[2] + i].f;
  }
  for (int lane = 0; lane < 32; ++lane) {
    std::vector<Lane>& L = warp[lane].lanes;
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
      double d = c[row][col];
      for (int k = 0; k < 16; ++k) d += a[row][k] * b[k][col];
      L[in.out + i].f = RoundFloat(ScalarType::kFloat32, d);
    }
  }
}

absl::Status InterpProgram::LaunchWarps(State& proto, const runtime::LaunchDims& dims) const {
  const int64_t items = dims.local[0] * dims.local[1] * dims.local[2];
  if (items % 32 != 0 || items > 1024)
    return Bad(name_, absl::StrCat("WMMA needs work-groups of whole warps (32 work-items), got ", items));
  std::vector<State> st(items);
  std::vector<int> pcs(items);
  for (proto.gidx[2] = 0; proto.gidx[2] < dims.global[2]; ++proto.gidx[2])
    for (proto.gidx[1] = 0; proto.gidx[1] < dims.global[1]; ++proto.gidx[1])
      for (proto.gidx[0] = 0; proto.gidx[0] < dims.global[0]; ++proto.gidx[0]) {
        for (int64_t w = 0; w < items; ++w) {
          State& s = st[w];
          s.lanes.assign(num_lanes_, Lane{});
          s.bufs = proto.bufs;
          s.vars = proto.vars;
          s.core = 0;
          for (int d = 0; d < 3; ++d) s.gidx[d] = proto.gidx[d];
          s.lidx[0] = w % dims.local[0];
          s.lidx[1] = (w / dims.local[0]) % dims.local[1];
          s.lidx[2] = w / (dims.local[0] * dims.local[1]);
          s.regs.assign(reg_sizes_.size(), {});
          for (size_t r = 0; r < reg_sizes_.size(); ++r) s.regs[r].assign(reg_sizes_[r] * reg_dtypes_[r].ItemSize(), 0);
          pcs[w] = 0;
        }
        for (;;) {
          for (int64_t w = 0; w < items; ++w) {
            KILN_ASSIGN_OR_RETURN(pcs[w], RunUntilWmma(st[w], pcs[w]));
          }
          if (std::all_of(pcs.begin(), pcs.end(), [](int p) { return p < 0; })) break;
          if (!std::all_of(pcs.begin(), pcs.end(), [&](int p) { return p == pcs[0]; }))
            return Bad(name_, "WMMA not reached by every work-item of the work-group");
          for (int64_t w0 = 0; w0 < items; w0 += 32) Wmma(insts_[pcs[0]], &st[w0]);
          for (int& p : pcs) ++p;
        }
      }
  return absl::OkStatus();
}

absl::StatusOr<double> InterpProgram::Launch(absl::Span<const runtime::DeviceMemory> bufs,
                                             absl::Span<const int64_t> vars, const runtime::LaunchDims& dims,
                                             bool timed) {
  const auto t0 = std::chrono::steady_clock::now();
  if (static_cast<int64_t>(bufs.size()) <= max_slot_)
    return Bad(name_, absl::StrCat("needs ", max_slot_ + 1, " buffers, got ", bufs.size()));
  if (vars.size() != vars_.size())
    return Bad(name_, absl::StrCat("needs ", vars_.size(), " vars, got ", vars.size()));
  for (size_t k = 0; k < vars.size(); ++k) {
    if (vars[k] < vars_[k].min || vars[k] > vars_[k].max)
      return Bad(name_, absl::StrCat("var ", k, " = ", vars[k], " outside [", vars_[k].min, ", ", vars_[k].max, "]"));
  }
  State st;
  st.lanes.resize(num_lanes_);
  st.bufs = bufs;
  st.vars = vars;
  const int threads = dims.threads > 1 ? dims.threads : threads_;
  for (int64_t d : {dims.global[0], dims.global[1], dims.global[2], dims.local[0], dims.local[1], dims.local[2]})
    if (d < 1 || d > (int64_t{1} << 31)) return Bad(name_, "bad launch dims");
  if (has_wmma_) {
    if (threads > 1) return Bad(name_, "WMMA with THREAD");
    KILN_RETURN_IF_ERROR(LaunchWarps(st, dims));
    if (!timed) return 0.0;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  for (st.gidx[2] = 0; st.gidx[2] < dims.global[2]; ++st.gidx[2])
    for (st.gidx[1] = 0; st.gidx[1] < dims.global[1]; ++st.gidx[1])
      for (st.gidx[0] = 0; st.gidx[0] < dims.global[0]; ++st.gidx[0])
        for (st.lidx[2] = 0; st.lidx[2] < dims.local[2]; ++st.lidx[2])
          for (st.lidx[1] = 0; st.lidx[1] < dims.local[1]; ++st.lidx[1])
            for (st.lidx[0] = 0; st.lidx[0] < dims.local[0]; ++st.lidx[0])
              for (st.core = 0; st.core < threads; ++st.core) {
                st.regs.assign(reg_sizes_.size(), {});
                for (size_t r = 0; r < reg_sizes_.size(); ++r)
                  st.regs[r].assign(reg_sizes_[r] * reg_dtypes_[r].ItemSize(), 0);
                KILN_RETURN_IF_ERROR(RunOne(st));
              }
  if (!timed) return 0.0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace kiln::backends::interp
