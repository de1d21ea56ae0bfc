// safetensors: load and save tensors in the safetensors format (https://github.com/huggingface/safetensors;
// tinygrad's safe_load / safe_save, reference/tinygrad.md §8).
//
// File layout: u64 little-endian N, then N bytes of JSON header
//   {"__metadata__": {"k": "v", ...}, "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// then the data; offsets are relative to the first byte after the header.
//
// Loading maps the file (mmap, read-only) and validates everything before it creates any tensor; a bad file is an
// error Status (InvalidArgument naming the problem; NotFound / PermissionDenied for the file itself), never an abort:
//   - N <= kMaxHeaderBytes and 8 + N <= file size; the header is UTF-8 JSON (nesting depth <= 64) whose top level is
//     an object; "__metadata__", if present, maps strings to strings;
//   - every tensor has exactly the keys dtype, shape, data_offsets; the dtype is one of BOOL U8 I8 U16 I16 F16 BF16
//     U32 I32 F32 F64 U64 I64; dims are integers >= 0 whose non-zero ones have a product <= 2^62 (an empty tensor
//     included); 0 <= begin <= end <= data size and end - begin == numel * itemsize; no two tensors' byte ranges
//     overlap; names are unique and non-empty.
// Each tensor is then copied once, straight from the mapped file into a new device buffer (kiln's CPU buffers own
// 64-byte aligned memory, so the bytes of a file cannot be adopted in place).
//
// Saving is deterministic: tensors sorted by item size (largest first), then by name, packed back to back (so each
// tensor's data is aligned to its item size), the header JSON compact with keys in that order, padded with spaces to
// a multiple of 8 bytes. The file is written to a temporary sibling and renamed into place.
//
// Thread safety: the functions are reentrant.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/dtype/dtype.h"
#include "engine/tensor/tensor.h"

namespace kiln::nn {

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100}
                                                       << 20;  // as the reference implementation

// One tensor's entry in a parsed header.
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in header order
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + N: where the data section starts in the file
};

// Parses and validates the header of a whole file held in memory (see the header comment for the checks).
absl::StatusOr<SafetensorsHeader> ParseSafetensors(std::string_view file);

// The safetensors dtype name ("F32") of a kiln dtype, and back. InvalidArgument for dtypes safetensors lacks.
absl::StatusOr<std::string> SafetensorsDTypeName(DType dtype);
absl::StatusOr<DType> SafetensorsDTypeFromName(std::string_view name);

// Loads every tensor of the file onto `device`, by name.
absl::StatusOr<std::map<std::string, Tensor>> SafeLoad(const std::string& path,
                                                       const std::string& device = "CPU");
// The same plus the "__metadata__" map.
absl::StatusOr<std::map<std::string, Tensor>> SafeLoad(const std::string& path,
                                                       std::map<std::string, std::string>* metadata,
                                                       const std::string& device = "CPU");

// Realizes and writes every tensor (names must be non-empty; not "__metadata__").
absl::Status SafeSave(const std::map<std::string, Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace kiln::nn
