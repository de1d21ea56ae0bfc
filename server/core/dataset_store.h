// DatasetStore: the training datasets kilnd may read, for JobManager.
//
//   Resolve      a JobSpec's DatasetRef -> a dataset folder: an uploaded dataset
//                (<data-dir>/datasets/<16 hex digits>) or `idx_dir`, a relative path under one of
//                the allowlisted roots (no "..", no absolute path, no symlink out of the root,
//                neither for the folder nor for any IDX file in it). INVALID_ARGUMENT names the
//                field; NOT_FOUND when no root has the folder.
//   Load         the resolved folder's train (required) and test (optional) IDX pairs, read
//                through engine/api (LoadIdxDataset); INVALID_ARGUMENT names the file.
//   BeginUpload  a dataset upload (UploadDataset): chunks are appended to a staging folder
//                <data-dir>/datasets/.upload-<id>; Finish validates the IDX files, fsyncs and
//                renames it into place; anything else removes it. Stale staging folders are
//                removed by Open.
// The IDX files of a folder, each raw or ".gz": kIdxFiles (DatasetChunk::File - 1 indexes them).
// Thread safety: every method may be called from any thread; an Upload from one at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/trainer.h"
#include "kiln/v1/training.pb.h"

namespace kiln::server {

inline constexpr int64_t kMaxDatasetChunkBytes = 4 << 20;
inline constexpr int64_t kDefaultMaxDatasetBytes = 256 << 20;
inline constexpr size_t kMaxDatasetPath = 256;

// `bytes` random bytes as lowercase hex digits (job and dataset ids).
std::string RandomHex(int bytes);
// `id` is `len` lowercase hex digits.
bool IsHexId(const std::string& id, size_t len);

class DatasetStore {
 public:
  static constexpr const char* kIdxFiles[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

  // Makes `dir` (the uploads' folder) and removes stale upload staging folders in it.
  // UNAVAILABLE if it cannot be created.
  static absl::StatusOr<std::unique_ptr<DatasetStore>> Open(std::filesystem::path dir,
                                                            std::vector<std::filesystem::path> roots,
                                                            int64_t max_upload_bytes);

  absl::StatusOr<std::filesystem::path> Resolve(const kiln::v1::DatasetRef& ref) const;

  struct Loaded {
    api::ImageDataset train, test;
    bool has_test = false;
  };
  absl::StatusOr<Loaded> Load(const kiln::v1::DatasetRef& ref) const;

  class Upload;
  absl::StatusOr<std::unique_ptr<Upload>> BeginUpload();
  int64_t max_upload_bytes() const { return max_upload_bytes_; }

 private:
  DatasetStore(std::filesystem::path dir, std::vector<std::filesystem::path> roots, int64_t max_bytes)
      : dir_(std::move(dir)), roots_(std::move(roots)), max_upload_bytes_(max_bytes) {}
  const std::filesystem::path dir_;
  const std::vector<std::filesystem::path> roots_;
  const int64_t max_upload_bytes_;
};

class DatasetStore::Upload {
 public:
  ~Upload();  // removes the staging folder unless finished
  // INVALID_ARGUMENT / RESOURCE_EXHAUSTED name the field and the limit.
  absl::Status Append(const kiln::v1::DatasetChunk& chunk);
  absl::StatusOr<kiln::v1::UploadDatasetResponse> Finish();
  int64_t bytes() const { return bytes_; }  // data bytes accepted so far
  // True when the last Append failed because the dataset exceeds the byte limit.
  bool over_limit() const { return bytes_ > max_bytes_; }

 private:
  friend class DatasetStore;
  absl::Status AppendUnguarded(const kiln::v1::DatasetChunk& chunk);  // Append's body (guarded)
  absl::StatusOr<kiln::v1::UploadDatasetResponse> FinishUnguarded();  // Finish's body (guarded)
  Upload(std::filesystem::path staging, std::filesystem::path final_dir, std::string id,
         int64_t max_bytes)
      : staging_(std::move(staging)), final_(std::move(final_dir)), id_(std::move(id)),
        max_bytes_(max_bytes) {}
  std::filesystem::path staging_, final_;
  std::string id_;
  int64_t max_bytes_;
  int64_t bytes_ = 0;
  bool first_ = true, finished_ = false;
};

}  // namespace kiln::server
