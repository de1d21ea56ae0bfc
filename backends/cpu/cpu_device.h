// CPU backend: LLVM IR text (engine/codegen/render/llvm_ir.h) compiled in process with LLVM 19 and run with ORC.
//
//   CpuAllocator  64-byte aligned host memory.
//   CpuCompiler   IR text -> parse (llvm::parseAssemblyString) -> verify -> O2 (new pass manager) for the host CPU and
//                 its features (AVX-512 where present) -> ELF object bytes (TargetMachine::addPassesToEmitFile). The
//                 object is the "binary" the compile cache stores; CacheKey() = LLVM version, triple, CPU, features.
//                 Thread-safe: each Compile has its own LLVMContext and TargetMachine.
//   CpuProgram    a kernel loaded into its own JITDylib of the device's one LLJIT (one LLJIT per device: cheap loads,
//                 one symbol namespace per kernel so equal kernel names never clash; the JITDylib is removed when the
//                 program is destroyed). Launch calls `<name>.entry(bufs, vars, core_id)` for core_id = 0..threads-1
//                 on the device's thread pool (sized to the cores, created on first multi-thread launch) and blocks
//                 until all return. Checks the buffer/var counts against `<name>.info` and that every buffer is
//                 32-byte aligned (the renderer's `align 32` promise). Programs keep the JIT alive (shared state).
//   CpuDevice     "CPU": renderer "llvm".
//
// This header includes no LLVM header (only backends/cpu/*.cc do).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/runtime/device.h"
#include "engine/runtime/host_allocator.h"
#include "engine/runtime/registry.h"

namespace kiln::backends {

class ThreadPool;
struct CpuJit;  // LLJIT + lock (cpu_device.cc)

class CpuAllocator final : public runtime::HostAllocator {};

class CpuCompiler final : public runtime::Compiler {
 public:
  // Empty cpu/features = the host's (llvm::sys::getHostCPUName / getHostCPUFeatures).
  explicit CpuCompiler(std::string cpu = "", std::string features = "");
  // InvalidArgument with LLVM's diagnostic for IR that does not parse or verify; Internal for codegen failures.
  absl::StatusOr<std::string> Compile(const std::string& source, const std::string& name) override;
  std::string CacheKey() const override { return cache_key_; }
  const std::string& cpu() const { return cpu_; }

 private:
  std::string triple_, cpu_, features_, cache_key_;
};

// Floating-point multiplies, adds and multiply-adds in the innermost loops of an LLVM IR module, scalar and vector.
// CpuCompiler counts them after -O2 in a kernel compiled under an SLP cap (Program::slp_max_vf): a reduce loop the
// cap left with more scalar than vector arithmetic is optimized again without the cap.
struct InnerLoopArith {
  int scalar = 0, vector = 0;
};
absl::StatusOr<InnerLoopArith> CountInnerLoopArith(const std::string& source);

class CpuProgram final : public runtime::Program {
 public:
  using EntryFn = void (*)(void* const* bufs, const int64_t* vars, int32_t core_id);
  CpuProgram(std::shared_ptr<CpuJit> jit, void* dylib, EntryFn fn, int nbufs, int nvars,
             std::shared_ptr<ThreadPool> pool)
      : jit_(std::move(jit)), dylib_(dylib), fn_(fn), nbufs_(nbufs), nvars_(nvars), pool_(std::move(pool)) {}
  ~CpuProgram() override;
  absl::StatusOr<double> Launch(absl::Span<const runtime::DeviceMemory> bufs, absl::Span<const int64_t> vars,
                                const runtime::LaunchDims& dims, bool timed) override;

 private:
  std::shared_ptr<CpuJit> jit_;
  void* dylib_;  // llvm::orc::JITDylib*
  EntryFn fn_;
  int nbufs_, nvars_;
  std::shared_ptr<ThreadPool> pool_;
};

class CpuDevice final : public runtime::Device {
 public:
  // Fails if LLVM cannot create a JIT for the host.
  static absl::StatusOr<std::unique_ptr<CpuDevice>> Create(std::string name = "CPU");
  ~CpuDevice() override;
  const std::string& name() const override { return name_; }
  runtime::Allocator& allocator() override { return allocator_; }
  runtime::Compiler& compiler() override { return compiler_; }
  std::string renderer() const override { return "llvm"; }
  // Loads an object produced by CpuCompiler; `name` is the kernel name it was compiled with.
  absl::StatusOr<std::unique_ptr<runtime::Program>> Load(const std::string& binary, const std::string& name) override;
  // JIT=2 on this device: the prebuilt launch list (runtime::LaunchListGraph); not on by default.
  absl::StatusOr<std::unique_ptr<runtime::GraphExec>> CreateGraph(std::vector<runtime::GraphItem> items) override {
    return std::unique_ptr<runtime::GraphExec>(new runtime::LaunchListGraph(std::move(items)));
  }
  // A run of kernels ended: the launch pool's workers sleep rather than spin (ThreadPool::Rest).
  absl::Status Synchronize() override;
  // Threads in the launch pool (= hardware threads).
  int num_cores() const { return num_cores_; }

 private:
  CpuDevice(std::string name, std::shared_ptr<CpuJit> jit);
  std::shared_ptr<ThreadPool> Pool();

  std::string name_;
  CpuAllocator allocator_;
  CpuCompiler compiler_;
  std::shared_ptr<CpuJit> jit_;
  int num_cores_;
  std::mutex pool_mu_;
  std::shared_ptr<ThreadPool> pool_;
};

// Registers kind "CPU" (only index 0).
void RegisterCpuBackend(runtime::BackendRegistry& registry);

}  // namespace kiln::backends
