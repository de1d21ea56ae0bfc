// LLVM IR renderer ("llvm"): codegen::Program -> LLVM 19 textual IR. Pure text; includes no LLVM header.
//
// Calling convention (fixed; backends/cpu relies on it):
//
//   define internal void @<name>(ptr noalias align 32 %buf0, ..., ptr noalias align 32 %bufN-1,
//                                <i32|i64> %var0, ..., <i32|i64> %varM-1, i32 %core_id)
//     buffers in slot order (slot k -> %bufk; every slot 0..N-1 is present, N = max(buffers.size(), max PARAM
//     slot + 1)), then Program::vars in order (typed by their DEFINE_VAR dtype, int32 or int64), then the CPU
//     thread index. Buffers must be 32-byte aligned and must not overlap (noalias). Internal and alwaysinline: -O2
//     inlines it into the trampoline below and deletes it, so the object holds the kernel's code once (as external,
//     it was optimized and emitted twice, once on its own and once inlined: 38% of LLVM's time per kernel).
//
//   define void @<name>.entry(ptr %bufs, ptr %vars, i32 %core_id)
//     a trampoline with one signature for every kernel: `bufs` points at N `void*`, `vars` at M `int64_t` (each
//     truncated to its var's width). backends/cpu looks this symbol up and calls it once per core_id.
//
//   @<name>.info = constant [2 x i32] [i32 N, i32 M]
//     the kernel's buffer and var counts, so a launcher can check its arguments.
//
// Semantics of the rendered code (docs/kernel-ir.md §3):
//   - RANGE/END become a guarded do-while loop (header check `0 < end`, phi induction variable, latch block); IF/ENDIF
//     become branches. DEFINE_REG/DEFINE_LOCAL become entry-block allocas (align 32), promoted to registers by -O2.
//   - Gated LOAD/STORE branch around the memory access, so a false gate never touches memory; gated LOADs yield
//     their alt (0 when absent). Vector INDEX = a contiguous access at an element offset; every access is aligned to
//     the scalar item size only. GEP strides are in units of the pointer's element dtype. bool is i8 in memory.
//   - Integer CDIV/CMOD/FLOORDIV/FLOORMOD never trap: division by zero yields 0 and INT_MIN / -1 wraps (its
//     remainder is 0); the guard is skipped when the divisor is a CONST other than 0 and -1.
//     Shift amounts are masked to the bit width (no poison).
//   - A Program with no_gather gives the kernel function the string attribute "kiln-no-gather" (attributes #0),
//     which LLVM ignores; backends/cpu then compiles the module with gathers and scatters off.
//   - Stores to buffers carry !nontemporal (streaming stores) in elementwise ("E_") kernels whose outputs total
//     >= 16 MiB; nothing else changes. The CPU backend's -O2 pipeline runs the SLP vectorizer (not the loop
//     vectorizer, see backends/cpu/cpu_compiler.cc), which turns the straight-line UPCAST/UNROLL copies into vector
//     code.
//   - Floats: no fast-math flags anywhere except `contract` on MULACC's fmul/fadd. MAX on floats is llvm.maximum
//     (NaN-propagating, -0 < +0). CMPNE is `fcmp une` (true for NaN), CMPLT/CMPEQ are ordered.
//     EXP2/LOG2/SIN/SQRT/TRUNC/POW are llvm intrinsics. half and bfloat ALU ops are computed in float and rounded
//     back; bfloat<->float conversions are rendered as integer bit operations (round-to-nearest-even, NaN quieted)
//     so no compiler-rt call is needed.
//   - Constants are rendered from their typed values bit-exactly: hex doubles (0x...) for float/double, 0xH.... for
//     half and 0xR.... for bfloat (rounded to nearest even from the double arg), NaN/Inf included.
//   - WMMA m1n16k4 (uint8 x int8 or int8 x uint8 -> int32, the CPU tensor core of program.h) is one AVX-512 VNNI
//     vpdpbusd; the caps declare it only where the host has AVX-512 VNNI and kiln compiles for 512 bits.
//   - Unsupported here: SPECIAL other than "core_id" (the CPU has no global/local dims), other WMMA shapes, THREEFRY,
//     CUSTOM.
#pragma once

#include <string>

#include "engine/codegen/render/renderer.h"

namespace kiln::codegen {

class LlvmIrRenderer final : public Renderer {
 public:
  // fp_contract: float ADD/SUB/MUL carry LLVM's `contract` flag, so a multiply feeding an add may become one FMA
  // (one rounding instead of two). On by default; off makes the output bit-identical to the interpreter, which
  // rounds every operation (tests/backends/interp/interp_vs_cpu_test.cc).
  explicit LlvmIrRenderer(bool fp_contract = true) : fp_contract_(fp_contract) {}
  std::string name() const override { return "llvm"; }
  const RendererCaps& caps() const override;
  absl::StatusOr<std::string> Render(const Program& program) const override;

 private:
  bool fp_contract_;
};

// Exposed for tests: IEEE binary16 / bfloat16 bits of `v`, rounded to nearest even (NaN -> quiet NaN, overflow ->
// Inf).
uint16_t DoubleToHalfBits(double v);
uint16_t DoubleToBFloat16Bits(double v);

}  // namespace kiln::codegen
