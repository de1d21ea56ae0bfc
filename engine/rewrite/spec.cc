#include "engine/rewrite/spec.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/env.h"
#include "engine/base/status.h"

namespace kiln {

UOpPtr SpecAccept() {
  static const UOpPtr* ok =
      new UOpPtr(UOp::Make(Op::NOOP, dtypes::kVoid, {}, Arg(std::string("spec: accept"))));
  return *ok;
}

namespace {
const UOpPtr& RejectNode() {
  static const UOpPtr* bad =
      new UOpPtr(UOp::Make(Op::NOOP, dtypes::kVoid, {}, Arg(std::string("spec: reject"))));
  return *bad;
}
}  // namespace

UOpPtr SpecReject(const Bindings& b, std::string why) {
  if (SpecContext* ctx = b.ctx<SpecContext>()) ctx->why = std::move(why);
  return RejectNode();
}

namespace {

// The first of `nodes` (in order) that `spec` does not accept, as "<what>: <OP> <dtype>: <why>".
absl::Status CheckNodes(const std::vector<const UOp*>& nodes, const PatternMatcher& spec, const char* what) {
  // Verdicts are checks, not rewrites: they stay out of the rewrite trace (VIZ), still counted.
  std::optional<Context> untraced;
  if (GetKnob(Knob::kTrackMatchStats) >= 2) {
    untraced.emplace(std::initializer_list<std::pair<Knob, int64_t>>{{Knob::kTrackMatchStats, 1}});
  }
  for (const UOp* u : nodes) {
    SpecContext ctx;
    UOpPtr verdict = spec.Rewrite(UOpPtr::FromRaw(u), &ctx);
    if (verdict == SpecAccept()) continue;
    std::string why = !verdict ? std::string("no spec rule accepts it") : ctx.why;
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", std::string(OpName(u->op())), " ",
                                                   u->dtype().Name(), ": ", why));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VerifyWithSpec(const UOpPtr& root, const PatternMatcher& spec, const char* what) {
  if (!root) return absl::InvalidArgumentError(absl::StrCat(what, ": null root"));
  return CheckNodes(Toposort(root), spec, what);
}

namespace {

using B = const Bindings&;
UOpPtr Ok(B) { return SpecAccept(); }

OpSet OpsWhere(bool (*pred)(Op)) {
  OpSet s;
  for (int i = 0; i < kNumOps; ++i) {
    if (pred(static_cast<Op>(i))) s.Add(static_cast<Op>(i));
  }
  return s;
}
bool IsAluOp(Op op) { return IsALU(op); }
bool IsTensorOp(Op op) { return IsTensorOnly(op); }
bool IsIntLike(DType d) { return !d.is_ptr && d.count == 1 && d.IsInt(); }

// CONST: the arg alternative matches the dtype's kind.
UOpPtr CheckConst(B b) {
  const UOp& u = *b.root();
  const Arg& a = u.arg();
  DType d = u.dtype();
  if (d.is_ptr || d.scalar == ScalarType::kVoid) return SpecReject(b, "CONST of pointer or void dtype");
  bool ok = d.IsBool()    ? std::holds_alternative<bool>(a)
            : d.IsFloat() ? std::holds_alternative<ConstFloat>(a)
                          : std::holds_alternative<int64_t>(a);
  return ok ? SpecAccept() : SpecReject(b, "CONST arg kind does not match its dtype");
}

// ALU ops: sources agree in dtype; comparisons give bool; WHERE takes a bool condition.
UOpPtr CheckAlu(B b) {
  const UOp& u = *b.root();
  Op op = u.op();
  absl::Span<const UOpPtr> s = u.src();
  if (s.empty()) return SpecReject(b, "ALU op without sources");
  if (op == Op::WHERE) {
    if (s[0]->dtype().scalar != ScalarType::kBool) return SpecReject(b, "WHERE condition is not bool");
    if (s[1]->dtype() != s[2]->dtype() || u.dtype() != s[1]->dtype()) {
      return SpecReject(b, "WHERE branches and result disagree in dtype");
    }
    return SpecAccept();
  }
  DType d0 = s[0]->dtype();
  // Shifts may take a differently typed shift amount (tinygrad allows it).
  size_t n = (op == Op::SHL || op == Op::SHR) ? 1 : s.size();
  for (size_t i = 1; i < n; ++i) {
    if (s[i]->dtype() != d0) {
      return SpecReject(b, absl::StrCat("sources disagree in dtype (", d0.Name(), " vs ",
                                        s[i]->dtype().Name(), ")"));
    }
  }
  if (IsComparison(op)) {
    return u.dtype().scalar == ScalarType::kBool && u.dtype().count == d0.count
               ? SpecAccept()
               : SpecReject(b, "comparison result is not bool");
  }
  return u.dtype() == d0 ? SpecAccept() : SpecReject(b, "result dtype differs from its sources");
}

UOpPtr CheckBitcast(B b) {
  const UOp& u = *b.root();
  return u.dtype().ByteSize() == u.src(0)->dtype().ByteSize()
             ? SpecAccept()
             : SpecReject(b, "BITCAST changes the byte size");
}

// ---- tensor-level checks ----

UOpPtr CheckMovement(B b) {
  const UOp& u = *b.root();
  const UOp& x = *u.src(0);
  if (!x.has_shape()) return SpecReject(b, "source has no shape");
  const IntVec* v = ArgIntVec(u.arg());
  if (v == nullptr) return SpecReject(b, "arg is not an int vector");
  const Shape& sh = x.shape();
  size_t rank = sh.size();
  switch (u.op()) {
    case Op::RESHAPE: {
      int64_t numel = 1;
      for (int64_t d : *v) {
        if (d < 0) return SpecReject(b, "negative dim");
        numel *= d;
      }
      return numel == x.Numel() ? SpecAccept() : SpecReject(b, "RESHAPE changes the element count");
    }
    case Op::PERMUTE: {
      IntVec p = *v;
      std::sort(p.begin(), p.end());
      for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] != static_cast<int64_t>(i)) return SpecReject(b, "arg is not a permutation");
      }
      return p.size() == rank ? SpecAccept() : SpecReject(b, "permutation rank mismatch");
    }
    case Op::EXPAND:
      if (v->size() != rank) return SpecReject(b, "EXPAND changes the rank");
      for (size_t i = 0; i < rank; ++i) {
        if ((*v)[i] != sh[i] && sh[i] != 1) return SpecReject(b, "EXPAND of a dim that is not 1");
      }
      return SpecAccept();
    case Op::PAD:
      if (v->size() != 2 * rank) return SpecReject(b, "PAD needs 2 ints per dim");
      for (int64_t p : *v) {
        if (p < 0) return SpecReject(b, "negative padding");
      }
      return SpecAccept();
    case Op::SHRINK:
      if (v->size() != 2 * rank) return SpecReject(b, "SHRINK needs 2 ints per dim");
      for (size_t i = 0; i < rank; ++i) {
        int64_t s = (*v)[2 * i], e = (*v)[2 * i + 1];
        if (s < 0 || s > e || e > sh[i]) return SpecReject(b, "SHRINK bounds out of range");
      }
      return SpecAccept();
    case Op::FLIP:
      if (v->size() != rank) return SpecReject(b, "FLIP needs one flag per dim");
      for (int64_t f : *v) {
        if (f != 0 && f != 1) return SpecReject(b, "FLIP flags must be 0 or 1");
      }
      return SpecAccept();
    default:
      return SpecReject(b, "not a movement op");
  }
}

UOpPtr CheckReduceAxis(B b) {
  const UOp& u = *b.root();
  const ReduceArg* r = std::get_if<ReduceArg>(&u.arg());
  if (r == nullptr) return SpecReject(b, "arg is not a ReduceArg");
  if (!IsReduceOp(r->op)) return SpecReject(b, "reduce op must be ADD, MUL or MAX");
  const UOp& x = *u.src(0);
  if (!x.has_shape()) return SpecReject(b, "source has no shape");
  int64_t rank = static_cast<int64_t>(x.shape().size());
  for (size_t i = 0; i < r->axes.size(); ++i) {
    if (r->axes[i] < 0 || r->axes[i] >= rank) return SpecReject(b, "reduce axis out of range");
    if (i > 0 && r->axes[i] <= r->axes[i - 1]) return SpecReject(b, "reduce axes not sorted/unique");
  }
  return u.dtype() == x.dtype() ? SpecAccept() : SpecReject(b, "REDUCE_AXIS changes the dtype");
}

UOpPtr CheckBuffer(B b) {
  const UOp& u = *b.root();
  const int64_t* n = std::get_if<int64_t>(&u.arg());
  if (n == nullptr || *n < 0) return SpecReject(b, "BUFFER arg must be a non-negative element count");
  return u.dtype().is_ptr ? SpecReject(b, "BUFFER dtype is a pointer") : SpecAccept();
}

UOpPtr CheckSameDType(B b) {
  const UOp& u = *b.root();
  return u.dtype() == u.src(0)->dtype() ? SpecAccept() : SpecReject(b, "dtype differs from its source");
}

UOpPtr CheckDefineVar(B b) {
  const UOp& u = *b.root();
  const VarArg* v = std::get_if<VarArg>(&u.arg());
  if (v == nullptr) return SpecReject(b, "DEFINE_VAR arg is not a VarArg");
  if (v->min > v->max) return SpecReject(b, "DEFINE_VAR min > max");
  return IsIntLike(u.dtype()) ? SpecAccept() : SpecReject(b, "DEFINE_VAR dtype is not an integer");
}

bool IsStrArg(const UOp& u) { return std::holds_alternative<std::string>(u.arg()); }
bool IsIntArg(const UOp& u) { return std::holds_alternative<int64_t>(u.arg()); }

// ---- kernel-level checks ----

UOpPtr CheckIndex(B b) {
  const UOp& u = *b.root();
  DType p = u.src(0)->dtype();
  if (!p.is_ptr) return SpecReject(b, "INDEX base is not a pointer");
  if (!IsIntLike(u.src(1)->dtype())) return SpecReject(b, "INDEX index is not index/int");
  if (u.num_src() == 3 && !u.src(2)->dtype().IsBool()) return SpecReject(b, "INDEX gate is not bool");
  if (!u.dtype().is_ptr || u.dtype().scalar != p.scalar) {
    return SpecReject(b, "INDEX result must be a pointer to the base's element type");
  }
  return SpecAccept();
}

UOpPtr CheckLoad(B b) {
  const UOp& u = *b.root();
  const UOp& idx = *u.src(0);
  if (idx.op() != Op::INDEX && !idx.dtype().is_ptr) return SpecReject(b, "LOAD source is not an INDEX");
  if (u.dtype().is_ptr || u.dtype().scalar != idx.dtype().scalar) {
    return SpecReject(b, "LOAD dtype is not the pointee type");
  }
  if (u.num_src() == 3 && !u.src(2)->dtype().IsBool()) return SpecReject(b, "LOAD gate is not bool");
  return SpecAccept();
}

UOpPtr CheckStore(B b) {
  const UOp& u = *b.root();
  const UOp& idx = *u.src(0);
  if (idx.op() != Op::INDEX && !idx.dtype().is_ptr) return SpecReject(b, "STORE target is not an INDEX");
  if (u.dtype() != dtypes::kVoid) return SpecReject(b, "STORE must be void");
  if (u.src(1)->dtype().scalar != idx.dtype().scalar) return SpecReject(b, "STORE value dtype mismatch");
  if (u.num_src() == 3 && !u.src(2)->dtype().IsBool()) return SpecReject(b, "STORE gate is not bool");
  return SpecAccept();
}

UOpPtr CheckRange(B b) {
  const UOp& u = *b.root();
  if (!std::holds_alternative<AxisArg>(u.arg())) return SpecReject(b, "RANGE arg is not an AxisArg");
  if (!IsIntLike(u.src(0)->dtype())) return SpecReject(b, "RANGE end is not index/int");
  return u.dtype() == u.src(0)->dtype() ? SpecAccept() : SpecReject(b, "RANGE dtype differs from its end");
}

UOpPtr CheckDefineMem(B b) {
  const UOp& u = *b.root();
  AddrSpace want = u.op() == Op::DEFINE_LOCAL ? AddrSpace::kLocal : AddrSpace::kReg;
  if (!u.dtype().is_ptr || u.dtype().addrspace != want) {
    return SpecReject(b, u.op() == Op::DEFINE_LOCAL ? "DEFINE_LOCAL needs a local pointer dtype"
                                                    : "DEFINE_REG needs a reg pointer dtype");
  }
  return IsIntArg(u) ? SpecAccept() : SpecReject(b, "size arg is not an int");
}

UOpPtr CheckVectorize(B b) {
  const UOp& u = *b.root();
  if (u.dtype().count != u.num_src()) return SpecReject(b, "VECTORIZE width differs from source count");
  for (const UOpPtr& s : u.src()) {
    if (s->dtype() != u.dtype().Scalar()) return SpecReject(b, "VECTORIZE source is not the scalar type");
  }
  return SpecAccept();
}

UOpPtr Reject(B b, const char* why) { return SpecReject(b, why); }

}  // namespace

const PatternMatcher& TensorSpec() {
  static const PatternMatcher* pm = new PatternMatcher(
      {
          // ** forbidden **
          {UPat(OpSet{Op::CUSTOM, Op::CUSTOMI}), [](B b) { return Reject(b, "internal-only op"); }, "internal-only"},
          {UPat(OpSet{Op::PARAM, Op::INDEX, Op::LOAD, Op::STORE, Op::DEFINE_LOCAL, Op::DEFINE_REG, Op::END,
                      Op::IF, Op::ENDIF, Op::BARRIER, Op::SPECIAL, Op::WMMA, Op::REDUCE}),
           [](B b) { return Reject(b, "kernel-only op in a tensor graph"); }, "kernel-only"},
          {UPat::Var().Where([](const UOp& u) { return u.dtype().is_ptr; }),
           [](B b) { return Reject(b, "pointer dtype in a tensor graph"); }, "no pointers"},
          // ** leaves **
          {UPat(Op::CONST), CheckConst, "CONST arg kind"},
          {UPat(Op::DEFINE_VAR), CheckDefineVar, "DEFINE_VAR"},
          {UPat(Op::BIND).Src({UPat(Op::DEFINE_VAR), UPat(Op::CONST)}), Ok, "BIND(var, const)"},
          {UPat(Op::UNIQUE).Where(IsIntArg), Ok, "UNIQUE int"},
          {UPat(Op::DEVICE).Where(IsStrArg), Ok, "DEVICE name"},
          {UPat(Op::BUFFER).Src({UPat(Op::UNIQUE), UPat(Op::DEVICE)}), CheckBuffer, "BUFFER(UNIQUE, DEVICE)"},
          {UPat(Op::BUFFER), [](B b) { return Reject(b, "BUFFER needs (UNIQUE, DEVICE) sources"); }, "BUFFER srcs"},
          // ** movement and reduce **
          {UPat(OpSet{Op::RESHAPE, Op::PERMUTE, Op::EXPAND, Op::PAD, Op::SHRINK, Op::FLIP}), CheckMovement, "movement arg"},
          {UPat(Op::REDUCE_AXIS), CheckReduceAxis, "REDUCE_AXIS arg"},
          // ** elementwise **
          {UPat(OpsWhere(IsAluOp)), CheckAlu, "ALU dtypes"},
          {UPat(Op::CAST), Ok, "CAST"},
          {UPat(Op::BITCAST), CheckBitcast, "BITCAST size"},
          // ** graph ops **
          {UPat(OpSet{Op::CONTIGUOUS, Op::CONTIGUOUS_BACKWARD, Op::DETACH}), CheckSameDType, "same dtype"},
          {UPat(Op::COPY).Src({UPat::Var(), UPat(Op::DEVICE)}), CheckSameDType, "COPY(x, DEVICE)"},
          {UPat(Op::ROWS).Src({UPat::Var(), UPat(Op::BIND)}), CheckSameDType, "ROWS(x, BIND)"},
          {UPat(Op::ASSIGN), [](B b) {
             const UOp& u = *b.root();
             return u.src(0)->dtype() == u.src(1)->dtype() && u.dtype() == u.src(0)->dtype()
                        ? SpecAccept() : SpecReject(b, "ASSIGN target and value disagree in dtype");
           }, "ASSIGN dtypes"},
          {UPat(OpSet{Op::SINK, Op::NOOP, Op::GROUP, Op::AFTER, Op::STAGE, Op::KERNEL, Op::CALL, Op::FUNCTION,
                      Op::LINEAR, Op::TUPLE, Op::GETTUPLE, Op::RANGE}), Ok, "structure"},
      },
      "tensor_spec");
  return *pm;
}

const PatternMatcher& KernelSpec() {
  static const PatternMatcher* pm = new PatternMatcher(
      {
          // ** forbidden **
          {UPat(OpsWhere(IsTensorOp)), [](B b) { return Reject(b, "tensor-only op in a kernel"); }, "tensor-only"},
          {UPat(OpSet{Op::BUFFER, Op::UNIQUE, Op::DEVICE}),
           [](B b) { return Reject(b, "buffers must be PARAMs in a kernel"); }, "no BUFFER"},
          // ** defines **
          {UPat(Op::PARAM).Where([](const UOp& u) { return u.dtype().is_ptr && IsIntArg(u); }), Ok, "PARAM ptr"},
          {UPat(Op::PARAM), [](B b) { return Reject(b, "PARAM must have a pointer dtype and an int slot"); }, "PARAM bad"},
          {UPat(OpSet{Op::DEFINE_LOCAL, Op::DEFINE_REG}), CheckDefineMem, "DEFINE_LOCAL/REG ptr"},
          {UPat(Op::DEFINE_VAR), CheckDefineVar, "DEFINE_VAR"},
          {UPat(Op::CONST), CheckConst, "CONST arg kind"},
          {UPat(Op::SPECIAL).Where([](const UOp& u) { return IsStrArg(u) && IsIntLike(u.dtype()); }), Ok, "SPECIAL"},
          // ** memory **
          {UPat(Op::INDEX), CheckIndex, "INDEX(ptr, idx[, gate])"},
          {UPat(Op::LOAD), CheckLoad, "LOAD(INDEX)"},
          {UPat(Op::STORE), CheckStore, "STORE(INDEX, value)"},
          // ** control **
          {UPat(Op::RANGE), CheckRange, "RANGE end"},
          {UPat(Op::END).Where([](const UOp& u) { return u.src(u.num_src() - 1)->op() == Op::RANGE; }), Ok, "END closes RANGE"},
          {UPat(Op::END), [](B b) { return Reject(b, "END's last source must be a RANGE"); }, "END bad"},
          {UPat(Op::SINK).WithDType(dtypes::kVoid), Ok, "SINK void"},
          // ** elementwise **
          {UPat(OpsWhere(IsAluOp)), CheckAlu, "ALU dtypes"},
          {UPat(Op::CAST), Ok, "CAST"},
          {UPat(Op::BITCAST), CheckBitcast, "BITCAST size"},
          {UPat(Op::VECTORIZE), CheckVectorize, "VECTORIZE"},
          {UPat(Op::GEP).Where([](const UOp& u) { return ArgIntVec(u.arg()) != nullptr; }), Ok, "GEP lanes"},
          {UPat(OpSet{Op::NOOP, Op::BARRIER, Op::IF, Op::ENDIF, Op::AFTER, Op::GROUP, Op::WMMA, Op::REDUCE,
                      Op::CUSTOM, Op::CUSTOMI, Op::BIND}), Ok, "structure"},
      },
      "kernel_spec");
  return *pm;
}

absl::Status VerifyTensorGraph(const UOpPtr& root) { return VerifyWithSpec(root, TensorSpec(), "tensor spec"); }

absl::Status VerifyKernel(const UOpPtr& sink) { return VerifyWithSpec(sink, KernelSpec(), "kernel spec"); }

absl::Status VerifyKernel(const UOpPtr& sink, SpecMemo& memo) {
  if (!sink) return absl::InvalidArgumentError("kernel spec: null root");
  // Accepted nodes are not descended into: their subgraphs were accepted whole.
  const std::vector<const UOp*> fresh = Toposort(sink, [&](const UOp* u) { return memo.Accepted(u); });
  KILN_RETURN_IF_ERROR(CheckNodes(fresh, KernelSpec(), "kernel spec"));
  for (const UOp* u : fresh) memo.Accept(u);
  return absl::OkStatus();
}

}  // namespace kiln
