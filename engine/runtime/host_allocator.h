// HostAllocator: 64-byte aligned host memory (CPU, NULL and INTERP devices). Thread-safe; `ptr` is the host pointer.
#pragma once

#include "engine/runtime/device.h"

namespace kiln::runtime {

class HostAllocator : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  // nbytes == 0 returns a null ptr (Free accepts it). ResourceExhausted when memory runs out.
  absl::StatusOr<DeviceMemory> Alloc(size_t nbytes) override;
  void Free(DeviceMemory mem) override;
  // InvalidArgument when nbytes exceeds the memory's size.
  absl::Status CopyIn(DeviceMemory dst, const void* src, size_t nbytes) override;
  absl::Status CopyOut(void* dst, DeviceMemory src, size_t nbytes) override;
};

}  // namespace kiln::runtime
