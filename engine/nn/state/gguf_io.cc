// GgufModel (gguf.h): a mapped GGUF file, its tensors as kiln Tensors decoded by Tensor ops.
#include <utility>

#include "absl/strings/str_cat.h"
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

// The f16 at byte `at` of each block (rows of `blocks`, uint8) as float32, shape (blocks, 1): its two little-endian
// bytes joined into a uint16 and bitcast.
Tensor BlockHalf(const Tensor& blocks, int64_t n, int64_t at) {
  Tensor lo = blocks.Shrink({{0, n}, {at, at + 1}}).Cast(dtypes::kUInt16);
  Tensor hi = blocks.Shrink({{0, n}, {at + 1, at + 2}}).Cast(dtypes::kUInt16).Lshift(8);
  return lo.BitwiseOr(hi).Bitcast(dtypes::kFloat16).Cast(dtypes::kFloat32);
}

// The 32 4-bit values of each block from its 16 bytes at `at`: low nibbles are elements 0..15, high nibbles 16..31.
Tensor BlockNibbles(const Tensor& blocks, int64_t n, int64_t at) {
  Tensor qs = blocks.Shrink({{0, n}, {at, at + 16}});
  return Tensor::Cat({qs.BitwiseAnd(Scalar(int64_t{15})), qs.Rshift(4)}, 1).Cast(dtypes::kFloat32);
}

}  // namespace

absl::StatusOr<Tensor> GgufModel::Load(std::string_view name, const std::string& device) const {
  const GgufTensorInfo* t = file_.FindTensor(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("gguf: no tensor named ", std::string(name)));
  const std::string_view raw = bytes_.substr(file_.data_offset + t->offset, t->nbytes);
  const std::vector<int64_t> shape = t->shape();
  switch (t->type) {
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
  const int64_t n = t->numel() / GgmlBlockSize(t->type);
  const Tensor blocks = Tensor::FromHost(raw.data(), dtypes::kUInt8, {n, GgmlBlockBytes(t->type)}, device);
  const Tensor d = BlockHalf(blocks, n, 0);
  Tensor x;
  switch (t->type) {
    case GgmlType::kQ8_0:  // f16 d, 32 x int8
      x = blocks.Shrink({{0, n}, {2, 34}}).Bitcast(dtypes::kInt8).Cast(dtypes::kFloat32) * d;
      break;
    case GgmlType::kQ4_0:  // f16 d, 16 bytes of nibbles: (q - 8) * d
      x = (BlockNibbles(blocks, n, 2) - 8.0f) * d;
      break;
    default:  // Q4_1: f16 d, f16 m, 16 bytes of nibbles: q * d + m
      x = BlockNibbles(blocks, n, 4) * d + BlockHalf(blocks, n, 2);
      break;
  }
  return x.Reshape(shape);
}

}  // namespace kiln::nn
