#include "engine/codegen/render/llvm_ir.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/base/cpu_features.h"
#include "engine/base/status.h"
#include "engine/codegen/render/llvm_ir_emitter.h"

namespace kiln::codegen {
namespace {

// Rounds |v| (with its sign) to a binary float with `ebits` exponent and `mbits` mantissa bits, nearest even.
uint16_t RoundToSmallFloat(double v, int ebits, int mbits) {
  const uint32_t sign = std::signbit(v) ? (1u << (ebits + mbits)) : 0u;
  const uint32_t exp_all = ((1u << ebits) - 1u) << mbits;
  if (std::isnan(v)) return static_cast<uint16_t>(sign | exp_all | (1u << (mbits - 1)));
  if (std::isinf(v)) return static_cast<uint16_t>(sign | exp_all);
  double a = std::fabs(v);
  if (a == 0.0) return static_cast<uint16_t>(sign);
  const int bias = (1 << (ebits - 1)) - 1;
  int e = 0;
  std::frexp(a, &e);
  const int exp2 = e - 1;  // a = 1.xxx * 2^exp2
  const int emin = 1 - bias;
  const int ulp_exp = std::max(exp2, emin) - mbits;
  if (exp2 > bias + 1) return static_cast<uint16_t>(sign | exp_all);  // far beyond the largest finite value
  // a / 2^ulp_exp is exact (power-of-two scaling of a value below 2^(mbits+1)); round it to nearest even.
  uint64_t q = static_cast<uint64_t>(std::nearbyint(std::ldexp(a, -ulp_exp)));
  if (exp2 < emin) return static_cast<uint16_t>(sign | q);  // subnormal (q == 2^mbits is the smallest normal)
  int biased = exp2 + bias;
  if (q == (uint64_t{1} << (mbits + 1))) {
    q >>= 1;
    ++biased;
  }
  if (biased >= (1 << ebits) - 1) return static_cast<uint16_t>(sign | exp_all);
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(biased) << mbits) |
                               static_cast<uint32_t>(q - (uint64_t{1} << mbits)));
}

}  // namespace

uint16_t DoubleToHalfBits(double v) { return RoundToSmallFloat(v, 5, 10); }
uint16_t DoubleToBFloat16Bits(double v) { return RoundToSmallFloat(v, 8, 7); }

namespace llvm_internal {

bool IsHalfLike(DType d) { return d.scalar == ScalarType::kFloat16 || d.scalar == ScalarType::kBFloat16; }

namespace {
std::string ScalarType_(ScalarType s, bool mem) {
  switch (s) {
    case ScalarType::kBool: return mem ? "i8" : "i1";
    case ScalarType::kInt8: case ScalarType::kUInt8: return "i8";
    case ScalarType::kInt16: case ScalarType::kUInt16: return "i16";
    case ScalarType::kInt32: case ScalarType::kUInt32: return "i32";
    case ScalarType::kInt64: case ScalarType::kUInt64: return "i64";
    case ScalarType::kFloat16: return "half";
    case ScalarType::kBFloat16: return "bfloat";
    case ScalarType::kFloat32: return "float";
    case ScalarType::kFloat64: return "double";
    default: return "void";
  }
}
std::string Typed(DType d, bool mem) {
  if (d.is_ptr) return "ptr";
  std::string s = ScalarType_(d.scalar, mem);
  return d.count > 1 ? absl::StrCat("<", d.count, " x ", s, ">") : s;
}

std::string ScalarLiteral(DType d, const Arg& a) {
  double f = 0.0;
  int64_t i = 0;
  if (const auto* b = std::get_if<bool>(&a)) { f = *b; i = *b; }
  if (const auto* n = std::get_if<int64_t>(&a)) { f = static_cast<double>(*n); i = *n; }
  if (const auto* c = std::get_if<ConstFloat>(&a)) {
    f = c->value;
    i = std::isfinite(f) && std::fabs(f) < 9.2e18 ? static_cast<int64_t>(f) : 0;
  }
  switch (d.scalar) {
    case ScalarType::kBool: return (std::holds_alternative<ConstFloat>(a) ? f != 0.0 : i != 0) ? "true" : "false";
    case ScalarType::kFloat16: return absl::StrFormat("0xH%04X", DoubleToHalfBits(f));
    case ScalarType::kBFloat16: return absl::StrFormat("0xR%04X", DoubleToBFloat16Bits(f));
    case ScalarType::kFloat32: {
      // LLVM spells float constants as the double of equal value; NaNs canonicalised to the quiet NaN.
      float fv = static_cast<float>(f);
      double dv = std::isnan(fv) ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(fv);
      return absl::StrFormat("0x%016X", std::bit_cast<uint64_t>(dv));
    }
    case ScalarType::kFloat64: {
      double dv = std::isnan(f) ? std::numeric_limits<double>::quiet_NaN() : f;
      return absl::StrFormat("0x%016X", std::bit_cast<uint64_t>(dv));
    }
    default: {
      const int bits = d.ItemSize() * 8;
      uint64_t u = static_cast<uint64_t>(i);
      if (bits < 64) {  // sign-extend the low `bits` bits, so LLVM reads the same bit pattern
        u &= (uint64_t{1} << bits) - 1;
        if (u >> (bits - 1)) u |= ~((uint64_t{1} << bits) - 1);
      }
      return absl::StrCat(static_cast<int64_t>(u));
    }
  }
}
}  // namespace

std::string RegType(DType d) { return Typed(d, false); }
std::string MemType(DType d) { return Typed(d, true); }

std::string Splat(const std::string& ty, const std::string& lit, int count) {
  if (count <= 1) return lit;
  std::string s = "<";
  for (int k = 0; k < count; ++k) absl::StrAppend(&s, k ? ", " : "", ty, " ", lit);
  return s + ">";
}

std::string ConstLiteral(DType d, const Arg& a) {
  return Splat(RegType(d.Scalar()), ScalarLiteral(d.Scalar(), a), d.count);
}

std::string Emitter::Ref(const UOp* u) {
  if (u->op() == Op::CONST) return ConstLiteral(u->dtype(), u->arg());
  auto it = val_.find(u);
  if (it != val_.end()) return it->second;
  if (err_.ok()) {
    err_ = absl::InvalidArgumentError(
        absl::StrCat("llvm renderer: ", std::string(OpName(u->op())), " is used before it is defined in the linear program"));
  }
  return "undef";
}

namespace {
absl::Status CheckDType(DType d, const UOp& u) {
  if (d.scalar == ScalarType::kIndex)
    return absl::InvalidArgumentError(
        absl::StrCat("llvm renderer: index dtype reached the renderer (", std::string(OpName(u.op())), "); codegen lowers it"));
  return absl::OkStatus();
}
}  // namespace

namespace {
// A LOAD's or STORE's gate: its own source `gate_src`, else its INDEX's third source; null when ungated.
const UOp* GateOf(const UOp& mem_op, size_t gate_src) {
  if (mem_op.num_src() > gate_src) return mem_op.src(gate_src).get();
  const UOp* idx = mem_op.src(0).get();
  if (idx->op() == Op::INDEX && idx->num_src() == 3) return idx->src(2).get();
  return nullptr;
}
}  // namespace

std::string Emitter::Gate(const UOp& mem_op, size_t gate_src) {
  const UOp* g = GateOf(mem_op, gate_src);
  return g == nullptr ? "" : Ref(g);
}

namespace {

// A vector load of at least this many one-byte integers from a kernel buffer is preceded by a prefetch of the bytes
// kNarrowPrefetchBytes further on (llvm.prefetch, read, keep in all levels). Such loads are quantized weights (GGUF
// Q4/Q8 rows, vectorised by the accumulator tiling), which a decode step streams from memory once: the hardware
// prefetchers leave those streams far below the machine's bandwidth. SmolLM2 Q4_1's matrix-vector products, 2-core
// Emerald Rapids: a 12288 x 576 product over weight sets too large to stay cached 56 -> 24 ns per row (the speed
// of the same kernel on cached weights; 512 bytes ahead 30, 1024 25, 2048 23.6); the batch-1 decode step 12.9 ms
// -> 7.3-7.7 ms, 8 slots 23 -> 21 ms. One-byte loads elsewhere (bool masks) are not prefetched.
constexpr int kNarrowPrefetchLanes = 16;
constexpr int64_t kNarrowPrefetchBytes = 2048;

bool StreamsNarrowWeights(const UOp& load) {
  const DType d = load.dtype();
  const UOp* ix = load.src(0).get();
  return d.count >= kNarrowPrefetchLanes && d.ItemSize() == 1 && !d.IsBool() && !d.IsFloat() &&
         ix->op() == Op::INDEX && ix->src(0)->op() == Op::PARAM;
}

// How far `e` (an index expression) moves per step of `r`, when that is a constant.
std::optional<int64_t> StepAlong(const UOp* e, const UOp* r, absl::flat_hash_map<const UOp*, std::optional<int64_t>>& memo) {
  if (auto it = memo.find(e); it != memo.end()) return it->second;
  std::optional<int64_t> out;
  if (e == r) {
    out = 1;
  } else if (e->op() == Op::RANGE || e->num_src() == 0) {  // another loop, a constant, a variable
    out = 0;
  } else if (e->op() == Op::ADD || e->op() == Op::SUB) {
    auto a = StepAlong(e->src(0).get(), r, memo), b = StepAlong(e->src(1).get(), r, memo);
    if (a && b) out = e->op() == Op::ADD ? *a + *b : *a - *b;
  } else if (e->op() == Op::MUL) {
    auto a = StepAlong(e->src(0).get(), r, memo), b = StepAlong(e->src(1).get(), r, memo);
    const int64_t* ca = e->src(0)->op() == Op::CONST ? std::get_if<int64_t>(&e->src(0)->arg()) : nullptr;
    const int64_t* cb = e->src(1)->op() == Op::CONST ? std::get_if<int64_t>(&e->src(1)->arg()) : nullptr;
    if (a && b && *a == 0 && *b == 0) out = 0;
    else if (cb && a) out = *a * *cb;
    else if (ca && b) out = *b * *ca;
  } else {
    bool zero = true;
    for (const UOpPtr& s : e->src()) {
      auto st = StepAlong(s.get(), r, memo);
      zero &= st && *st == 0;
    }
    if (zero) out = 0;
  }
  memo[e] = out;
  return out;
}

// A float vector load whose address moves by at least kStridedPrefetchMinBytes per step of the innermost open loop
// (a conv's input rows along its channel loop: the pixel-lane 1x1 convs of ResNet-50 read a 16- or 32-pixel piece
// of row ci, H * W floats after row ci - 1) is preceded by prefetches of the same lines kStridedPrefetchSteps steps
// on, one per 64-byte line. The hardware's stride prefetcher follows strides up to 2 KiB within a page and such
// rows were demand misses: ResNet-50's 1x1 convs at 28x28 and 56x56 0.70 -> 0.46-0.52 ms (512 -> 128 channels),
// 1.09 -> 0.82-0.89 ms (512 -> 256), the model's kernels 39.0-40.0 -> 36.9-39.4 ms (2-core Emerald Rapids; 4, 8 and
// 16 steps ahead measured alike). MiniLM, the CNN at batch 1 and 64, the training step and the LLM's steps within
// noise.
constexpr int64_t kStridedPrefetchMinBytes = 1024;
constexpr int64_t kStridedPrefetchSteps = 8;

// The bytes a load moves per step of `loop` (the innermost open loop, null outside loops) when it is such a strided
// float vector load, else 0.
int64_t StridedFloatStep(const UOp& load, const UOp* loop) {
  const DType d = load.dtype();
  const UOp* ix = load.src(0).get();
  if (loop == nullptr || d.count < 8 || !d.IsFloat() || ix->op() != Op::INDEX || ix->num_src() < 2) return 0;
  absl::flat_hash_map<const UOp*, std::optional<int64_t>> memo;
  const std::optional<int64_t> step = StepAlong(ix->src(1).get(), loop, memo);
  const int64_t bytes = step ? *step * d.Base().ItemSize() : 0;
  return std::abs(bytes) >= kStridedPrefetchMinBytes ? bytes : 0;
}

}  // namespace

absl::Status Emitter::EmitLoad(const UOp& u) {
  const std::string ptr = Ref(u.src(0).get());
  const std::string gate = Gate(u, 2);
  const std::string mt = MemType(u.dtype()), rt = RegType(u.dtype());
  const int align = std::max(1, u.dtype().ItemSize());
  auto load = [&]() {
    std::string l = Tmp();
    Line(absl::StrCat(l, " = load ", mt, ", ptr ", ptr, ", align ", align));
    if (u.dtype().scalar == ScalarType::kBool) {
      std::string b = Tmp();
      Line(absl::StrCat(b, " = icmp ne ", mt, " ", l, ", zeroinitializer"));
      return b;
    }
    return l;
  };
  if (gate.empty()) {
    // Prefetches (read, keep in all levels) of the lines `bytes` after the load's address.
    auto prefetch = [&](int64_t bytes) {
      const std::string ahead = Tmp();
      Line(absl::StrCat(ahead, " = getelementptr i8, ptr ", ptr, ", i64 ", bytes));
      Line(absl::StrCat("call void @llvm.prefetch.p0(ptr ", ahead, ", i32 0, i32 3, i32 1)"));
      decls_.insert("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)");
    };
    if (StreamsNarrowWeights(u)) {
      prefetch(kNarrowPrefetchBytes);
    } else if (const int64_t step = StridedFloatStep(u, loops_.empty() ? nullptr : loops_.back().range); step != 0) {
      for (int64_t off = 0; off < int64_t{u.dtype().count} * u.dtype().Base().ItemSize(); off += 64)
        prefetch(step * kStridedPrefetchSteps + off);
    }
    val_[&u] = load();
    return absl::OkStatus();
  }
  const std::string alt =
      u.num_src() >= 2 ? Ref(u.src(1).get()) : ConstLiteral(u.dtype(), Arg(int64_t{0}));
  // A scalar element of a kernel buffer: read without a branch, from the buffer's first element where the gate is
  // off (host buffers are never empty: HostAllocator gives a zero-byte buffer 64 bytes), and the value selected.
  // A padded conv reads its input through such gates, one per tile row, in its innermost loop: as branches they
  // split the loop body into blocks that the SLP vectorizer does not cross, and the tile stayed scalar (ResNet-50's
  // 3x3 convs, 2-core Xeon: 4.1 -> 2.8 ms each; the CNN training step 795 -> 517 ms).
  const UOp* ix = u.src(0).get();
  if (u.dtype().count == 1 && ix->op() == Op::INDEX && ix->src(0)->op() == Op::PARAM) {
    const std::string safe = Tmp();
    Line(absl::StrCat(safe, " = select i1 ", gate, ", ptr ", ptr, ", ptr ", Ref(ix->src(0).get())));
    std::string l = Tmp();
    Line(absl::StrCat(l, " = load ", mt, ", ptr ", safe, ", align ", align));
    if (u.dtype().scalar == ScalarType::kBool) {
      std::string b = Tmp();
      Line(absl::StrCat(b, " = icmp ne ", mt, " ", l, ", zeroinitializer"));
      l = b;
    }
    std::string r = Tmp();
    Line(absl::StrCat(r, " = select i1 ", gate, ", ", rt, " ", l, ", ", rt, " ", alt));
    val_[&u] = r;
    return absl::OkStatus();
  }
  const int k = nblock_++;
  const std::string pre = cur_block_;
  Line(absl::StrCat("br i1 ", gate, ", label %G", k, ".load, label %G", k, ".done"));
  Label(absl::StrCat("G", k, ".load"));
  std::string l = load();
  std::string from = cur_block_;
  Line(absl::StrCat("br label %G", k, ".done"));
  Label(absl::StrCat("G", k, ".done"));
  std::string r = Tmp();
  Line(absl::StrCat(r, " = phi ", rt, " [ ", l, ", ", from, " ], [ ", alt, ", ", pre, " ]"));
  val_[&u] = r;
  return absl::OkStatus();
}

absl::Status Emitter::EmitStore(const UOp& u) {
  const std::string ptr = Ref(u.src(0).get());
  const DType vd = u.src(1)->dtype();
  std::string v = Ref(u.src(1).get());
  const std::string gate = Gate(u, 2);
  const std::string mt = MemType(vd);
  const int align = std::max(1, vd.ItemSize());
  const int k = nblock_++;
  if (!gate.empty()) {
    Line(absl::StrCat("br i1 ", gate, ", label %G", k, ".store, label %G", k, ".done"));
    Label(absl::StrCat("G", k, ".store"));
  }
  if (vd.scalar == ScalarType::kBool) {
    std::string z = Tmp();
    Line(absl::StrCat(z, " = zext ", RegType(vd), " ", v, " to ", mt));
    v = z;
  }
  const bool to_buffer = u.src(0)->op() == Op::INDEX && u.src(0)->src(0)->op() == Op::PARAM;
  Line(absl::StrCat("store ", mt, " ", v, ", ptr ", ptr, ", align ", align,
                    streaming_stores_ && to_buffer && gate.empty() ? ", !nontemporal !0" : ""));
  if (!gate.empty()) {
    Line(absl::StrCat("br label %G", k, ".done"));
    Label(absl::StrCat("G", k, ".done"));
  }
  return absl::OkStatus();
}

bool Emitter::InReduceLoop() const {
  for (const Loop& l : loops_) {
    const auto* a = std::get_if<AxisArg>(&l.range->arg());
    if (a != nullptr && a->type == AxisType::kReduce) return true;
  }
  return false;
}

absl::Status Emitter::EmitRange(size_t i, const UOp& u) {
  const std::string t = RegType(u.dtype());
  const std::string end = Ref(u.src(0).get());
  const int k = nblock_++;
  const std::string pre = cur_block_;
  std::string c = Tmp();
  Line(absl::StrCat(c, " = icmp slt ", t, " 0, ", end));
  // Every store of the kernel is gated by one value that is already computed here (it does not depend on this loop
  // or any inside it): where it is off, nothing this loop does can be seen, so the loop is not entered. A KV cache's
  // write (the new key under a one-hot mask of positions, computed for every position, head and dimension) then runs
  // its heads and dimensions only at the written position.
  bool gated = false;
  if (store_gate_ != nullptr && val_.contains(store_gate_) &&
      std::none_of(loops_.begin(), loops_.end(), [](const Loop& l) { return l.gated; })) {
    const std::string both = Tmp();
    Line(absl::StrCat(both, " = and i1 ", c, ", ", Ref(store_gate_)));
    c = both;
    gated = true;
  }
  Line(absl::StrCat("br i1 ", c, ", label %L", k, ".body, label %L", k, ".exit"));
  Label(absl::StrCat("L", k, ".body"));
  std::string phi = absl::StrCat("%v", i);
  Line(absl::StrCat(phi, " = phi ", t, " [ 0, ", pre, " ], [ ", phi, ".next, %L", k, ".latch ]"));
  val_[&u] = phi;
  loops_.push_back(Loop{&u, k, phi, end, t, gated});
  return absl::OkStatus();
}

absl::Status Emitter::EmitEnd(const UOp& u) {
  // The RANGE sources of this END, closed innermost first; each must be the innermost open loop.
  std::vector<const UOp*> ranges;
  for (const UOpPtr& s : u.src())
    if (s->op() == Op::RANGE) ranges.push_back(s.get());
  if (ranges.empty()) return absl::InvalidArgumentError("llvm renderer: END without a RANGE source");
  int closed = 0;
  while (!loops_.empty() &&
         std::find(ranges.begin(), ranges.end(), loops_.back().range) != ranges.end()) {
    Loop l = loops_.back();
    loops_.pop_back();
    ++closed;
    Line(absl::StrCat("br label %L", l.id, ".latch"));
    Label(absl::StrCat("L", l.id, ".latch"));
    Line(absl::StrCat(l.phi, ".next = add ", l.type, " ", l.phi, ", 1"));
    std::string c = Tmp();
    Line(absl::StrCat(c, " = icmp slt ", l.type, " ", l.phi, ".next, ", l.end));
    Line(absl::StrCat("br i1 ", c, ", label %L", l.id, ".body, label %L", l.id, ".exit"));
    Label(absl::StrCat("L", l.id, ".exit"));
  }
  if (closed == 0) return absl::InvalidArgumentError("llvm renderer: END closes a RANGE that is not the innermost open loop");
  return absl::OkStatus();
}

absl::Status Emitter::EmitOne(size_t i, const UOp& u) {
  KILN_RETURN_IF_ERROR(CheckDType(u.dtype().Base(), u));
  switch (u.op()) {
    case Op::CONST: case Op::SINK: case Op::NOOP: case Op::GROUP: case Op::BARRIER:
      return absl::OkStatus();
    case Op::AFTER:
      val_[&u] = Ref(u.src(0).get());
      return absl::OkStatus();
    case Op::PARAM:
      val_[&u] = absl::StrCat("%buf", u.ArgInt());
      return absl::OkStatus();
    case Op::DEFINE_VAR: {
      auto it = std::find(p_.vars.begin(), p_.vars.end(), &u);
      if (it == p_.vars.end())
        return absl::InvalidArgumentError("llvm renderer: DEFINE_VAR missing from Program::vars");
      val_[&u] = absl::StrCat("%var", it - p_.vars.begin());
      return absl::OkStatus();
    }
    case Op::SPECIAL: {
      if (u.ArgStr() != "core_id")
        return absl::UnimplementedError("llvm renderer: only SPECIAL core_id exists on the CPU");
      if (u.dtype().scalar == ScalarType::kInt32) {
        val_[&u] = "%core_id";
      } else {
        std::string t = Tmp();
        Line(absl::StrCat(t, " = sext i32 %core_id to ", RegType(u.dtype())));
        val_[&u] = t;
      }
      return absl::OkStatus();
    }
    case Op::DEFINE_REG: case Op::DEFINE_LOCAL: {
      std::string a = absl::StrCat("%v", i);
      absl::StrAppend(&allocas_, "  ", a, " = alloca ", MemType(u.dtype().Base()), ", i64 ",
                      std::max<int64_t>(1, u.ArgInt()), ", align 32\n");
      val_[&u] = a;
      return absl::OkStatus();
    }
    case Op::INDEX: {
      const DType elem = u.src(0)->dtype().Base();
      std::string t = Tmp();
      Line(absl::StrCat(t, " = getelementptr ", MemType(elem), ", ptr ", Ref(u.src(0).get()), ", ",
                        RegType(u.src(1)->dtype()), " ", Ref(u.src(1).get())));
      val_[&u] = t;
      return absl::OkStatus();
    }
    case Op::LOAD: return EmitLoad(u);
    case Op::STORE: return EmitStore(u);
    case Op::RANGE: return EmitRange(i, u);
    case Op::END: return EmitEnd(u);
    case Op::IF: {
      const int k = nblock_++;
      Line(absl::StrCat("br i1 ", Ref(u.src(0).get()), ", label %I", k, ".then, label %I", k, ".end"));
      Label(absl::StrCat("I", k, ".then"));
      ifs_[&u] = k;
      open_ifs_.push_back(k);
      return absl::OkStatus();
    }
    case Op::ENDIF: {
      auto it = ifs_.find(u.src(0).get());
      if (it == ifs_.end() || open_ifs_.empty() || open_ifs_.back() != it->second)
        return absl::InvalidArgumentError("llvm renderer: ENDIF does not close the innermost IF");
      open_ifs_.pop_back();
      Line(absl::StrCat("br label %I", it->second, ".end"));
      Label(absl::StrCat("I", it->second, ".end"));
      return absl::OkStatus();
    }
    case Op::VECTORIZE: {
      const std::string vt = RegType(u.dtype()), st = RegType(u.dtype().Scalar());
      std::string cur = "poison";
      for (size_t k = 0; k < u.num_src(); ++k) {
        std::string t = Tmp();
        Line(absl::StrCat(t, " = insertelement ", vt, " ", cur, ", ", st, " ", Ref(u.src(k).get()), ", i32 ", k));
        cur = t;
      }
      val_[&u] = cur;
      return absl::OkStatus();
    }
    case Op::GEP: {
      const IntVec& lanes = u.ArgVec();
      const std::string vt = RegType(u.src(0)->dtype());
      const std::string v = Ref(u.src(0).get());
      std::string t = Tmp();
      if (lanes.size() == 1) {
        Line(absl::StrCat(t, " = extractelement ", vt, " ", v, ", i32 ", lanes[0]));
      } else {
        std::vector<std::string> m;
        for (int64_t l : lanes) m.push_back(absl::StrCat("i32 ", l));
        Line(absl::StrCat(t, " = shufflevector ", vt, " ", v, ", ", vt, " poison, <", lanes.size(), " x i32> <",
                          absl::StrJoin(m, ", "), ">"));
      }
      val_[&u] = t;
      return absl::OkStatus();
    }
    case Op::CAST: case Op::BITCAST: return EmitCast(u);
    case Op::WMMA: return EmitWmma(u);
    default:
      if (IsALU(u.op())) return EmitAlu(u);
      return absl::UnimplementedError(absl::StrCat("llvm renderer: op ", std::string(OpName(u.op())), " is not supported"));
  }
}

// WMMA m1n16k4, the CPU's integer tensor core (program.h CpuVnniTensorCores): one vpdpbusd. A's four bytes are one
// i32 broadcast to every lane; B's four rows of sixteen bytes are permuted into sixteen i32 lanes of four (one
// vpermb); the unsigned operand goes first, as the instruction takes it (its products are u8 x s8, exact, summed by
// four and added to C wrapping).
absl::Status Emitter::EmitWmma(const UOp& u) {
  const IntVec* shape = ArgIntVec(u.arg());
  const DType a = u.src(0)->dtype(), b = u.src(1)->dtype();
  const bool au = a.scalar == ScalarType::kUInt8 && b.scalar == ScalarType::kInt8;
  const bool bu = a.scalar == ScalarType::kInt8 && b.scalar == ScalarType::kUInt8;
  if (shape == nullptr || *shape != IntVec{1, 16, 4} || (!au && !bu) || a.count != 4 || b.count != 64 ||
      u.dtype() != dtypes::kInt32.Vec(16) || u.src(2)->dtype() != dtypes::kInt32.Vec(16))
    return absl::UnimplementedError("llvm renderer: WMMA other than m1n16k4 8-bit x 8-bit -> int32 (vpdpbusd)");
  const std::string a32 = Tmp(), one = Tmp(), splat = Tmp(), bt = Tmp(), b32 = Tmp(), d = Tmp();
  Line(absl::StrCat(a32, " = bitcast <4 x i8> ", Ref(u.src(0).get()), " to i32"));
  Line(absl::StrCat(one, " = insertelement <16 x i32> poison, i32 ", a32, ", i32 0"));
  Line(absl::StrCat(splat, " = shufflevector <16 x i32> ", one, ", <16 x i32> poison, <16 x i32> zeroinitializer"));
  std::vector<std::string> mask;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 4; ++j) mask.push_back(absl::StrCat("i32 ", 16 * j + i));
  Line(absl::StrCat(bt, " = shufflevector <64 x i8> ", Ref(u.src(1).get()), ", <64 x i8> poison, <64 x i32> <",
                    absl::StrJoin(mask, ", "), ">"));
  Line(absl::StrCat(b32, " = bitcast <64 x i8> ", bt, " to <16 x i32>"));
  decls_.insert("declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)");
  Line(absl::StrCat(d, " = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> ", Ref(u.src(2).get()),
                    ", <16 x i32> ", au ? splat : b32, ", <16 x i32> ", au ? b32 : splat, ")"));
  val_[&u] = d;
  return absl::OkStatus();
}

// Elementwise kernels whose output is at least this large store with !nontemporal (streaming stores: no
// read-for-ownership of the destination, and the output does not evict the inputs from cache). Below it the output
// likely stays in the last-level cache for the next kernel, where a normal store is better. Not where the loads are
// strided (Program::strided_loads, a transpose): the stores stay scalar, and scalar streaming stores cost far more
// than they save (the CNN's channels-last copy of a conv's output gradient, 512x32x20x20: 62.5 -> 2.3 ms). Nor where
// loads are gated (a padded view): LLVM writes the lanes it knows are 0 with 8-byte streaming stores and the loaded
// ones with plain scalar stores into the same lines, and each line then leaves the core and comes back (conv1's
// output gradient padded by 4 for its input gradient, 512x32x24x24 -> 32x32: 167 -> 5.1 ms).
constexpr int64_t kStreamingStoreBytes = int64_t{16} << 20;

absl::StatusOr<std::string> Emitter::Run() {
  if (!IsValidKernelName(p_.name))
    return absl::InvalidArgumentError("llvm renderer: kernel name must be a generated identifier");
  int64_t out_bytes = 0;
  for (const BufferParam& b : p_.buffers)
    if (b.is_output) out_bytes += b.size * b.dtype.ItemSize();
  bool gated_loads = false;
  for (const UOpPtr& u : p_.uops)
    gated_loads |= u->op() == Op::LOAD && GateOf(*u, 2) != nullptr;
  streaming_stores_ =
      p_.name.rfind("E_", 0) == 0 && out_bytes >= kStreamingStoreBytes && !p_.strided_loads && !gated_loads;
  int64_t nbufs = static_cast<int64_t>(p_.buffers.size());
  for (const BufferParam& b : p_.buffers) nbufs = std::max(nbufs, b.slot + 1);
  for (const UOpPtr& u : p_.uops) {
    if (u->op() == Op::PARAM) {
      if (u->ArgInt() < 0 || u->ArgInt() > 4096) return absl::InvalidArgumentError("llvm renderer: bad PARAM slot");
      nbufs = std::max(nbufs, u->ArgInt() + 1);
    }
  }
  for (const UOpPtr& v : p_.vars) {
    if (v->op() != Op::DEFINE_VAR || (v->dtype() != dtypes::kInt32 && v->dtype() != dtypes::kInt64))
      return absl::InvalidArgumentError("llvm renderer: Program::vars must be int32/int64 DEFINE_VARs");
  }
  // The kernel's stores: do they all share one scalar gate (EmitRange then skips whole loops where it is off)?
  bool one_gate = true;
  for (const UOpPtr& u : p_.uops) {
    if (u->op() != Op::STORE) continue;
    const UOp* g = GateOf(*u, 2);
    if (g == nullptr || g->dtype() != dtypes::kBool || (store_gate_ != nullptr && g != store_gate_)) one_gate = false;
    store_gate_ = g;
  }
  if (!one_gate) store_gate_ = nullptr;
  for (size_t i = 0; i < p_.uops.size(); ++i) {
    KILN_RETURN_IF_ERROR(EmitOne(i, *p_.uops[i]));
    KILN_RETURN_IF_ERROR(err_);
  }
  if (!loops_.empty()) return absl::InvalidArgumentError("llvm renderer: RANGE without a matching END");
  if (!open_ifs_.empty()) return absl::InvalidArgumentError("llvm renderer: IF without a matching ENDIF");

  const std::string& n = p_.name;
  std::vector<std::string> params, args;
  std::string tramp;
  for (int64_t s = 0; s < nbufs; ++s) {
    params.push_back(absl::StrCat("ptr noalias align 32 %buf", s));
    absl::StrAppend(&tramp, "  %bp", s, " = getelementptr ptr, ptr %bufs, i64 ", s, "\n  %b", s,
                    " = load ptr, ptr %bp", s, ", align 8\n");
    args.push_back(absl::StrCat("ptr %b", s));
  }
  for (size_t k = 0; k < p_.vars.size(); ++k) {
    const std::string t = RegType(p_.vars[k]->dtype());
    params.push_back(absl::StrCat(t, " %var", k));
    absl::StrAppend(&tramp, "  %vp", k, " = getelementptr i64, ptr %vars, i64 ", k, "\n  %w", k,
                    " = load i64, ptr %vp", k, ", align 8\n");
    if (t == "i64") {
      args.push_back(absl::StrCat("i64 %w", k));
    } else {
      absl::StrAppend(&tramp, "  %x", k, " = trunc i64 %w", k, " to i32\n");
      args.push_back(absl::StrCat("i32 %x", k));
    }
  }
  params.push_back("i32 %core_id");
  args.push_back("i32 %core_id");

  std::string out = absl::StrCat("; kiln llvm renderer: kernel ", n, "\n");
  // internal: inlined into the trampoline and then dropped, so LLVM optimizes and emits the body once (cpu_compiler.cc)
  absl::StrAppend(&out, "define internal void @", n, "(", absl::StrJoin(params, ", "), ") #0 {\nentry:\n", allocas_,
                  body_,
                  "  ret void\n}\n\n");
  absl::StrAppend(&out, "define void @", n, ".entry(ptr %bufs, ptr %vars, i32 %core_id) #1 {\nentry:\n", tramp,
                  "  call void @", n, "(", absl::StrJoin(args, ", "), ")\n  ret void\n}\n\n");
  absl::StrAppend(&out, "@", n, ".info = constant [2 x i32] [i32 ", nbufs, ", i32 ", p_.vars.size(), "]\n\n");
  for (const std::string& d : decls_) absl::StrAppend(&out, d, "\n");
  absl::StrAppend(&out, "\nattributes #0 = { alwaysinline nounwind",
                  p_.no_gather ? " \"kiln-no-gather\"" : "",
                  p_.slp_max_vf > 0 ? absl::StrCat(" \"kiln-slp-max-vf\"=\"", p_.slp_max_vf, "\"") : "",
                  " }\nattributes #1 = { nounwind }\n");
  if (streaming_stores_) absl::StrAppend(&out, "\n!0 = !{i32 1}\n");
  return out;
}

}  // namespace llvm_internal

const RendererCaps& LlvmIrRenderer::caps() const {
  static const RendererCaps caps = [] {
    RendererCaps c;
    c.has_local = false;
    c.has_threads = true;
    c.wide_index = true;  // i32 offsets sign-extended per lane hide consecutive loads from LLVM
    c.supports_vectors = true;
#if defined(__x86_64__) || defined(__i386__)
    // The CPU backend JITs for the host CPU, so the host's widest SIMD is the target's, except that
    // AVX-512 is only compiled for when CpuAvx512Allowed(): without it, 64-byte vectors would be split
    // into two 32-byte halves by LLVM and BEAM/heuristics would size upcasts for registers the code
    // never uses.
    c.vector_bytes = (CpuAvx512Allowed() && __builtin_cpu_supports("avx512f")) ? 64
                     : __builtin_cpu_supports("avx2")                 ? 32
                                                                      : 16;
    // 8-bit integer dot products (vpdpbusd) where the host has AVX-512 VNNI and kiln compiles for 512 bits.
    if (c.vector_bytes == 64 && __builtin_cpu_supports("avx512vnni")) c.tensor_cores = CpuVnniTensorCores();
#endif
    return c;
  }();
  return caps;
}

absl::StatusOr<std::string> LlvmIrRenderer::Render(const Program& program) const {
  llvm_internal::Emitter e(program, fp_contract_);
  return e.Run();
}

}  // namespace kiln::codegen
