// HostAllocator: 64-byte aligned host memory (CPU, NULL and INTERP devices). Thread-safe; `ptr` is the host pointer.
//
// Freed blocks of 64 KiB and more are kept and handed out again for the next allocation of the same block size
// (tinygrad's LRUAllocator, bounded): a fresh block's pages fault in (and are zeroed by the kernel) at their first
// touch, ~0.25 us per 4 KiB page here and several times that on a busy host, so a realize that allocates its
// intermediates again (a non-JIT step, the JIT's capture after its first run, a model's warm-up, a benchmark's
// repetitions) paid for every page each time: a 9.4 MB weight repack measured 1.0-2.5 ms fresh and 0.2 ms reused.
// At most kMaxCachedBytes stay cached, the least recently freed released first; an allocation that fails releases
// the cache and tries again.
#pragma once

#include <cstddef>
#include <deque>
#include <list>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "engine/runtime/device.h"

namespace kiln::runtime {

class HostAllocator : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kMinCachedBytes = size_t{64} << 10;
  static constexpr size_t kMaxCachedBytes = size_t{256} << 20;

  HostAllocator() = default;
  HostAllocator(const HostAllocator&) = delete;
  HostAllocator& operator=(const HostAllocator&) = delete;
  ~HostAllocator() override;

  // nbytes == 0 still gets one 64-byte block (gated loads read element 0 of an empty buffer); Free accepts a null
  // ptr. ResourceExhausted when memory runs out.
  absl::StatusOr<DeviceMemory> Alloc(size_t nbytes) override;
  void Free(DeviceMemory mem) override;
  // InvalidArgument when nbytes exceeds the memory's size.
  absl::Status CopyIn(DeviceMemory dst, const void* src, size_t nbytes) override;
  absl::Status CopyOut(void* dst, DeviceMemory src, size_t nbytes) override;

  // Releases every kept block to the system.
  void ReleaseCache();

 private:
  struct Block {
    size_t size;
    void* ptr;
  };
  using Lru = std::list<Block>;  // least recently freed first

  absl::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<size_t, std::deque<Lru::iterator>> by_size_ ABSL_GUARDED_BY(mu_);  // oldest first
  size_t cached_ ABSL_GUARDED_BY(mu_) = 0;  // bytes in lru_
};

}  // namespace kiln::runtime
