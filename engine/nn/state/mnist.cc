// MNIST loaders: IDX files (idx.cc) -> uint8 Tensors (see idx.h).
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/nn/state/idx.h"
#include "engine/nn/state/mapped_file.h"

namespace kiln::nn {

absl::StatusOr<Tensor> LoadMnistImages(const std::string& path, const std::string& device) {
  KILN_ASSIGN_OR_RETURN(IdxData d, ReadIdx(path, 3));
  const int64_t shape[4] = {d.dims[0], 1, d.dims[1], d.dims[2]};
  Tensor t = Tensor::FromHost(d.data.data(), dtypes::kUInt8, shape, device);
  if (!t.ok()) return t.status();
  return t;
}

absl::StatusOr<Tensor> LoadMnistLabels(const std::string& path, const std::string& device) {
  KILN_ASSIGN_OR_RETURN(IdxData d, ReadIdx(path, 1));
  const int64_t shape[1] = {d.dims[0]};
  Tensor t = Tensor::FromHost(d.data.data(), dtypes::kUInt8, shape, device);
  if (!t.ok()) return t.status();
  return t;
}

absl::StatusOr<MnistDataset> LoadMnist(const std::string& dir, const std::string& device) {
  auto find = [&dir](const std::string& base) -> absl::StatusOr<std::string> {
    for (const std::string& name : {base, base + ".gz"}) {
      std::string p = absl::StrCat(dir, "/", name);
      if (MappedFile::Open(p).ok()) return p;
    }
    return absl::NotFoundError(absl::StrCat("IDX: neither ", base, " nor ", base, ".gz in ", dir));
  };
  MnistDataset ds;
  KILN_ASSIGN_OR_RETURN(std::string p, find("train-images-idx3-ubyte"));
  KILN_ASSIGN_OR_RETURN(ds.train_images, LoadMnistImages(p, device));
  KILN_ASSIGN_OR_RETURN(p, find("train-labels-idx1-ubyte"));
  KILN_ASSIGN_OR_RETURN(ds.train_labels, LoadMnistLabels(p, device));
  KILN_ASSIGN_OR_RETURN(p, find("t10k-images-idx3-ubyte"));
  KILN_ASSIGN_OR_RETURN(ds.test_images, LoadMnistImages(p, device));
  KILN_ASSIGN_OR_RETURN(p, find("t10k-labels-idx1-ubyte"));
  KILN_ASSIGN_OR_RETURN(ds.test_labels, LoadMnistLabels(p, device));
  if (ds.train_images.size(0) != ds.train_labels.size(0) ||
      ds.test_images.size(0) != ds.test_labels.size(0))
    return absl::InvalidArgumentError(absl::StrCat("IDX ", dir, ": image and label counts differ"));
  return ds;
}

}  // namespace kiln::nn
