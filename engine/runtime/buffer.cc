#include "engine/runtime/buffer.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::runtime {

absl::StatusOr<std::shared_ptr<Buffer>> Buffer::Create(Device* device, DType dtype, int64_t numel) {
  if (device == nullptr) return absl::InvalidArgumentError("buffer: null device");
  if (numel < 0) return absl::InvalidArgumentError(absl::StrCat("buffer: negative element count ", numel));
  if (dtype.is_ptr || dtype.scalar == ScalarType::kVoid || dtype.scalar == ScalarType::kIndex)
    return absl::InvalidArgumentError(absl::StrCat("buffer: dtype ", dtype.Name(), " cannot be stored"));
  const uint64_t item = static_cast<uint64_t>(dtype.ByteSize());
  if (item != 0 && static_cast<uint64_t>(numel) > (uint64_t{1} << 48) / item)
    return absl::ResourceExhaustedError(absl::StrCat("buffer: ", numel, " elements of ", dtype.Name(), " is too large"));
  auto mem = device->allocator().Alloc(static_cast<size_t>(numel) * item);
  if (!mem.ok()) return mem.status();
  return std::shared_ptr<Buffer>(new Buffer(device, dtype, numel, *mem));
}

Buffer::~Buffer() { device_->allocator().Free(mem_); }

absl::Status Buffer::CopyIn(const void* src, size_t nbytes) {
  if (nbytes != mem_.nbytes)
    return absl::InvalidArgumentError(absl::StrCat("buffer copy-in of ", nbytes, " bytes into ", mem_.nbytes));
  return device_->allocator().CopyIn(mem_, src, nbytes);
}

absl::Status Buffer::CopyOut(void* dst, size_t nbytes) const {
  if (nbytes != mem_.nbytes)
    return absl::InvalidArgumentError(absl::StrCat("buffer copy-out of ", mem_.nbytes, " bytes into ", nbytes));
  return device_->allocator().CopyOut(dst, mem_, nbytes);
}

namespace {
void OnBufferDeath(const UOp* node) {
  std::shared_ptr<Buffer> dead = BufferTable::Global().Detach(node);
  // `dead` (possibly the last reference) is released here, outside the table lock.
}
}  // namespace

BufferTable& BufferTable::Global() {
  static BufferTable* const table = [] {
    auto* t = new BufferTable();
    UOp::SetBufferDeathHook(&OnBufferDeath);
    return t;
  }();
  return *table;
}

absl::Status BufferTable::Attach(const UOp* node, std::shared_ptr<Buffer> buffer) {
  if (node == nullptr || node->op() != Op::BUFFER)
    return absl::InvalidArgumentError("buffer table: only BUFFER nodes carry device memory");
  if (buffer == nullptr) return absl::InvalidArgumentError("buffer table: null buffer");
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = map_.emplace(node, std::move(buffer));
  if (!inserted) return absl::AlreadyExistsError("buffer table: BUFFER already has memory attached");
  bytes_by_device_[it->second->device()] += it->second->nbytes();
  return absl::OkStatus();
}

std::shared_ptr<Buffer> BufferTable::Lookup(const UOp* node) const {
  absl::MutexLock lock(&mu_);
  auto it = map_.find(node);
  return it == map_.end() ? nullptr : it->second;
}

std::shared_ptr<Buffer> BufferTable::Detach(const UOp* node) {
  absl::MutexLock lock(&mu_);
  auto it = map_.find(node);
  if (it == map_.end()) return nullptr;
  std::shared_ptr<Buffer> b = std::move(it->second);
  map_.erase(it);
  bytes_by_device_[b->device()] -= b->nbytes();
  return b;
}

size_t BufferTable::size() const {
  absl::MutexLock lock(&mu_);
  return map_.size();
}

size_t BufferTable::total_bytes() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [k, b] : map_) n += b->nbytes();
  return n;
}

size_t BufferTable::bytes_on(const Device* device) const {
  absl::MutexLock lock(&mu_);
  auto it = bytes_by_device_.find(device);
  return it == bytes_by_device_.end() ? 0 : it->second;
}

}  // namespace kiln::runtime
