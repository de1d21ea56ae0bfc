// NULL device: compiles (renders, then "compiles" by keeping the source text as the binary), never runs (Launch
// returns 0 s without touching memory). Its allocator is real host memory, so copies work. Used for rendering tests
// and kernel-count tests on machines without the real backend (tinygrad's NULL). Needs no LLVM.
#pragma once

#include <memory>
#include <string>

#include "engine/runtime/device.h"
#include "engine/runtime/host_allocator.h"
#include "engine/runtime/registry.h"

namespace kiln::backends {

class NullCompiler final : public runtime::Compiler {
 public:
  // The binary is the source text itself.
  absl::StatusOr<std::string> Compile(const std::string& source, const std::string& name) override;
  std::string CacheKey() const override { return "null-v1"; }
};

class NullProgram final : public runtime::Program {
 public:
  absl::StatusOr<double> Launch(absl::Span<const runtime::DeviceMemory> bufs, absl::Span<const int64_t> vars,
                                const runtime::LaunchDims& dims, bool timed) override {
    return 0.0;
  }
};

class NullDevice final : public runtime::Device {
 public:
  // `renderer` is the renderer whose output this device "compiles" ("llvm" by default; any RendererFor name).
  explicit NullDevice(std::string name = "NULL", std::string renderer = "llvm")
      : name_(std::move(name)), renderer_(std::move(renderer)) {}
  const std::string& name() const override { return name_; }
  runtime::Allocator& allocator() override { return allocator_; }
  runtime::Compiler& compiler() override { return compiler_; }
  std::string renderer() const override { return renderer_; }
  absl::StatusOr<std::unique_ptr<runtime::Program>> Load(const std::string& binary, const std::string& name) override;
  bool executes() const override { return false; }

 private:
  std::string name_, renderer_;
  runtime::HostAllocator allocator_;
  NullCompiler compiler_;
};

// Registers kind "NULL" (only index 0). The renderer is "llvm" unless $KILN_NULL_RENDERER names another.
void RegisterNullBackend(runtime::BackendRegistry& registry);

}  // namespace kiln::backends
