// Hand-built kernel ASTs (docs/kernel-ir.md §2) and an INTERP runner, shared by the codegen and interp tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/interp/interp_backend.h"
#include "engine/base/status.h"
#include "engine/codegen/codegen.h"
#include "engine/codegen/render/interp_text.h"
#include "engine/uop/uop.h"

namespace kiln::testing {

inline UOpPtr Param(int64_t slot, DType d) { return UOp::Make(Op::PARAM, d.Ptr(), {}, slot); }
inline UOpPtr Idx(const UOpPtr& p, const UOpPtr& i) { return UOp::Make(Op::INDEX, p->dtype(), {p, i}); }
inline UOpPtr Idx(const UOpPtr& p, const UOpPtr& i, const UOpPtr& gate) {
  return UOp::Make(Op::INDEX, p->dtype(), {p, i, gate});
}
inline UOpPtr Ld(const UOpPtr& index) { return UOp::Make(Op::LOAD, index->dtype().Base().Scalar(), {index}); }
inline UOpPtr St(const UOpPtr& index, const UOpPtr& v) { return UOp::Make(Op::STORE, dtypes::kVoid, {index, v}); }
inline UOpPtr End(const UOpPtr& v, std::initializer_list<UOpPtr> ranges) {
  UOpVec s{v};
  for (const UOpPtr& r : ranges) s.push_back(r);
  return UOp::Make(Op::END, dtypes::kVoid, s);
}
inline UOpPtr Red(Op op, const UOpPtr& v, std::initializer_list<UOpPtr> ranges) {
  UOpVec s{v};
  for (const UOpPtr& r : ranges) s.push_back(r);
  return UOp::Make(Op::REDUCE, v->dtype(), s, op);
}
inline UOpPtr Kernel(std::initializer_list<UOpPtr> ends) { return UOp::Sink(std::vector<UOpPtr>(ends)); }

// ---- kernels ----

// out[i*m+j] = a[i*m+j] + b[i*m+j]
inline UOpPtr AddKernel(int64_t n, int64_t m) {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32), b = Param(2, dtypes::kFloat32);
  UOpPtr r0 = UOp::Range(n, 0), r1 = UOp::Range(m, 1);
  UOpPtr i = r0 * m + r1;
  return Kernel({End(St(Idx(out, i), Ld(Idx(a, i)) + Ld(Idx(b, i))), {r0, r1})});
}

// out[i*m+j] = a[i*m+j] * b[j]   (b broadcast along i)
inline UOpPtr BroadcastKernel(int64_t n, int64_t m) {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32), b = Param(2, dtypes::kFloat32);
  UOpPtr r0 = UOp::Range(n, 0), r1 = UOp::Range(m, 1);
  UOpPtr i = r0 * m + r1;
  return Kernel({End(St(Idx(out, i), Ld(Idx(a, i)) * Ld(Idx(b, r1))), {r0, r1})});
}

// out[i] = op_j a[i*m+j]
inline UOpPtr ReduceKernel(Op op, int64_t n, int64_t m) {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32);
  UOpPtr r0 = UOp::Range(n, 0), r1 = UOp::Range(m, 1, AxisType::kReduce);
  return Kernel({End(St(Idx(out, r0), Red(op, Ld(Idx(a, r0 * m + r1)), {r1})), {r0})});
}

// 2x2 max pool, stride 2, over n planes of h x w (h, w even): out[p, y, x] = max_{ky,kx} a[p, 2y+ky, 2x+kx].
inline UOpPtr MaxPoolKernel(int64_t n, int64_t h, int64_t w) {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32);
  const int64_t oh = h / 2, ow = w / 2;
  UOpPtr p = UOp::Range(n, 0), y = UOp::Range(oh, 1), x = UOp::Range(ow, 2);
  UOpPtr ky = UOp::Range(2, 3, AxisType::kReduce), kx = UOp::Range(2, 4, AxisType::kReduce);
  UOpPtr in = Ld(Idx(a, p * (h * w) + (y * 2 + ky) * w + x * 2 + kx));
  return Kernel(
      {End(St(Idx(out, p * (oh * ow) + y * ow + x), Red(Op::MAX, in, {ky, kx})), {p, y, x})});
}

// out[i*k+l] = sum_j a[i*kk+j] * b[j*k+l]  (n x kk) @ (kk x k)
inline UOpPtr MatmulKernel(int64_t n, int64_t k, int64_t kk) {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32), b = Param(2, dtypes::kFloat32);
  UOpPtr r0 = UOp::Range(n, 0), r1 = UOp::Range(k, 1), r2 = UOp::Range(kk, 2, AxisType::kReduce);
  UOpPtr prod = Ld(Idx(a, r0 * kk + r2)) * Ld(Idx(b, r2 * k + r1));
  return Kernel({End(St(Idx(out, r0 * k + r1), Red(Op::ADD, prod, {r2})), {r0, r1})});
}

// out[i] = ((1 < i < 10) ? a[i-2] : 0) + 1 for i in [0, 12); a has 8 elements (gated, padded load).
inline UOpPtr PadKernel() {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32);
  UOpPtr r0 = UOp::Range(12, 0);
  UOpPtr gate =
      UOp::Make(Op::AND, dtypes::kBool, {Lt(r0, 10), UOp::Make(Op::CMPLT, dtypes::kBool, {UOp::ConstInt(1), r0})});
  return Kernel({End(St(Idx(out, r0), Ld(Idx(a, r0 - 2, gate)) + UOp::Const(dtypes::kFloat32, 1.0)), {r0})});
}

// out0[i] = a[i] / b[i], out1[i] = a[i] % b[i] (int32 CDIV/CMOD), i in [0, n).
inline UOpPtr IntDivKernel(int64_t n) {
  UOpPtr o1 = Param(0, dtypes::kInt32), o2 = Param(1, dtypes::kInt32);
  UOpPtr a = Param(2, dtypes::kInt32), b = Param(3, dtypes::kInt32);
  UOpPtr r0 = UOp::Range(n, 0);
  UOpPtr x = Ld(Idx(a, r0)), y = Ld(Idx(b, r0));
  return Kernel({End(St(Idx(o1, r0), UOp::Make(Op::CDIV, dtypes::kInt32, {x, y})), {r0}),
                 End(St(Idx(o2, r0), UOp::Make(Op::CMOD, dtypes::kInt32, {x, y})), {r0})});
}

// out[i] = sum_j a[i*8+j] / max_k a[i*8+k], i in [0, 6): sibling reduce loops in one output loop.
inline UOpPtr TwoReduceKernel() {
  UOpPtr out = Param(0, dtypes::kFloat32), a = Param(1, dtypes::kFloat32);
  UOpPtr r0 = UOp::Range(6, 0), r1 = UOp::Range(8, 1, AxisType::kReduce), r2 = UOp::Range(8, 2, AxisType::kReduce);
  UOpPtr s = Red(Op::ADD, Ld(Idx(a, r0 * 8 + r1)), {r1});
  UOpPtr m = Red(Op::MAX, Ld(Idx(a, r0 * 8 + r2)), {r2});
  return Kernel({End(St(Idx(out, r0), UOp::Make(Op::FDIV, dtypes::kFloat32, {s, m})), {r0})});
}

// out[0] = sum_i a[i] (no output range: the STORE sits in the SINK); out2[i] = a[i] - max_j a[j] (a reduce that
// does not depend on the output range is hoisted out of it), i in [0, n).
inline UOpPtr FullReduceKernel(int64_t n) {
  UOpPtr out = Param(0, dtypes::kFloat32), out2 = Param(1, dtypes::kFloat32), a = Param(2, dtypes::kFloat32);
  UOpPtr r0 = UOp::Range(n, 0, AxisType::kReduce), r1 = UOp::Range(n, 1), r2 = UOp::Range(n, 2, AxisType::kReduce);
  UOpPtr total = Red(Op::ADD, Ld(Idx(a, r0)), {r0});
  UOpPtr mx = Red(Op::MAX, Ld(Idx(a, r2)), {r2});
  return Kernel({St(Idx(out, UOp::ConstInt(0)), total),
                 End(St(Idx(out2, r1), UOp::Make(Op::SUB, dtypes::kFloat32, {Ld(Idx(a, r1)), mx})), {r1})});
}

// Host buffer as bytes.
template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}
template <typename T>
std::vector<T> As(const std::vector<uint8_t>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

// Renders `p` as interp text, compiles and loads it on an INTERP device, runs it on `bufs` (in slot order, updated
// in place with the device's contents after the run).
inline absl::Status RunOnInterp(const codegen::Program& p, std::vector<std::vector<uint8_t>>& bufs,
                                std::vector<int64_t> vars = {}) {
  static backends::InterpDevice dev;
  codegen::InterpTextRenderer renderer;
  KILN_ASSIGN_OR_RETURN(std::string src, renderer.Render(p));
  KILN_ASSIGN_OR_RETURN(std::string bin, dev.compiler().Compile(src, p.name));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Program> prog, dev.Load(bin, p.name));
  std::vector<runtime::DeviceMemory> mem;
  for (const auto& b : bufs) {
    KILN_ASSIGN_OR_RETURN(runtime::DeviceMemory m, dev.allocator().Alloc(b.size()));
    KILN_RETURN_IF_ERROR(dev.allocator().CopyIn(m, b.data(), b.size()));
    mem.push_back(m);
  }
  runtime::LaunchDims dims;
  dims.threads = p.threads;
  for (int i = 0; i < 3; ++i) {
    dims.global[i] = p.global_size[i];
    dims.local[i] = p.local_size[i];
  }
  absl::StatusOr<double> r = prog->Launch(mem, vars, dims, false);
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (r.ok()) KILN_RETURN_IF_ERROR(dev.allocator().CopyOut(bufs[i].data(), mem[i], bufs[i].size()));
    dev.allocator().Free(mem[i]);
  }
  return r.status();
}

// Lowers and runs in one go.
inline absl::Status LowerAndRun(const UOpPtr& ast, const codegen::Target& t, const codegen::LowerOptions& o,
                                std::vector<std::vector<uint8_t>>& bufs, codegen::Program* out = nullptr) {
  KILN_ASSIGN_OR_RETURN(codegen::Program p, codegen::LowerKernel(ast, t, o));
  KILN_RETURN_IF_ERROR(RunOnInterp(p, bufs));
  if (out != nullptr) *out = std::move(p);
  return absl::OkStatus();
}

}  // namespace kiln::testing
