// OpenCL backend ("CL", "CL:n"): OpenCL C (engine/codegen/render/c_style.h) built through the ICD loader (ocl-icd),
// PoCL on the CPU in CI, any OpenCL GPU in production. Only this folder includes <CL/...> (in the .cc files).
//
//   ClAllocator  cl_mem buffers (DeviceMemory::handle = the cl_mem; ptr stays null: device memory is not host
//                visible). Copies are blocking reads/writes on the device's queue.
//   ClCompiler   source -> clBuildProgram (the check: a failed build is InvalidArgument carrying the build log) -> the
//                artifact the compile cache stores, which is the checked source behind a tag, not the driver's
//                program binary. PoCL's binaries are not self-contained: one saved while PoCL's own kernel cache
//                held part of the program and loaded against another PoCL cache aborts the process inside
//                clCreateProgramWithBinary (pocl_binary.c `len > 0`), which no status can catch. Building from
//                source on load is cheap where it matters (PoCL and GPU drivers keep their own source-hash caches).
//                CacheKey() = platform, device, driver and OpenCL versions, and the artifact format (v2).
//   ClProgram    a kernel created from a built program. Launch sets the arguments (buffers by slot, then every var as a
//                64-bit integer, the renderer's convention), enqueues an NDRange of global*local work-items with the
//                program's local size (or none when it is all ones: the driver chooses), waits for it, and returns
//                the profiling-event time (END - START) when `timed`.
//   ClDevice     one OpenCL device, with its context and an in-order profiling queue. Thread-safe: launches and
//                copies serialise on the queue's mutex (kernel arguments are per-kernel state).
//
// Devices are enumerated over every platform (CL_DEVICE_TYPE_ALL) in platform order; "CL" is "CL:0".
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/runtime/device.h"
#include "engine/runtime/registry.h"

namespace kiln::backends {

struct ClState;  // context, queue, device ids (cl_device.cc)

class ClAllocator final : public runtime::Allocator {
 public:
  explicit ClAllocator(std::shared_ptr<ClState> st) : st_(std::move(st)) {}
  absl::StatusOr<runtime::DeviceMemory> Alloc(size_t nbytes) override;
  void Free(runtime::DeviceMemory mem) override;
  absl::Status CopyIn(runtime::DeviceMemory dst, const void* src, size_t nbytes) override;
  absl::Status CopyOut(void* dst, runtime::DeviceMemory src, size_t nbytes) override;

 private:
  std::shared_ptr<ClState> st_;
};

class ClCompiler final : public runtime::Compiler {
 public:
  explicit ClCompiler(std::shared_ptr<ClState> st);
  absl::StatusOr<std::string> Compile(const std::string& source, const std::string& name) override;
  std::string CacheKey() const override { return cache_key_; }

 private:
  std::shared_ptr<ClState> st_;
  std::string cache_key_;
};

class ClDevice final : public runtime::Device {
 public:
  // The index-th OpenCL device of the machine; NotFound when there is none (no ICD, no platform, index too large).
  static absl::StatusOr<std::unique_ptr<ClDevice>> Create(std::string name, int index);
  const std::string& name() const override { return name_; }
  runtime::Allocator& allocator() override { return allocator_; }
  runtime::Compiler& compiler() override { return compiler_; }
  std::string renderer() const override { return "opencl"; }
  absl::StatusOr<std::unique_ptr<runtime::Program>> Load(const std::string& binary,
                                                         const std::string& name) override;
  absl::Status Synchronize() override;
  // The OpenCL device name (CL_DEVICE_NAME), e.g. "pthread-skylake-avx512".
  const std::string& device_name() const;

 private:
  ClDevice(std::string name, std::shared_ptr<ClState> st);
  std::string name_;
  std::shared_ptr<ClState> st_;
  ClAllocator allocator_;
  ClCompiler compiler_;
};

// The number of OpenCL devices on the machine (0 without an ICD or platform). Never fails.
int CountOpenClDevices();

// Registers kind "CL" when at least one OpenCL device exists; does nothing otherwise.
void RegisterOpenClBackend(runtime::BackendRegistry& registry);

}  // namespace kiln::backends
