// Buffer and BufferTable: device memory for realized BUFFER nodes (docs/kernel-ir.md §1).
//
// A Buffer owns `numel * dtype.ItemSize()` bytes on one Device and frees them on destruction (through the device's
// allocator). Buffers are shared (std::shared_ptr): a JIT replay or a view may hold the same memory as a BUFFER node.
//
// BufferTable maps a BUFFER UOp (by pointer) to its Buffer. It registers itself as UOp's BufferDeathHook the first
// time Global() is called, so the table entry -- and with the last shared_ptr the memory -- goes away exactly when
// the BUFFER node dies. Thread-safe: Attach/Lookup/Detach may run on any thread, concurrently with node deaths.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/dtype/dtype.h"
#include "engine/runtime/device.h"
#include "engine/uop/uop.h"

namespace kiln::runtime {

class Buffer {
 public:
  // Allocates numel elements of dtype on `device` (not owned; devices live as long as the process). numel may be 0
  // (a zero-byte buffer has a null ptr). Errors: InvalidArgument for a negative numel or a pointer/void dtype,
  // ResourceExhausted from the allocator.
  static absl::StatusOr<std::shared_ptr<Buffer>> Create(Device* device, DType dtype, int64_t numel);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Device* device() const { return device_; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return mem_.nbytes; }
  const DeviceMemory& memory() const { return mem_; }

  // Whole-buffer copies; `nbytes` must equal nbytes() (InvalidArgument otherwise).
  absl::Status CopyIn(const void* src, size_t nbytes);
  absl::Status CopyOut(void* dst, size_t nbytes) const;

  // A constant buffer: its owner promises that nothing writes it again (an ONNX model's initializers). A JIT plan
  // runs the kernels that read only constant buffers (a conv weight's repacking) once, at capture, and keeps their
  // outputs (ExecPlan, "constant calls"); a plan that would write one fails to build.
  void MarkConstant() { constant_.store(true, std::memory_order_relaxed); }
  bool constant() const { return constant_.load(std::memory_order_relaxed); }

 private:
  Buffer(Device* device, DType dtype, int64_t numel, DeviceMemory mem)
      : device_(device), dtype_(dtype), numel_(numel), mem_(mem) {}
  Device* device_;
  DType dtype_;
  int64_t numel_;
  DeviceMemory mem_;
  std::atomic<bool> constant_{false};
};

class BufferTable {
 public:
  // The process-wide table (never destroyed; installs the BUFFER death hook on first call).
  static BufferTable& Global();

  // Attaches `buffer` to the BUFFER node `node`. InvalidArgument if node is not a BUFFER or buffer is null,
  // AlreadyExists if the node already has one.
  absl::Status Attach(const UOp* node, std::shared_ptr<Buffer> buffer);
  // The buffer attached to `node`, or null.
  std::shared_ptr<Buffer> Lookup(const UOp* node) const;
  // Removes the entry (if any) and returns it. Called by the death hook.
  std::shared_ptr<Buffer> Detach(const UOp* node);
  // Number of attached buffers and their total bytes (for tests and metrics).
  size_t size() const;
  size_t total_bytes() const;
  // Bytes of the attached buffers that live on `device` (O(1): kept up to date by Attach/Detach).
  size_t bytes_on(const Device* device) const;

 private:
  BufferTable() = default;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<const UOp*, std::shared_ptr<Buffer>> map_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const Device*, size_t> bytes_by_device_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::runtime
