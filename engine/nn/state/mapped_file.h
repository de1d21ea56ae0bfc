// MappedFile: a read-only memory map of a whole file (RAII). Internal to engine/nn/state.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kiln::nn {

class MappedFile {
 public:
  // NotFound / PermissionDenied / InvalidArgument (not a regular file) / Internal (mmap failed). An empty file maps to
  // an empty view.
  static absl::StatusOr<MappedFile> Open(const std::string& path);
  MappedFile(MappedFile&& o) noexcept : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::string_view view() const { return std::string_view(static_cast<const char*>(data_), size_); }

 private:
  MappedFile() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kiln::nn
