// Host-CPU feature policy shared by the CPU renderer (engine/codegen/render/llvm_ir.cc: the vector width the
// heuristics and BEAM size tiles for) and the CPU compiler (backends/cpu/cpu_compiler.cc: the features LLVM may use),
// so the two never disagree.
#pragma once

#include <cstdlib>
#include <string_view>

namespace kiln {

// Whether kiln compiles for AVX-512 (on hosts that have it): yes unless KILN_CPU_AVX512=0. With it, a 2048^3
// matmul runs at 393 GFLOPS against 204 at AVX2 width on a 2-core Sapphire Rapids (OpenBLAS: 408), and the CNN's
// training step in 195 ms against 323. It was off by default from issue #17 (LLVM 19.1's SLP vectorizer
// miscompiled the fused attention kernel at 512 bits on a Zen 4); the kernel has changed since, and
// attention_kernel_test and MiniLM against onnxruntime pass at 512 bits, also tuned for znver4/znver5. Read per
// call: tests set the variable before building their compilers.
inline bool CpuAvx512Allowed() {
  const char* v = std::getenv("KILN_CPU_AVX512");
  return v == nullptr || std::string_view(v) != "0";
}

}  // namespace kiln
