// Runtime interfaces every backend implements (DESIGN.md §2: registry, device, buffer; ggml-backend's three layers).
//
//   Device     one execution target ("CPU", "CL:0", "CUDA:0", "INTERP", "NULL"): owns an Allocator, a Compiler and
//              the renderer name it wants; creates Programs from compiled binaries.
//   Allocator  raw device memory: Alloc/Free/CopyIn/CopyOut. Thread-safe.
//   Compiler   source text -> binary bytes (LLVM object, PTX/cubin, OpenCL binary, or the source itself).
//   Program    a loaded kernel: Launch(buffers, vars, launch dims) -> seconds if timing was asked.
//
// Everything returns absl::Status; a failing kernel compile carries the compiler's log in the message.
//
// The rest of engine/runtime: buffer.h (Buffer, BufferTable keyed by BUFFER UOps), registry.h (BackendRegistry,
// GetDevice; backends/register_all.h fills it), compile_cache.h (CompileCache memory+SQLite, CompileKernel =
// render + cached compile + load), host_allocator.h (64-byte aligned host memory for CPU/NULL/INTERP).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kiln::runtime {

// Opaque device memory handle; `ptr` is a host pointer for host-visible devices (CPU, INTERP).
struct DeviceMemory {
  void* ptr = nullptr;
  uint64_t handle = 0;  // backend-specific (cl_mem, CUdeviceptr)
  size_t nbytes = 0;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual absl::StatusOr<DeviceMemory> Alloc(size_t nbytes) = 0;
  virtual void Free(DeviceMemory mem) = 0;
  virtual absl::Status CopyIn(DeviceMemory dst, const void* src, size_t nbytes) = 0;
  virtual absl::Status CopyOut(void* dst, DeviceMemory src, size_t nbytes) = 0;
};

struct LaunchDims {
  int64_t global[3] = {1, 1, 1};
  int64_t local[3] = {1, 1, 1};
  int threads = 1;  // CPU: number of core_id values (THREAD opt)
};

class Program {
 public:
  virtual ~Program() = default;
  // Runs the kernel. `bufs` in slot order, `vars` in the Program's var order. Returns the kernel time in seconds when
  // `timed` (0 otherwise).
  virtual absl::StatusOr<double> Launch(absl::Span<const DeviceMemory> bufs, absl::Span<const int64_t> vars,
                                        const LaunchDims& dims, bool timed) = 0;
};

// One kernel launch of a device graph (a JIT replay's captured sequence).
struct GraphItem {
  Program* program = nullptr;      // loaded by the graph's device; outlives the graph
  std::vector<DeviceMemory> bufs;  // slot order
  std::vector<int64_t> vars;       // the Program's var order
  LaunchDims dims;
};

// A sequence of kernel launches on one device, recorded once and replayed by one Launch (tinygrad's GraphRunner;
// CUDA graphs on CUDA). Buffers of an item may be swapped between replays without re-recording (a JIT's new
// inputs). Not thread-safe; one graph is replayed from one thread at a time.
class GraphExec {
 public:
  virtual ~GraphExec() = default;
  // Item `i`'s buffers for the following Launches (same count as recorded). InvalidArgument for a bad index/count.
  virtual absl::Status UpdateBuffers(size_t i, absl::Span<const DeviceMemory> bufs) = 0;
  // Runs every item in order. Like Program::Launch it may return before the device is done (Device::Synchronize).
  virtual absl::Status Launch() = 0;
};

// The graph of devices without a native one: the items kept in a prebuilt list and launched in order by one call
// (no per-replay argument marshalling). CPU and INTERP use it, so the JIT's graph path (JIT=2) runs and is tested
// on machines without a GPU.
class LaunchListGraph final : public GraphExec {
 public:
  explicit LaunchListGraph(std::vector<GraphItem> items) : items_(std::move(items)) {}
  absl::Status UpdateBuffers(size_t i, absl::Span<const DeviceMemory> bufs) override;
  absl::Status Launch() override;

 private:
  std::vector<GraphItem> items_;
};

class Compiler {
 public:
  virtual ~Compiler() = default;
  // Compiles source text into the device's binary form. `name` is the kernel's entry symbol.
  virtual absl::StatusOr<std::string> Compile(const std::string& source, const std::string& name) = 0;
  // Identifies target + compiler version, part of every compile-cache key.
  virtual std::string CacheKey() const = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const std::string& name() const = 0;
  virtual Allocator& allocator() = 0;
  virtual Compiler& compiler() = 0;
  // The renderer this device wants ("llvm", "opencl", "cuda", "interp").
  virtual std::string renderer() const = 0;
  // Loads a compiled binary (for INTERP the "binary" is the printed linear program, parsed back at load).
  virtual absl::StatusOr<std::unique_ptr<Program>> Load(const std::string& binary, const std::string& name) = 0;
  virtual absl::Status Synchronize() { return absl::OkStatus(); }
  // Whether Launch actually executes (false for NULL).
  virtual bool executes() const { return true; }
  // Whether codegen may use the renderer's tensor cores (RendererCaps::tensor_cores) on this device (CUDA: compute
  // capability 8.0 or above, which mma.sync m16n8k16 needs).
  virtual bool supports_tensor_cores() const { return true; }
  // Records `items` (programs loaded by this device, in launch order) as one device graph. Optional capability:
  // Unimplemented by default (the JIT then replays kernel by kernel).
  virtual absl::StatusOr<std::unique_ptr<GraphExec>> CreateGraph(std::vector<GraphItem> items) {
    (void)items;
    return absl::UnimplementedError("device graphs are not supported on this device");
  }
  // Whether the JIT batches replays into graphs when JIT is not set in the environment (tinygrad: graphs are the
  // default where a device has them; here CUDA). JIT=2 forces graphs wherever CreateGraph works, JIT=1 disables.
  virtual bool graphs_by_default() const { return false; }
};

}  // namespace kiln::runtime
