// codegen::Program: a kernel lowered to the linear form of docs/kernel-ir.md §3, ready for a renderer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/dtype/dtype.h"
#include "engine/uop/uop.h"

namespace kiln::codegen {

// One tensor-core instruction shape a renderer can emit (tinygrad TensorCore): a warp of `threads` work-items
// computes D(m x n, acc) = A(m x k, in) * B(k x n, in_b) + C(m x n, acc) with the WMMA op; each work-item holds
// m*k/threads elements of A, k*n/threads of B and m*n/threads of C/D in the fragment layout of the instruction
// (docs/kernel-ir.md, WMMA). Two layouts exist: CUDA's m16n8k16 (a warp of 32) and the CPU's integer dot product
// m1n16k4 (one work-item: AVX-512 VNNI's vpdpbusd).
struct TensorCore {
  int m = 16, n = 8, k = 16;
  ScalarType in = ScalarType::kFloat16;
  ScalarType acc = ScalarType::kFloat32;
  int threads = 32;
  ScalarType in_b = ScalarType::kVoid;  // B's dtype where it differs from A's (kVoid: the same as `in`)
  ScalarType b_type() const { return in_b == ScalarType::kVoid ? in : in_b; }
  int a_elems() const { return m * k / threads; }
  int b_elems() const { return k * n / threads; }
  int c_elems() const { return m * n / threads; }
  // The CPU layout: one work-item, A one row of 4 consecutive k, B 16 columns of 4 k each, lane-major.
  bool cpu_dot() const { return threads == 1 && m == 1 && n == 16 && k == 4; }
};

// CUDA sm_80+ mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: half->float and bfloat16->float.
inline std::vector<TensorCore> CudaTensorCores() {
  return {TensorCore{16, 8, 16, ScalarType::kFloat16, ScalarType::kFloat32, 32},
          TensorCore{16, 8, 16, ScalarType::kBFloat16, ScalarType::kFloat32, 32}};
}

// x86 AVX-512 VNNI vpdpbusd (zmm): D[i] = C[i] + sum_j A[j] * B[16j + i] for 16 int32 lanes i and j = 0..3, one
// operand unsigned 8-bit and the other signed, the four products and the sum exact and the add to C wrapping, as
// int32 arithmetic is. A is one row's four consecutive k (broadcast to every lane), B four k-rows of sixteen columns
// (row-major; the renderer interleaves them into the instruction's column-major lanes with one byte permute).
inline std::vector<TensorCore> CpuVnniTensorCores() {
  return {TensorCore{1, 16, 4, ScalarType::kUInt8, ScalarType::kInt32, 1, ScalarType::kInt8},
          TensorCore{1, 16, 4, ScalarType::kInt8, ScalarType::kInt32, 1, ScalarType::kUInt8}};
}

struct BufferParam {
  int64_t slot = 0;
  DType dtype;          // element dtype (not the pointer)
  int64_t size = 0;     // elements the kernel may touch (upper bound)
  bool is_output = false;
};

struct Program {
  std::string name;                 // tinygrad-style: "E_4_16", "r_16_4_32"; generated, never user text
  std::vector<UOpPtr> uops;         // linear order: each node after its sources; see docs/kernel-ir.md §3
  std::vector<BufferParam> buffers; // by slot
  std::vector<UOpPtr> vars;         // DEFINE_VAR nodes, in launch-argument order
  int64_t global_size[3] = {1, 1, 1};
  int64_t local_size[3] = {1, 1, 1};
  int threads = 1;                  // CPU THREAD opt: launch runs core_id = 0..threads-1
  std::vector<std::string> applied_opts;  // for DEBUG=3, e.g. "UPCAST(0,4)"
  int64_t flops = 0;                // estimates for DEBUG=2 GFLOPS and GB/s
  int64_t mem_bytes = 0;
  // The kernel's register tile broadcasts one scalar per tile row from addresses a row apart (MatmulTile's
  // strided-store lane axis): a backend should keep those scalar loads, not pack them into gathers.
  bool no_gather = false;
  // An elementwise kernel whose loads move by more than one element along its innermost output axis (a transpose):
  // its stores stay scalar, and the CPU renderer then does not make them streaming stores.
  bool strided_loads = false;
  // The widest vector (in elements) a backend's auto-vectorizer should form from the kernel's scalar lanes; 0 = no
  // limit. Set for register tiles whose accumulator count LLVM's SLP vectorizer cannot cover with its power-of-two
  // chunks (a 7-row tile: see MatmulTile), so it packs them one register at a time.
  int slp_max_vf = 0;
};

// The buffer parameters a rendered Program takes: one per slot up to the highest it has (renderers declare
// unused slots below it too). A schedule item may carry more buffers than that when its kernel reads none of
// its last ones (a view entirely in the padding of a read); launches pass only the first ParamCount.
inline int64_t ParamCount(const Program& p) {
  int64_t n = 0;
  for (const BufferParam& b : p.buffers) n = b.slot + 1 > n ? b.slot + 1 : n;
  return n;
}

}  // namespace kiln::codegen
