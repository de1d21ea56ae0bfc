// C-style renderers: codegen::Program -> OpenCL C ("opencl") or CUDA C ("cuda"). Pure text, no device library
// (tinygrad renderer/cstyle.py: one base walking the linear program, dialects supplying the spellings).
//
// Kernel signature (fixed; backends/opencl and backends/cuda rely on it):
//   OpenCL: __kernel void <name>(__global T0* data0, ..., __global TN-1* dataN-1, long var0, ..., long varM-1)
//   CUDA:   extern "C" __global__ void __launch_bounds__(L) <name>(T0* data0, ..., long long var0, ...)
//     buffers in slot order (every slot 0..N-1 present, N = max(buffers.size(), max PARAM slot + 1)), then
//     Program::vars in order, always passed as 64-bit integers (the kernel narrows int32 vars itself), so a launcher
//     sets every var argument as an int64_t. L = local_size[0]*[1]*[2].
//
// Launch geometry: SPECIAL "gidxK" is the work-group / block index on dimension K (get_group_id / blockIdx),
// "lidxK" the index inside it (get_local_id / threadIdx), "idxK" the global work-item index (get_global_id; on CUDA
// blockIdx*blockDim+threadIdx). Program::global_size counts work-groups (blocks), local_size work-items per group.
//
// Memory: bool is stored as one byte (uchar) and loaded as `x != 0`; float16 and bfloat16 are stored as their
// 16-bit patterns (ushort) and live in registers as float, rounded back to 16 bits after every ALU op and cast
// (round to nearest even, NaN quieted), so results equal the LLVM renderer's bit for bit. The conversions are
// small helper functions in the preamble (bit operations; no cl_khr_fp16, no cuda_fp16.h needed).
// DEFINE_REG -> a private array, DEFINE_LOCAL -> __local / __shared__ array, BARRIER -> barrier / __syncthreads.
//
// Semantics follow llvm_ir.h: float MAX propagates NaN (and -0 < +0), CMPNE is true for NaN, integer division by
// zero yields 0 (guarded here too unless the divisor is a non-zero CONST), INT_MIN / -1 wraps, shift amounts are
// masked to the bit width, signed ADD/SUB/MUL/NEG/SHL wrap (computed in the unsigned type). Constants are rendered
// from their typed values bit-exactly (hex floats; Inf/NaN through bit casts).
//
// Identifiers are generated (data0, var0, v12, acc0, temp0); the only name taken from the Program is its kernel
// name, which must be a valid identifier (renderer.h). Unsupported: THREEFRY, CUSTOM, SPECIAL core_id, WMMA on OpenCL.
//
// WMMA (CUDA only, m16n8k16 half/bfloat16 -> float, sm_80+): an inline-PTX mma.sync helper in the preamble; its A/B
// fragments are half-like VECTORIZEs, which are not emitted as values of their own (only WMMA may use them).
#pragma once

#include <string>

#include "engine/codegen/render/renderer.h"

namespace kiln::codegen {

enum class CDialect { kOpenCL, kCuda };

class CStyleRenderer : public Renderer {
 public:
  explicit CStyleRenderer(CDialect dialect);
  std::string name() const override;
  const RendererCaps& caps() const override { return caps_; }
  absl::StatusOr<std::string> Render(const Program& program) const override;
  CDialect dialect() const { return dialect_; }

 private:
  CDialect dialect_;
  RendererCaps caps_;
};

class OpenClRenderer final : public CStyleRenderer {
 public:
  OpenClRenderer() : CStyleRenderer(CDialect::kOpenCL) {}
};

class CudaRenderer final : public CStyleRenderer {
 public:
  CudaRenderer() : CStyleRenderer(CDialect::kCuda) {}
};

}  // namespace kiln::codegen
