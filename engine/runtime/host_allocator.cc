#include "engine/runtime/host_allocator.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln::runtime {

absl::StatusOr<DeviceMemory> HostAllocator::Alloc(size_t nbytes) {
  DeviceMemory m;
  m.nbytes = nbytes;
  // A zero-byte buffer still gets one aligned block: the CPU renderer's gated loads read element 0 of their buffer
  // without a branch and discard the value where the gate is off.
  const size_t rounded = nbytes == 0 ? kAlignment : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < nbytes) return absl::ResourceExhaustedError("host allocation size overflows");
  m.ptr = std::aligned_alloc(kAlignment, rounded);
  if (m.ptr == nullptr)
    return absl::ResourceExhaustedError(absl::StrCat("out of host memory allocating ", nbytes, " bytes"));
  return m;
}

void HostAllocator::Free(DeviceMemory mem) { std::free(mem.ptr); }

absl::Status HostAllocator::CopyIn(DeviceMemory dst, const void* src, size_t nbytes) {
  if (nbytes > dst.nbytes) return absl::InvalidArgumentError("copy larger than the destination buffer");
  if (nbytes > 0) std::memcpy(dst.ptr, src, nbytes);
  return absl::OkStatus();
}

absl::Status HostAllocator::CopyOut(void* dst, DeviceMemory src, size_t nbytes) {
  if (nbytes > src.nbytes) return absl::InvalidArgumentError("copy larger than the source buffer");
  if (nbytes > 0) std::memcpy(dst, src.ptr, nbytes);
  return absl::OkStatus();
}

}  // namespace kiln::runtime
