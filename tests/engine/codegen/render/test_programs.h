// Hand-built linear programs (docs/kernel-ir.md §3) shared by the renderer and backend tests.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "engine/codegen/program.h"
#include "engine/uop/uop.h"

namespace kiln::testprog {

inline UOpPtr Param(int64_t slot, DType d) { return UOp::Make(Op::PARAM, d.Ptr(), {}, Arg(slot)); }
inline UOpPtr I32(int64_t v) { return UOp::Const(dtypes::kInt32, v); }
inline UOpPtr F32(double v) { return UOp::Const(dtypes::kFloat32, v); }
inline UOpPtr Range(const UOpPtr& end, int64_t id, AxisType t = AxisType::kLoop) {
  return UOp::Make(Op::RANGE, end->dtype(), {end}, Arg(AxisArg{id, t}));
}
inline UOpPtr Index(const UOpPtr& buf, const UOpPtr& idx) { return UOp::Make(Op::INDEX, buf->dtype(), {buf, idx}); }
inline UOpPtr IndexGated(const UOpPtr& buf, const UOpPtr& idx, const UOpPtr& gate) {
  return UOp::Make(Op::INDEX, buf->dtype(), {buf, idx, gate});
}
inline UOpPtr IndexVec(const UOpPtr& buf, const UOpPtr& idx, uint16_t n) {
  return UOp::Make(Op::INDEX, buf->dtype().Base().Vec(n).Ptr(buf->dtype().addrspace), {buf, idx});
}
inline UOpPtr Load(const UOpPtr& index) { return UOp::Make(Op::LOAD, index->dtype().Base(), {index}); }
inline UOpPtr LoadGated(const UOpPtr& index, const UOpPtr& alt, const UOpPtr& gate) {
  return UOp::Make(Op::LOAD, index->dtype().Base(), {index, alt, gate});
}
inline UOpPtr Store(const UOpPtr& index, const UOpPtr& v) { return UOp::Make(Op::STORE, dtypes::kVoid, {index, v}); }
inline UOpPtr StoreGated(const UOpPtr& index, const UOpPtr& v, const UOpPtr& gate) {
  return UOp::Make(Op::STORE, dtypes::kVoid, {index, v, gate});
}
inline UOpPtr End(std::vector<UOpPtr> srcs) { return UOp::Make(Op::END, dtypes::kVoid, absl::MakeConstSpan(srcs)); }
inline UOpPtr Alu(Op op, std::vector<UOpPtr> srcs) { return UOp::Alu(op, absl::MakeConstSpan(srcs)); }
inline UOpPtr CastTo(const UOpPtr& x, DType d) { return UOp::Make(Op::CAST, d, {x}); }
inline UOpPtr CoreId(int64_t n) { return UOp::Make(Op::SPECIAL, dtypes::kInt32, {I32(n)}, Arg(std::string("core_id"))); }

// A program whose uops are the Toposort of `roots` (valid for single-level loops without post-loop reloads).
inline codegen::Program FromRoots(std::string name, std::vector<UOpPtr> roots, std::vector<codegen::BufferParam> bufs,
                                  std::vector<UOpPtr> vars = {}) {
  codegen::Program p;
  p.name = std::move(name);
  for (const UOp* u : Toposort(absl::MakeConstSpan(roots))) p.uops.push_back(UOpPtr::FromRaw(u));
  p.buffers = std::move(bufs);
  p.vars = std::move(vars);
  return p;
}

// `order` with every missing source inserted (children first) just before its first user.
inline std::vector<UOpPtr> Complete(const std::vector<UOpPtr>& order) {
  std::vector<UOpPtr> out;
  std::vector<const UOp*> seen;
  for (const UOpPtr& u : order) {
    for (const UOp* x : Toposort(u)) {
      if (std::find(seen.begin(), seen.end(), x) != seen.end()) continue;
      seen.push_back(x);
      out.push_back(UOpPtr::FromRaw(x));
    }
  }
  return out;
}

inline codegen::BufferParam Buf(int64_t slot, DType d, int64_t n, bool out) {
  codegen::BufferParam b;
  b.slot = slot;
  b.dtype = d;
  b.size = n;
  b.is_output = out;
  return b;
}

// out[i] = a[i] + b[i], i < n (float32). Slots: 0 out, 1 a, 2 b.
inline codegen::Program ElementwiseAdd(int64_t n) {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32), b = Param(2, dtypes::kFloat32);
  UOpPtr r = Range(I32(n), 0);
  UOpPtr s = Alu(Op::ADD, {Load(Index(a, r)), Load(Index(b, r))});
  UOpPtr e = End({Store(Index(out, r), s), r});
  return FromRoots("E_" + std::to_string(n), {e},
                   {Buf(0, dtypes::kFloat32, n, true), Buf(1, dtypes::kFloat32, n, false),
                    Buf(2, dtypes::kFloat32, n, false)});
}

// out[i] = sum_j a[i*m + j] with a DEFINE_REG accumulator (the lowered-reduction shape of kernel-ir.md §3).
inline codegen::Program RowSum(int64_t n, int64_t m) {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32);
  UOpPtr acc = UOp::Make(Op::DEFINE_REG, dtypes::kFloat32.Ptr(AddrSpace::kReg), {}, Arg(int64_t{1}));
  UOpPtr r0 = Range(I32(n), 0);
  UOpPtr iacc = Index(acc, I32(0));
  UOpPtr init = Store(iacc, F32(0.0));
  UOpPtr r1 = Range(I32(m), 1, AxisType::kReduce);
  UOpPtr v = Load(iacc);
  UOpPtr mul = Alu(Op::MUL, {r0, I32(m)});
  UOpPtr aidx = Alu(Op::ADD, {mul, r1});
  UOpPtr x = Load(Index(a, aidx));
  UOpPtr upd = Store(iacc, Alu(Op::ADD, {v, x}));
  UOpPtr e1 = End({upd, r1});
  UOpPtr after = UOp::Make(Op::AFTER, acc->dtype(), {acc, e1});
  UOpPtr iacc2 = Index(after, I32(0));
  UOpPtr total = Load(iacc2);
  UOpPtr st = Store(Index(out, r0), total);
  UOpPtr e0 = End({st, r0});
  codegen::Program p;
  p.name = "r_" + std::to_string(n) + "_" + std::to_string(m);
  p.uops = Complete({out, a, acc, r0, iacc, init, r1, v, mul, aidx, x, upd, e1, after, iacc2, total, st, e0});
  p.buffers = {Buf(0, dtypes::kFloat32, n, true), Buf(1, dtypes::kFloat32, n * m, false)};
  return p;
}

}  // namespace kiln::testprog
