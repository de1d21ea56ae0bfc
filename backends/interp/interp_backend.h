// INTERP device: runs linear programs directly in an interpreter (backends/interp/interp_program.h); the exactness
// oracle every other backend is compared with. Renderer "interp" (engine/codegen/render/interp_text.h); its Compiler
// is the identity on that text and Load parses it once into an instruction array. Memory is 64-byte aligned host
// memory (runtime::HostAllocator).
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "engine/runtime/device.h"
#include "engine/runtime/host_allocator.h"
#include "engine/runtime/registry.h"

namespace kiln::backends {

class InterpCompiler final : public runtime::Compiler {
 public:
  // The "binary" is the source text itself, after a parse check (a malformed program fails here, not at Load).
  absl::StatusOr<std::string> Compile(const std::string& source, const std::string& name) override;
  std::string CacheKey() const override { return "interp-v1"; }
};

class InterpDevice final : public runtime::Device {
 public:
  explicit InterpDevice(std::string name = "INTERP") : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  runtime::Allocator& allocator() override { return allocator_; }
  runtime::Compiler& compiler() override { return compiler_; }
  std::string renderer() const override { return "interp"; }
  // Parses the interp text and builds the interpreter program. InvalidArgument for malformed text.
  absl::StatusOr<std::unique_ptr<runtime::Program>> Load(const std::string& binary, const std::string& name) override;
  // JIT=2 on this device: the prebuilt launch list (runtime::LaunchListGraph); not on by default.
  absl::StatusOr<std::unique_ptr<runtime::GraphExec>> CreateGraph(std::vector<runtime::GraphItem> items) override {
    return std::unique_ptr<runtime::GraphExec>(new runtime::LaunchListGraph(std::move(items)));
  }

 private:
  std::string name_;
  runtime::HostAllocator allocator_;
  InterpCompiler compiler_;
};

std::unique_ptr<runtime::Device> MakeInterpDevice();

// Registers kind "INTERP" (index 0 only) with `registry` (called by RegisterAllBackends).
void RegisterInterpBackend(runtime::BackendRegistry& registry);
// Registers with runtime::BackendRegistry::Global(); OK if it was already registered.
absl::Status RegisterInterpBackend();

}  // namespace kiln::backends
