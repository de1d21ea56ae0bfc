#include "server/core/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/core/limits.h"

namespace kiln::server {

struct SharedMemoryManager::Region {
  SharedMemoryRegionStatus status;
  void* map_base = nullptr;  // page-aligned start of the mapping
  size_t map_length = 0;
  char* data = nullptr;      // map_base + (offset - aligned offset)

  Region() = default;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() {
    if (map_base != nullptr) munmap(map_base, map_length);
  }
};

namespace {

std::string Shown(const std::string& s) { return s.substr(0, 256); }

absl::Status CheckKey(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("key: empty (expected a POSIX shared memory name)");
  if (key.size() > 255) {
    return absl::InvalidArgumentError(absl::StrCat("key: ", key.size(), " bytes exceeds the limit of 255"));
  }
  // shm_open's names: one optional leading '/', then no '/' and no NUL ("." and ".." are not objects).
  const std::string rest = key[0] == '/' ? key.substr(1) : key;
  if (rest.empty() || rest == "." || rest == ".." || rest.find('/') != std::string::npos ||
      rest.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key: '", Shown(key), "' is not a POSIX shared memory name ('/name', no other '/')"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SharedMemoryManager::Register(const std::string& name, const std::string& key,
                                           uint64_t offset, uint64_t byte_size) {
  if (!allow_client_) {
    return absl::FailedPreconditionError(
        "system shared memory: client registration is disabled (start kilnd with "
        "--allow-client-shm=true)");
  }
  if (name.empty()) return absl::InvalidArgumentError("name: empty (a region needs a name)");
  if (name.size() > static_cast<size_t>(kMaxNameLength)) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: ", name.size(), " bytes exceeds the limit of ", kMaxNameLength));
  }
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (byte_size == 0) return absl::InvalidArgumentError("byte_size: 0 (a region needs at least one byte)");
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, byte_size, &end) || end > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset + byte_size: ", offset, " + ", byte_size, " overflows"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (regions_.contains(name)) {
      return absl::AlreadyExistsError(
          absl::StrCat("shared memory region '", Shown(name), "' is already registered"));
    }
    if (static_cast<int64_t>(regions_.size()) >= max_regions_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "system shared memory: ", regions_.size(), " regions are registered, the limit is ",
          max_regions_, "; unregister one first"));
    }
    if (byte_size > max_bytes_ || mapped_bytes_ > max_bytes_ - byte_size) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "byte_size: ", byte_size, " more bytes would map ", mapped_bytes_ + byte_size,
          " bytes of shared memory in all, over the limit of ", max_bytes_));
    }
  }
  const int fd = shm_open(key.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    const std::string why = absl::StrCat("key: cannot open shared memory object '", Shown(key),
                                         "': ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(why) : absl::InvalidArgumentError(why);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("key: cannot stat shared memory object '", Shown(key), "': ", std::strerror(err)));
  }
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) < end) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "offset + byte_size: ", offset, " + ", byte_size, " = ", end,
        " bytes past the end of shared memory object '", Shown(key), "' (", st.st_size, " bytes)"));
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t aligned = offset / page * page;
  auto region = std::make_shared<Region>();
  region->map_length = static_cast<size_t>(end - aligned);
  void* base = mmap(nullptr, region->map_length, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                    static_cast<off_t>(aligned));
  const int map_errno = errno;
  close(fd);
  if (base == MAP_FAILED) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key: cannot map shared memory object '", Shown(key), "': ", std::strerror(map_errno)));
  }
  region->map_base = base;
  region->data = static_cast<char*>(base) + (offset - aligned);
  region->status = {name, key, offset, byte_size};

  absl::MutexLock lock(&mu_);  // checked again: another call may have registered meanwhile
  if (regions_.contains(name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("shared memory region '", Shown(name), "' is already registered"));
  }
  if (static_cast<int64_t>(regions_.size()) >= max_regions_ || mapped_bytes_ > max_bytes_ - byte_size) {
    return absl::ResourceExhaustedError(
        "system shared memory: the region or byte limit was reached meanwhile; retry");
  }
  mapped_bytes_ += byte_size;
  regions_.emplace(name, std::move(region));
  return absl::OkStatus();
}

absl::Status SharedMemoryManager::Unregister(const std::string& name) {
  if (!allow_client_) {
    return absl::FailedPreconditionError(
        "system shared memory: client registration is disabled (start kilnd with "
        "--allow-client-shm=true)");
  }
  std::vector<std::shared_ptr<const Region>> dropped;  // unmapped outside the lock
  absl::MutexLock lock(&mu_);
  if (name.empty()) {
    for (auto& [n, r] : regions_) dropped.push_back(std::move(r));
    regions_.clear();
    mapped_bytes_ = 0;
    return absl::OkStatus();
  }
  auto it = regions_.find(name);
  if (it == regions_.end()) return absl::OkStatus();
  mapped_bytes_ -= it->second->status.byte_size;
  dropped.push_back(std::move(it->second));
  regions_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SharedMemoryRegionStatus>> SharedMemoryManager::Status(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  std::vector<SharedMemoryRegionStatus> out;
  if (name.empty()) {
    for (const auto& [n, r] : regions_) out.push_back(r->status);
    return out;
  }
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no system shared memory region named '", Shown(name), "' is registered"));
  }
  out.push_back(it->second->status);
  return out;
}

absl::StatusOr<SharedMemoryBlock> SharedMemoryManager::Resolve(const SharedMemoryParams& params,
                                                               const std::string& where) const {
  if (!params.region) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".shared_memory_region: missing (required with shared_memory_byte_size and "
               "shared_memory_offset)"));
  }
  if (!params.byte_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".shared_memory_byte_size: missing (required with shared_memory_region)"));
  }
  const int64_t offset = params.offset.value_or(0);
  const int64_t size = *params.byte_size;
  if (offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".shared_memory_offset: ", offset, " is negative"));
  }
  if (size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".shared_memory_byte_size: ", size, " is negative"));
  }
  std::shared_ptr<const Region> region;
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(*params.region);
    if (it != regions_.end()) region = it->second;
  }
  if (region == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".shared_memory_region: no system shared memory region named '",
        Shown(*params.region), "' is registered"));
  }
  const uint64_t region_size = region->status.byte_size;
  if (static_cast<uint64_t>(offset) > region_size ||
      static_cast<uint64_t>(size) > region_size - static_cast<uint64_t>(offset)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".shared_memory_offset: offset ", offset, " + byte size ", size,
        " is past the end of region '", Shown(*params.region), "' (", region_size, " bytes)"));
  }
  SharedMemoryBlock block;
  block.data = region->data + offset;
  block.size = static_cast<size_t>(size);
  block.region = *params.region;
  block.hold = std::move(region);
  return block;
}

}  // namespace kiln::server
