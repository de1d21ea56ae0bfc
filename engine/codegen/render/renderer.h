// Renderer: a linear program (docs/kernel-ir.md §3, codegen::Program) in, backend source text out.
//
// Renderers are pure (tinygrad's Renderer vs Compiler split): no device library, no global state, no I/O. The same
// Program always renders to the same text, so the text is a sound compile-cache key. Identifiers in the output are
// generated (%v12, %buf0); the only name taken from the Program is its kernel name, which must be an identifier
// ([A-Za-z_][A-Za-z0-9_]*, at most 200 bytes) and is rejected otherwise. User strings (Variable names, device names)
// never reach the output.
//
// Renderers are stateless and thread-safe; RendererFor hands out process-wide singletons.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/codegen/program.h"

namespace kiln::codegen {

// What a renderer's target can do; codegen consults it when lowering (tinygrad Renderer fields).
struct RendererCaps {
  bool has_local = false;          // GPU-style workgroups (SPECIAL lidx*, DEFINE_LOCAL, BARRIER)
  bool has_threads = false;        // CPU THREAD opt: SPECIAL "core_id" and Program::threads
  bool supports_half = true;       // float16 loads/stores/casts (arithmetic may be widened to float)
  bool supports_bfloat16 = true;
  bool native_transcendental = true;  // EXP2/LOG2/SIN/SQRT rendered directly (no polynomial decomposition)
  int64_t global_max[3] = {0, 0, 0};  // 0 = no global dims (CPU loops instead)
  int64_t local_max = 1;              // work-items per work-group the heuristic may use (has_local targets)
  int vector_bytes =
      16;  // SIMD register width the heuristic tiles for (CPU: 16 SSE/NEON, 32 AVX2, 64 AVX-512)
  bool wide_index = false;  // index math in 64 bits (codegen::Target::wide_index)
  bool supports_vectors = false;  // vector LOADs and GEPs (codegen::Target::supports_vectors)
  std::vector<TensorCore> tensor_cores;  // WMMA shapes the renderer emits (CUDA: m16n8k16 half/bf16 -> float)
};

class Renderer {
 public:
  virtual ~Renderer() = default;
  // The renderer's name, as in Device::renderer() and compile-cache keys ("llvm", "interp").
  virtual std::string name() const = 0;
  virtual const RendererCaps& caps() const = 0;
  // Renders the program. Errors: InvalidArgument for a malformed program (unknown slot, missing var, bad kernel
  // name, index dtype left over), Unimplemented for an op the target cannot express. Never aborts.
  virtual absl::StatusOr<std::string> Render(const Program& program) const = 0;
};

// The renderer registered under `name` ("llvm", "interp"); NotFound otherwise. The pointer lives forever.
absl::StatusOr<const Renderer*> RendererFor(std::string_view name);

// True when `name` is a valid generated identifier for kernel names ([A-Za-z_][A-Za-z0-9_]*, 1..200 bytes).
bool IsValidKernelName(std::string_view name);

}  // namespace kiln::codegen
