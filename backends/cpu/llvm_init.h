// One-time LLVM native target initialisation shared by the CPU compiler and loader (backends/cpu internal).
#pragma once

#include <string>

#include "llvm/Support/Error.h"

namespace kiln::backends {

void InitLlvmOnce();
// llvm::Error -> message (consumes the error).
std::string LlvmErrorString(llvm::Error err);

}  // namespace kiln::backends
