// CUDA backend ("CUDA", "CUDA:n"): CUDA C (engine/codegen/render/c_style.h) compiled with NVRTC to PTX and loaded
// with the driver API (cuModuleLoadData / cuLaunchKernel). Both libraries are dlopen'ed (cuda_api.h): without libcuda
// the kind is simply not registered, and NvrtcCompiler works on machines with the toolkit but no GPU (the rendering
// tests compile every conformance kernel with it).
//
//   NvrtcCompiler  source -> PTX for compute_<arch>; a failed compile is InvalidArgument carrying NVRTC's log.
//                  CacheKey() = NVRTC version + arch. Thread-safe (NVRTC programs are per call).
//   CudaAllocator  cuMemAlloc / cuMemFree, blocking copies; counts the bytes it holds (allocated_bytes()).
//   CudaProgram    a module from PTX; Launch = cuLaunchKernel on the device's stream with grid = global_size and
//                  block = local_size, args = buffers by slot then vars as 64-bit integers (the renderer's
//                  convention); events around the launch give the kernel time; the stream is synchronised before
//                  returning. Launches serialise on the device mutex.
//   CudaDevice     one GPU: its primary context (made current on every call, any thread) and one stream.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/runtime/device.h"
#include "engine/runtime/registry.h"

namespace kiln::backends {

struct CudaState;  // context, stream, device (cuda_device.cc)

class NvrtcCompiler final : public runtime::Compiler {
 public:
  // `arch` is the compute capability as digits ("90" for sm_90).
  explicit NvrtcCompiler(std::string arch);
  // NotFound when NVRTC cannot be loaded; InvalidArgument with the log when the source does not compile.
  absl::StatusOr<std::string> Compile(const std::string& source, const std::string& name) override;
  std::string CacheKey() const override;
  // Compiles for the real architecture sm_<arch> and returns the cubin: NVRTC then also assembles the PTX (inline
  // PTX included), so an assembler error is an InvalidArgument with the log here too. Unimplemented when this NVRTC
  // has no nvrtcGetCUBIN. Used by tests (no GPU needed); the device loads PTX from Compile.
  absl::StatusOr<std::string> CompileCubin(const std::string& source, const std::string& name);

 private:
  absl::StatusOr<std::string> Run(const std::string& source, const std::string& name, bool cubin);
  std::string arch_;
};

class CudaAllocator final : public runtime::Allocator {
 public:
  explicit CudaAllocator(std::shared_ptr<CudaState> st) : st_(std::move(st)) {}
  absl::StatusOr<runtime::DeviceMemory> Alloc(size_t nbytes) override;
  void Free(runtime::DeviceMemory mem) override;
  absl::Status CopyIn(runtime::DeviceMemory dst, const void* src, size_t nbytes) override;
  absl::Status CopyOut(void* dst, runtime::DeviceMemory src, size_t nbytes) override;
  int64_t allocated_bytes() const { return allocated_.load(); }

 private:
  std::shared_ptr<CudaState> st_;
  std::atomic<int64_t> allocated_{0};
};

class CudaDevice final : public runtime::Device {
 public:
  // The index-th GPU; NotFound without libcuda, without GPUs or for an index out of range.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(std::string name, int index);
  ~CudaDevice() override;
  const std::string& name() const override { return name_; }
  runtime::Allocator& allocator() override { return allocator_; }
  runtime::Compiler& compiler() override { return compiler_; }
  std::string renderer() const override { return "cuda"; }
  absl::StatusOr<std::unique_ptr<runtime::Program>> Load(const std::string& binary,
                                                         const std::string& name) override;
  absl::Status Synchronize() override;
  // mma.sync.m16n8k16 (the renderer's tensor cores) needs sm_80 or above.
  bool supports_tensor_cores() const override;
  // JIT replays as CUDA graphs (cuGraphCreate + cuGraphAddKernelNode, cuGraphInstantiateWithFlags, one cuGraphLaunch
  // per replay, cuGraphExecKernelNodeSetParams for new input buffers); on by default (JIT unset or 2). Unimplemented
  // when the driver lacks the graph entry points.
  absl::StatusOr<std::unique_ptr<runtime::GraphExec>> CreateGraph(std::vector<runtime::GraphItem> items) override;
  bool graphs_by_default() const override { return true; }
  const std::string& arch() const;

 private:
  CudaDevice(std::string name, std::shared_ptr<CudaState> st, std::string arch);
  std::string name_;
  std::shared_ptr<CudaState> st_;
  CudaAllocator allocator_;
  NvrtcCompiler compiler_;
};

// The number of parameters of `.entry <name>(...)` in PTX text, or -1 when there is no such entry. CudaProgram checks
// every launch's argument count against it (a mismatch is InvalidArgument, never a bad launch).
int PtxParamCount(const std::string& ptx, const std::string& name);

// GPUs visible to the driver (0 without libcuda). Never fails.
int CountCudaDevices();

// Registers kind "CUDA" when libcuda loads and at least one GPU exists; does nothing otherwise.
void RegisterCudaBackend(runtime::BackendRegistry& registry);

}  // namespace kiln::backends
