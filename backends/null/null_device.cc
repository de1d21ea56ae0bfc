#include "backends/null/null_device.h"

#include <cstdlib>

#include "engine/codegen/render/renderer.h"

namespace kiln::backends {

absl::StatusOr<std::string> NullCompiler::Compile(const std::string& source, const std::string& name) {
  if (source.empty()) return absl::InvalidArgumentError("null compiler: empty source");
  return source;
}

absl::StatusOr<std::unique_ptr<runtime::Program>> NullDevice::Load(const std::string& binary,
                                                                   const std::string& name) {
  return std::make_unique<NullProgram>();
}

void RegisterNullBackend(runtime::BackendRegistry& registry) {
  registry.Register("NULL", [](const std::string& name, int index) -> absl::StatusOr<std::unique_ptr<runtime::Device>> {
    if (index != 0) return absl::NotFoundError("the NULL device has only index 0");
    std::string renderer = "llvm";
    if (const char* r = std::getenv("KILN_NULL_RENDERER"); r != nullptr && codegen::RendererFor(r).ok()) renderer = r;
    return std::make_unique<NullDevice>(name, renderer);
  });
}

}  // namespace kiln::backends
