// Triton's system shared memory extension (kserve-v2-protocol.md "Shared memory"): clients
// register a POSIX shared memory object (shm_open key) or a window of it (offset, byte_size) under
// a region name; inference inputs then read their bytes from a region and requested outputs are
// written into one, named by the tensor parameters shared_memory_region, shared_memory_offset
// (default 0) and shared_memory_byte_size.
//
// A region is mapped read/write (MAP_SHARED) when it is registered -- the object must exist and
// hold offset + byte_size bytes -- and the descriptor is closed at once. Each mapping is owned by a
// shared_ptr: Unregister drops the manager's reference, and a request that resolved the region
// (Resolve) holds another until its answer is sent, so the bytes it views stay mapped even when
// the region is unregistered meanwhile; the last holder unmaps.
//
// Bounds: at most `max_regions` regions and `max_bytes` mapped bytes in all (RESOURCE_EXHAUSTED
// naming the limit). Client registration is allowed only when the operator says so
// (--allow-client-shm, as Triton's): a registered key gives the client read and write access to
// that object with kilnd's permissions.
//
// Known limit, as in Triton: a client that shrinks the object (ftruncate) below a registered
// window after registering it makes accesses past the new end fault (SIGBUS); kilnd checks the size
// at registration only.
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kiln::server {

inline constexpr int64_t kDefaultMaxSharedMemoryRegions = 1024;
inline constexpr uint64_t kDefaultMaxSharedMemoryBytes = uint64_t{64} << 30;  // mapped, all regions

// The shared memory parameters of one tensor, as a transport decoded them (unset = absent).
struct SharedMemoryParams {
  std::optional<std::string> region;
  std::optional<int64_t> offset;
  std::optional<int64_t> byte_size;
  bool any() const { return region || offset || byte_size; }
};

// A resolved window of a region: `data` stays valid while `hold` lives.
struct SharedMemoryBlock {
  std::shared_ptr<const void> hold;
  char* data = nullptr;
  size_t size = 0;
  std::string region;
};

struct SharedMemoryRegionStatus {
  std::string name;
  std::string key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

class SharedMemoryManager {
 public:
  explicit SharedMemoryManager(bool allow_client = true,
                               int64_t max_regions = kDefaultMaxSharedMemoryRegions,
                               uint64_t max_bytes = kDefaultMaxSharedMemoryBytes)
      : allow_client_(allow_client), max_regions_(max_regions), max_bytes_(max_bytes) {}

  bool allowed() const { return allow_client_; }

  // Opens `key` (shm_open, read/write), checks that offset + byte_size fits the object, maps that
  // window and closes the descriptor. INVALID_ARGUMENT for a bad name/key/size, NOT_FOUND for a
  // key that names no object, ALREADY_EXISTS for a name in use, FAILED_PRECONDITION when registration
  // is not allowed, RESOURCE_EXHAUSTED over the bounds.
  absl::Status Register(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t byte_size);
  // Drops the region (name "" = every region). An unknown name is OK, as in Triton.
  absl::Status Unregister(const std::string& name);
  // Name "" = every region (sorted by name); NOT_FOUND for an unknown name.
  absl::StatusOr<std::vector<SharedMemoryRegionStatus>> Status(const std::string& name) const;

  // The window [offset, offset + byte_size) of a registered region. `where` names the tensor in
  // errors ("inputs[1].parameters"): INVALID_ARGUMENT when the region or the byte size is missing
  // (both are required), negative values, an unknown region, or a window past the region's end.
  absl::StatusOr<SharedMemoryBlock> Resolve(const SharedMemoryParams& params,
                                            const std::string& where) const;

 private:
  struct Region;
  const bool allow_client_;
  const int64_t max_regions_;
  const uint64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const Region>> regions_ ABSL_GUARDED_BY(mu_);
  uint64_t mapped_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kiln::server
