// Avx512TwoCoreLlvm: the codegen Target of a 2-core AVX-512 CPU as the LLVM backend reports it (threads, 64-byte
// vectors, vector ops, 64-bit indices), for tests that lower a kernel as it would be lowered there, whatever the
// machine running the test.
#pragma once

#include "engine/codegen/codegen.h"

namespace kiln::test_util {

inline codegen::Target Avx512TwoCoreLlvm() {
  codegen::Target cpu;
  cpu.renderer = "llvm";
  cpu.has_threads = true;
  cpu.max_threads = 2;
  cpu.supports_vectors = true;
  cpu.vector_bytes = 64;
  cpu.wide_index = true;
  return cpu;
}

}  // namespace kiln::test_util
