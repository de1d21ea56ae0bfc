// IDX datasets (the MNIST file format; tinygrad's nn/datasets.py mnist()): raw or gzip-compressed (`.gz`, read
// through zlib) files of unsigned bytes.
//
// An IDX file is: two zero bytes, a type byte (0x08 = uint8, the only type accepted here), a dimension count d, then
// d big-endian uint32 dims, then prod(dims) bytes. LoadIdx checks the magic, that the dims are non-zero where data
// follows, that the payload holds exactly prod(dims) bytes (a truncated or overlong file is InvalidArgument), and
// that the decompressed size stays under kMaxIdxBytes. Errors are Status, never an abort.
//
// LoadMnistImages: an image file (magic 0x00000803, dims (N, H, W)) -> uint8 Tensor (N, 1, H, W).
// LoadMnistLabels: a label file (magic 0x00000801, dims (N)) -> uint8 Tensor (N,).
// LoadMnist: the four standard files of a directory (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
// t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]; the plain name is tried first); checks that images and
// labels agree on N.
//
// Thread safety: reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tensor/tensor.h"

namespace kiln::nn {

inline constexpr uint64_t kMaxIdxBytes = uint64_t{4} << 30;

struct IdxData {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // prod(dims) bytes, row-major
};

// Reads a whole IDX file of uint8 (gzip-compressed when the name ends in ".gz" or the data starts with the gzip
// magic). `expected_rank` > 0 requires that many dims.
absl::StatusOr<IdxData> ReadIdx(const std::string& path, int expected_rank = 0);
// ReadIdx on bytes in memory (gzip when `gzip` is set or the bytes start with the gzip magic); `path` only names
// the data in messages. ReadIdx and ParseIdx need no Tensor (library kiln_nn_state_format).
absl::StatusOr<IdxData> ParseIdx(std::string_view bytes, const std::string& path, int expected_rank = 0,
                                 bool gzip = false);

absl::StatusOr<Tensor> LoadMnistImages(const std::string& path, const std::string& device = "CPU");
absl::StatusOr<Tensor> LoadMnistLabels(const std::string& path, const std::string& device = "CPU");

struct MnistDataset {
  Tensor train_images;  // uint8 (N, 1, 28, 28)
  Tensor train_labels;  // uint8 (N,)
  Tensor test_images;
  Tensor test_labels;
};
absl::StatusOr<MnistDataset> LoadMnist(const std::string& dir, const std::string& device = "CPU");

}  // namespace kiln::nn
