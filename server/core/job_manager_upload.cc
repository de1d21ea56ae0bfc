// JobManager::Upload: dataset uploads (UploadDataset), staged under <data-dir>/datasets and
// published by rename once the IDX files check out; the contract is in job_manager.h.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/api/status.h"
#include "engine/api/trainer.h"
#include "server/core/checkpoint_store.h"
#include "server/core/guard.h"
#include "server/core/job_manager.h"
#include "server/core/model_config.h"

namespace kiln::server {
namespace fs = std::filesystem;

// ---- uploads ----

absl::StatusOr<std::unique_ptr<JobManager::Upload>> JobManager::BeginUpload() {
  return Guard("UploadDataset", [&] { return BeginUploadUnguarded(); });
}

absl::StatusOr<std::unique_ptr<JobManager::Upload>> JobManager::BeginUploadUnguarded() {
  const std::string id = RandomHex(8);
  const fs::path staging = options_.data_dir / "datasets" / (".upload-" + id);
  std::error_code ec;
  fs::create_directories(staging, ec);
  if (ec) return ErrnoStatus("upload", ec.value());
  return std::unique_ptr<Upload>(
      new Upload(staging, options_.data_dir / "datasets" / id, id, options_.max_dataset_bytes));
}

JobManager::Upload::~Upload() {
  std::error_code ec;
  if (!finished_) fs::remove_all(staging_, ec);
}

absl::Status JobManager::Upload::Append(const kiln::v1::DatasetChunk& chunk) {
  return Guard("UploadDataset", [&] { return AppendUnguarded(chunk); });
}

absl::Status JobManager::Upload::AppendUnguarded(const kiln::v1::DatasetChunk& chunk) {
  if (first_ && !chunk.name().empty() && !IsValidModelName(chunk.name())) {
    return absl::InvalidArgumentError(
        "name: 1..256 characters of [A-Za-z0-9_.-], not starting with '.'");
  }
  first_ = false;
  if (static_cast<int64_t>(chunk.data().size()) > kMaxDatasetChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data: ", chunk.data().size(), " bytes exceed the chunk limit of ", kMaxDatasetChunkBytes));
  }
  if (chunk.data().empty()) return absl::OkStatus();
  if (chunk.file() < kiln::v1::DatasetChunk::TRAIN_IMAGES ||
      chunk.file() > kiln::v1::DatasetChunk::TEST_LABELS) {
    return absl::InvalidArgumentError(
        "file: must be TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES or TEST_LABELS");
  }
  bytes_ += static_cast<int64_t>(chunk.data().size());
  if (bytes_ > max_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("data: the dataset exceeds the limit of ", max_bytes_, " bytes"));
  }
  const char* file = kIdxFiles[chunk.file() - 1];
  const fs::path path = staging_ / file;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(absl::StrCat("data: writing the upload's ", file), errno);
  const std::string& data = chunk.data();
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(absl::StrCat("data: writing the upload's ", file), err);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::StatusOr<kiln::v1::UploadDatasetResponse> JobManager::Upload::Finish() {
  return Guard("UploadDataset", [&] { return FinishUnguarded(); });
}

absl::StatusOr<kiln::v1::UploadDatasetResponse> JobManager::Upload::FinishUnguarded() {
  // IDX errors name the file by its path; the client knows it by its name only.
  const std::string folder = staging_.string() + "/";
  auto no_path = [&](absl::string_view m) { return absl::StrReplaceAll(m, {{folder, ""}}); };
  kiln::v1::UploadDatasetResponse resp;
  resp.set_dataset_id(id_);
  resp.set_bytes(bytes_);
  absl::StatusOr<api::ImageDataset> train =
      api::LoadIdxDataset((staging_ / kIdxFiles[0]).string(), (staging_ / kIdxFiles[1]).string());
  if (!train.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("train ", no_path(train.status().message())));
  }
  resp.set_train_items(train->count);
  std::error_code ec;
  if (fs::exists(staging_ / kIdxFiles[2], ec) || fs::exists(staging_ / kIdxFiles[3], ec)) {
    absl::StatusOr<api::ImageDataset> test =
        api::LoadIdxDataset((staging_ / kIdxFiles[2]).string(), (staging_ / kIdxFiles[3]).string());
    if (!test.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("test ", no_path(test.status().message())));
    }
    resp.set_test_items(test->count);
  }
  for (const char* f : kIdxFiles) {
    if (fs::exists(staging_ / f, ec)) KILN_RETURN_IF_ERROR(FsyncPath(staging_ / f));
  }
  if (::rename(staging_.c_str(), final_.c_str()) != 0) return ErrnoStatus("upload", errno);
  KILN_RETURN_IF_ERROR(FsyncPath(final_.parent_path()));
  finished_ = true;
  return resp;
}

}  // namespace kiln::server
