// GGUF: the model file format of llama.cpp / ggml (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md),
// issue #24 item 1. Two layers, like safetensors:
//   ParseGguf (library kiln_nn_state_format: bytes in, plain structs out, no Tensor; fuzzed by tests/fuzz)
//   GgufModel (library kiln_nn_state: the file mapped, each tensor as a kiln Tensor whose dequantisation is Tensor
//              ops on the file's own bytes, so it fuses into the kernel that consumes it, e.g. a matmul)
//
// File layout (little-endian): "GGUF", u32 version (2 or 3), u64 tensor_count, u64 kv_count, then kv_count
// metadata pairs (string key, u32 value type, value), then tensor_count tensor infos (string name, u32 n_dims,
// n_dims x u64 ne, u32 ggml type, u64 offset), then padding to `general.alignment` (default 32), then the data
// section; a tensor's offset is relative to the data section and a multiple of the alignment. A string is a u64
// length and that many bytes (no terminator). ne[0] is the fastest-varying dimension: kiln's row-major shape is ne
// reversed (a llama.cpp weight of ne [576, 49152] is a [49152, 576] Tensor).
//
// Every check is made before any tensor is created; a bad file is InvalidArgument naming the part and the limit,
// never an abort or a read past the end:
//   - the magic, a version of 2 or 3 (a byte-swapped version says the file is big-endian, which is not supported);
//   - counts: tensor_count <= kMaxGgufTensors, kv_count <= kMaxGgufMetadata, every string and array length within
//     the bytes that remain (strings also <= kMaxGgufString bytes), arrays nested at most kMaxGgufArrayDepth deep
//     and holding at most kMaxGgufArrayItems elements in all (a vocabulary of 256k tokens and 500k merges fits),
//     value types known;
//   - keys unique and non-empty; tensor names unique, non-empty, <= kMaxGgufName bytes;
//   - 1 <= n_dims <= 4; every ne >= 1 with a product <= kMaxGgufElements; the type one of F32 F16 BF16 Q8_0 Q4_0 Q4_1
//     (other ggml types are named in the error); a quantized tensor's ne[0] a multiple of its block size;
//   - `general.alignment`, if present, a u32 power of two; every offset a multiple of it; every tensor's bytes inside
//     the data section, and no two tensors' bytes overlapping.
//
// Thread safety: ParseGguf is reentrant; a GgufModel is immutable once opened.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/dtype/dtype.h"

namespace kiln {
class Tensor;
}

namespace kiln::nn {

inline constexpr uint64_t kMaxGgufTensors = uint64_t{1} << 20;
inline constexpr uint64_t kMaxGgufMetadata = uint64_t{1} << 20;
inline constexpr uint64_t kMaxGgufString = uint64_t{1} << 30;
inline constexpr int kMaxGgufArrayDepth = 8;
inline constexpr uint64_t kMaxGgufArrayItems = uint64_t{1} << 21;  // all arrays of a file together
inline constexpr size_t kMaxGgufName = 256;
inline constexpr int64_t kMaxGgufElements = int64_t{1} << 40;
inline constexpr uint32_t kGgufDefaultAlignment = 32;

// GGUF metadata value types (gguf.md, gguf_type).
enum class GgufType : uint32_t {
  kUInt8 = 0, kInt8 = 1, kUInt16 = 2, kInt16 = 3, kUInt32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7, kString = 8,
  kArray = 9, kUInt64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* GgufTypeName(GgufType t);  // "uint32", "string", ...

// ggml tensor types kiln reads (ggml_type numbers).
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8, kBF16 = 30 };
const char* GgmlTypeName(GgmlType t);  // "F32", "Q4_1", ...
// Elements per block and bytes per block (1 and the item size for F32/F16/BF16; Q8_0 32/34, Q4_0 32/18, Q4_1 32/20).
int64_t GgmlBlockSize(GgmlType t);
int64_t GgmlBlockBytes(GgmlType t);
// An IEEE half (a block's f16 scale or min) as float32, exactly (subnormals, infinities and NaN included).
float GgufHalfToFloat(uint16_t h);

// One metadata value. Integers are held widened (signed in `i`, unsigned in `u`, both set when the value fits
// both), floats in `f`; an array holds its element type and elements.
struct GgufValue {
  GgufType type = GgufType::kUInt8;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string s;
  GgufType element_type = GgufType::kUInt8;  // arrays
  std::vector<GgufValue> array;
  bool is_integer() const;
  std::string DebugString(size_t max_items = 8) const;  // "uint32 3", "array<string>[49152] ["a", ...]"
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] varies fastest
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;      // into the data section
  uint64_t nbytes = 0;
  int64_t numel() const;
  std::vector<int64_t> shape() const;  // row-major: ne reversed
};

struct GgufFile {
  uint32_t version = 0;
  uint32_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;  // where the data section starts in the file
  std::vector<std::pair<std::string, GgufValue>> metadata;  // in file order
  std::vector<GgufTensorInfo> tensors;                      // in file order

  const GgufValue* Find(std::string_view key) const;
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // Typed metadata: NotFound when the key is missing, InvalidArgument naming the key when the type is wrong (an
  // integer of any width for GetInt, u/int or float for GetFloat).
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStrings(std::string_view key) const;  // array<string>
};

// Parses and validates a whole file held in memory (see the header comment for the checks).
absl::StatusOr<GgufFile> ParseGguf(std::string_view file);

// A GGUF file opened for loading: the file stays mapped while the model lives.
class GgufModel {
 public:
  static absl::StatusOr<std::unique_ptr<GgufModel>> Open(const std::string& path);
  ~GgufModel();
  const GgufFile& file() const { return file_; }

  // Tensor `name` as float32 with the row-major shape (GgufTensorInfo::shape) on `device`. The file's bytes of the
  // tensor are copied once into a device buffer as they are (uint8 blocks for the quantized types); the result is a
  // lazy Tensor whose graph decodes them: F16/BF16 by cast, Q8_0 as int8 * the block's f16 scale, Q4_0 as
  // (nibble - 8) * scale, Q4_1 as nibble * scale + min (a block's low nibbles are its elements 0..15, the high
  // nibbles 16..31). The f16 block scales and mins are decoded on the host into float32 buffers of their own, the
  // quantized values packed contiguously. NotFound for an unknown name.
  absl::StatusOr<Tensor> Load(std::string_view name, const std::string& device = "CPU") const;
  // The 2-D tensors `names`, of one type and one row length, stacked by rows into one [sum of rows, row length]
  // tensor decoded as Load does, from one buffer: a matmul against it is one kernel streaming one weight buffer (the
  // Llama step's q, k and v projections). NotFound for an unknown name, InvalidArgument when the types or row
  // lengths differ.
  absl::StatusOr<Tensor> LoadRows(const std::vector<std::string_view>& names,
                                  const std::string& device = "CPU") const;
  // The tensor's raw bytes in the mapped file.
  absl::StatusOr<std::string_view> RawBytes(std::string_view name) const;

 private:
  struct Mapping;
  GgufModel() = default;
  std::unique_ptr<Mapping> mapping_;
  std::string_view bytes_;
  GgufFile file_;
};

}  // namespace kiln::nn
