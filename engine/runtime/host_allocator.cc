#include "engine/runtime/host_allocator.h"

#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

#include "absl/strings/str_cat.h"

namespace kiln::runtime {
namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

absl::StatusOr<DeviceMemory> HostAllocator::Alloc(size_t nbytes) {
  DeviceMemory m;
  m.nbytes = nbytes;
  // A zero-byte buffer still gets one aligned block: the CPU renderer's gated loads read element 0 of their buffer
  // without a branch and discard the value where the gate is off.
  const size_t rounded = nbytes == 0 ? kAlignment : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < nbytes) return absl::ResourceExhaustedError("host allocation size overflows");
  // Buffers of 2 MiB and more start on a 2 MiB boundary and ask for transparent huge pages: a first touch then
  // faults once per 2 MiB, not once per 4 KiB. The CNN's batch-512 activations are 25-50 MB each, and faulting in
  // fresh 4 KiB pages was a third of a warm first training step's time (2-core EPYC: 362 -> 275 ms, median of 6
  // interleaved runs). The cost: a buffer's last huge page is resident whole once touched (under 2 MiB a buffer).
  if (rounded >= kHugePage) {
    const size_t huge = (rounded + kHugePage - 1) / kHugePage * kHugePage;
    if (huge < rounded) return absl::ResourceExhaustedError("host allocation size overflows");
    m.ptr = std::aligned_alloc(kHugePage, huge);
#ifdef MADV_HUGEPAGE
    if (m.ptr != nullptr) madvise(m.ptr, huge, MADV_HUGEPAGE);  // advice only: where THP is off nothing changes
#endif
  } else {
    m.ptr = std::aligned_alloc(kAlignment, rounded);
  }
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
