#include "engine/codegen/render/renderer.h"

#include "absl/strings/str_cat.h"
#include "engine/codegen/render/c_style.h"
#include "engine/codegen/render/interp_text.h"
#include "engine/codegen/render/llvm_ir.h"

namespace kiln::codegen {

absl::StatusOr<const Renderer*> RendererFor(std::string_view name) {
  static const LlvmIrRenderer* const llvm = new LlvmIrRenderer();
  static const InterpTextRenderer* const interp = new InterpTextRenderer();
  static const OpenClRenderer* const opencl = new OpenClRenderer();
  static const CudaRenderer* const cuda = new CudaRenderer();
  if (name == "llvm") return llvm;
  if (name == "interp") return interp;
  if (name == "opencl") return opencl;
  if (name == "cuda") return cuda;
  return absl::NotFoundError(absl::StrCat("unknown renderer '", std::string(name.substr(0, 64)),
                                          "' (available: cuda, interp, llvm, opencl)"));
}

bool IsValidKernelName(std::string_view name) {
  if (name.empty() || name.size() > 200) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

}  // namespace kiln::codegen
