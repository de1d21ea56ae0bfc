// Host-CPU feature policy shared by the CPU renderer (engine/codegen/render/llvm_ir.cc: the vector width the
// heuristics and BEAM size tiles for) and the CPU compiler (backends/cpu/cpu_compiler.cc: the features LLVM may use),
// so the two never disagree.
#pragma once

#include <cstdlib>
#include <string_view>

namespace kiln {

// Whether kiln compiles for AVX-512: only when KILN_CPU_AVX512=1. At 512-bit width LLVM 19.1's SLP vectorizer
// miscompiles the fused attention kernel (backends/cpu/cpu_compiler.cc has the details; issue #17), so it is off by
// default. Read per call: tests set the variable before building their compilers.
inline bool CpuAvx512Allowed() {
  const char* v = std::getenv("KILN_CPU_AVX512");
  return v != nullptr && std::string_view(v) == "1";
}

}  // namespace kiln
