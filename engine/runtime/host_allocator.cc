#include "engine/runtime/host_allocator.h"

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <vector>

#include <sys/mman.h>

#include "absl/strings/str_cat.h"

namespace kiln::runtime {
namespace {
constexpr size_t kHugePage = size_t{2} << 20;

// A request's block: 64-byte multiples, or whole 2 MiB huge pages from 2 MiB up. 0 when the size overflows.
size_t BlockSize(size_t nbytes) {
  // A zero-byte buffer still gets one aligned block: the CPU renderer's gated loads read element 0 of their buffer
  // without a branch and discard the value where the gate is off.
  constexpr size_t kAlign = HostAllocator::kAlignment;
  const size_t rounded = nbytes == 0 ? kAlign : (nbytes + kAlign - 1) / kAlign * kAlign;
  if (rounded < nbytes) return 0;
  if (rounded < kHugePage) return rounded;
  const size_t huge = (rounded + kHugePage - 1) / kHugePage * kHugePage;
  return huge < rounded ? 0 : huge;
}

void* NewBlock(size_t block) {
  // Buffers of 2 MiB and more start on a 2 MiB boundary and ask for transparent huge pages: a first touch then
  // faults once per 2 MiB, not once per 4 KiB. The CNN's batch-512 activations are 25-50 MB each, and faulting in
  // fresh 4 KiB pages was a third of a warm first training step's time (2-core EPYC: 362 -> 275 ms, median of 6
  // interleaved runs). The cost: a buffer's last huge page is resident whole once touched (under 2 MiB a buffer).
  if (block < kHugePage) return std::aligned_alloc(HostAllocator::kAlignment, block);
  void* p = std::aligned_alloc(kHugePage, block);
#ifdef MADV_HUGEPAGE
  if (p != nullptr) madvise(p, block, MADV_HUGEPAGE);  // advice only: where THP is off nothing changes
#endif
  return p;
}

}  // namespace

HostAllocator::~HostAllocator() { ReleaseCache(); }

absl::StatusOr<DeviceMemory> HostAllocator::Alloc(size_t nbytes) {
  DeviceMemory m;
  m.nbytes = nbytes;
  const size_t block = BlockSize(nbytes);
  if (block == 0) return absl::ResourceExhaustedError("host allocation size overflows");
  if (block >= kMinCachedBytes) {
    absl::MutexLock l(&mu_);
    auto it = by_size_.find(block);
    if (it != by_size_.end()) {  // (sizes without a kept block have no entry)
      Lru::iterator b = it->second.back();  // the most recently freed: likeliest still in cache
      it->second.pop_back();
      if (it->second.empty()) by_size_.erase(it);
      m.ptr = b->ptr;
      lru_.erase(b);
      cached_ -= block;
      return m;
    }
  }
  m.ptr = NewBlock(block);
  if (m.ptr == nullptr) {  // the kept blocks go back to the system, and one more try
    ReleaseCache();
    m.ptr = NewBlock(block);
  }
  if (m.ptr == nullptr)
    return absl::ResourceExhaustedError(absl::StrCat("out of host memory allocating ", nbytes, " bytes"));
  return m;
}

void HostAllocator::Free(DeviceMemory mem) {
  if (mem.ptr == nullptr) return;
  const size_t block = BlockSize(mem.nbytes);
  if (block < kMinCachedBytes || block > kMaxCachedBytes) {
    std::free(mem.ptr);
    return;
  }
  std::vector<void*> release;  // freed outside the lock
  {
    absl::MutexLock l(&mu_);
    lru_.push_back({block, mem.ptr});
    by_size_[block].push_back(std::prev(lru_.end()));
    cached_ += block;
    while (cached_ > kMaxCachedBytes) {
      const Block oldest = lru_.front();
      auto it = by_size_.find(oldest.size);
      it->second.pop_front();  // the oldest of its size is the oldest overall among them
      if (it->second.empty()) by_size_.erase(it);
      lru_.pop_front();
      cached_ -= oldest.size;
      release.push_back(oldest.ptr);
    }
  }
  for (void* p : release) std::free(p);
}

void HostAllocator::ReleaseCache() {
  std::vector<void*> release;
  {
    absl::MutexLock l(&mu_);
    for (const Block& b : lru_) release.push_back(b.ptr);
    lru_.clear();
    by_size_.clear();
    cached_ = 0;
  }
  for (void* p : release) std::free(p);
}

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
