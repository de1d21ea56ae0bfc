#include "backends/interp/interp_backend.h"
#include "backends/interp/interp_program.h"
#include "engine/base/status.h"
#include "engine/codegen/render/interp_text.h"

namespace kiln::backends {

absl::StatusOr<std::string> InterpCompiler::Compile(const std::string& source, const std::string& name) {
  KILN_ASSIGN_OR_RETURN(codegen::Program p, codegen::ParseInterpText(source));
  (void)p;
  return source;
}

absl::StatusOr<std::unique_ptr<runtime::Program>> InterpDevice::Load(const std::string& binary,
                                                                      const std::string& name) {
  KILN_ASSIGN_OR_RETURN(codegen::Program p, codegen::ParseInterpText(binary));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<interp::InterpProgram> prog, interp::InterpProgram::Create(p));
  return std::unique_ptr<runtime::Program>(std::move(prog));
}

std::unique_ptr<runtime::Device> MakeInterpDevice() { return std::make_unique<InterpDevice>(); }

void RegisterInterpBackend(runtime::BackendRegistry& registry) {
  registry.Register("INTERP", [](const std::string& name, int index) -> absl::StatusOr<std::unique_ptr<runtime::Device>> {
    if (index != 0) return absl::NotFoundError("INTERP has only device 0");
    return std::unique_ptr<runtime::Device>(std::make_unique<InterpDevice>(name));
  });
}

absl::Status RegisterInterpBackend() {
  RegisterInterpBackend(runtime::BackendRegistry::Global());
  return absl::OkStatus();
}

}  // namespace kiln::backends
