// GgufModel (gguf.h): a mapped GGUF file, its tensors as kiln Tensors decoded by Tensor ops.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/nn/state/gguf.h"
#include "engine/nn/state/mapped_file.h"
#include "engine/tensor/tensor.h"

namespace kiln::nn {

struct GgufModel::Mapping {
  MappedFile file;
};

GgufModel::~GgufModel() = default;

absl::StatusOr<std::unique_ptr<GgufModel>> GgufModel::Open(const std::string& path) {
  absl::StatusOr<MappedFile> mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  std::unique_ptr<GgufModel> m(new GgufModel());
  m->mapping_ = std::make_unique<Mapping>(Mapping{*std::move(mapped)});
  m->bytes_ = m->mapping_->file.view();
  absl::StatusOr<GgufFile> parsed = ParseGguf(m->bytes_);
  if (!parsed.ok())
    return absl::Status(parsed.status().code(), absl::StrCat(path, ": ", parsed.status().message()));
  m->file_ = *std::move(parsed);
  return m;
}

absl::StatusOr<std::string_view> GgufModel::RawBytes(std::string_view name) const {
  const GgufTensorInfo* t = file_.FindTensor(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("gguf: no tensor named ", std::string(name)));
  return bytes_.substr(file_.data_offset + t->offset, t->nbytes);  // ParseGguf checked the range
}

namespace {

// Each block's f16 at byte `at`, as float32 of shape (n, 1).
Tensor BlockScales(std::string_view raw, int64_t n, int64_t block_bytes, int64_t at, const std::string& device) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; ++b) {
    const auto* p = reinterpret_cast<const unsigned char*>(raw.data() + b * block_bytes + at);
    v[static_cast<size_t>(b)] = GgufHalfToFloat(static_cast<uint16_t>(p[0] | (p[1] << 8)));
  }
  return Tensor::FromVector(v, {n, 1}, device);
}

// Each block's `len` bytes at `at`, packed contiguously as uint8 of shape (n, len).
Tensor BlockBytes(std::string_view raw, int64_t n, int64_t block_bytes, int64_t at, int64_t len,
                  const std::string& device) {
  std::vector<uint8_t> v(static_cast<size_t>(n * len));
  for (int64_t b = 0; b < n; ++b) std::memcpy(v.data() + b * len, raw.data() + b * block_bytes + at, len);
  return Tensor::FromVector(v, {n, len}, device);
}

// The 32 4-bit values of each block from its 16 bytes: low nibbles are elements 0..15, high nibbles 16..31. Chosen
// by a Where on a [1, 2, 1] selector rather than a Cat, so the fused matmul reads each byte once with no gated loads.
// The selector is a padded constant ([false, true] as `true` padded by one on the left), not a buffer: lowered, it
// is a comparison of the weight's index, which is a constant in each copy of a reduce unrolled to whole blocks (the
// heuristic's quantized-row opts), so the Where folds away ("postopt symbolic"); loaded from a two-byte buffer it was
// a blend per decoded vector. SmolLM2's one-slot decode step: kernel sum 5.30-5.41 -> 4.98-5.05 ms (best of 50).
Tensor BlockNibbles(const Tensor& qs, int64_t n, const std::string& device) {
  const Tensor lo = qs.BitwiseAnd(Scalar(int64_t{15})).Reshape({n, 1, 16});
  const Tensor hi = qs.Rshift(4).Reshape({n, 1, 16});
  const Tensor high_half = Tensor::Full({1}, true, dtypes::kBool, device).Pad({{1, 0}}).Reshape({1, 2, 1});
  return high_half.Where(hi, lo).Reshape({n, 32}).Cast(dtypes::kFloat32);
}

// A tensor of `type` whose bytes are `raw`, as float32 of `shape`.
Tensor Decode(std::string_view raw, GgmlType type, const std::vector<int64_t>& shape, const std::string& device) {
  switch (type) {
    case GgmlType::kF32:
      return Tensor::FromHost(raw.data(), dtypes::kFloat32, shape, device);
    case GgmlType::kF16:
      return Tensor::FromHost(raw.data(), dtypes::kFloat16, shape, device).Cast(dtypes::kFloat32);
    case GgmlType::kBF16:  // the top half of a float32
      return Tensor::FromHost(raw.data(), dtypes::kUInt16, shape, device)
          .Cast(dtypes::kUInt32)
          .Lshift(16)
          .Bitcast(dtypes::kFloat32);
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
      break;
  }
  // The block scales are decoded on the host into float32 and the quantized values packed contiguously, once at
  // load; the per-element dequantisation stays a Tensor expression that fuses into the consuming matmul.
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const int64_t n = numel / GgmlBlockSize(type);
  const int64_t bb = GgmlBlockBytes(type);
  const Tensor d = BlockScales(raw, n, bb, 0, device);
  Tensor x;
  switch (type) {
    case GgmlType::kQ8_0:  // f16 d, 32 x int8
      x = BlockBytes(raw, n, bb, 2, 32, device).Bitcast(dtypes::kInt8).Cast(dtypes::kFloat32) * d;
      break;
    case GgmlType::kQ4_0:  // f16 d, 16 bytes of nibbles: (q - 8) * d
      x = (BlockNibbles(BlockBytes(raw, n, bb, 2, 16, device), n, device) - 8.0f) * d;
      break;
    default:  // Q4_1: f16 d, f16 m, 16 bytes of nibbles: q * d + m
      x = BlockNibbles(BlockBytes(raw, n, bb, 4, 16, device), n, device) * d + BlockScales(raw, n, bb, 2, device);
      break;
  }
  return x.Reshape(shape);
}

}  // namespace

absl::StatusOr<Tensor> GgufModel::Load(std::string_view name, const std::string& device) const {
  const GgufTensorInfo* t = file_.FindTensor(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("gguf: no tensor named ", std::string(name)));
  return Decode(bytes_.substr(file_.data_offset + t->offset, t->nbytes), t->type, t->shape(), device);
}

absl::StatusOr<Tensor> GgufModel::LoadRows(const std::vector<std::string_view>& names,
                                           const std::string& device) const {
  if (names.empty()) return absl::InvalidArgumentError("gguf: LoadRows of no tensor");
  std::string raw;
  const GgufTensorInfo* first = nullptr;
  int64_t rows = 0;
  for (std::string_view name : names) {
    const GgufTensorInfo* t = file_.FindTensor(name);
    if (t == nullptr) return absl::NotFoundError(absl::StrCat("gguf: no tensor named ", std::string(name)));
    const std::vector<int64_t> shape = t->shape();
    if (first == nullptr) first = t;
    if (shape.size() != 2 || t->type != first->type || shape[1] != first->shape()[1])
      return absl::InvalidArgumentError(absl::StrCat(
          "gguf: ", std::string(name), " is [", absl::StrJoin(shape, ", "), "] of type ", static_cast<int>(t->type),
          "; the tensors stacked by rows must be 2-D with one type and row length (", first->name, ")"));
    rows += shape[0];
    raw.append(bytes_.substr(file_.data_offset + t->offset, t->nbytes));  // rows are whole blocks: bytes concatenate
  }
  return Decode(raw, first->type, {rows, first->shape()[1]}, device);
}

}  // namespace kiln::nn
