// DatasetStore: dataset sandboxing (Resolve), loading and uploads; the contract is in
// dataset_store.h.
#include "server/core/dataset_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "engine/api/status.h"
#include "engine/api/trainer.h"
#include "server/core/checkpoint_store.h"
#include "server/core/guard.h"
#include "server/core/model_config.h"

namespace kiln::server {
namespace fs = std::filesystem;

namespace {

// `p` lies strictly inside `root` (both canonical).
bool Inside(const fs::path& p, const fs::path& root) {
  auto r = root.begin(), q = p.begin();
  for (; r != root.end(); ++r, ++q) {
    if (q == p.end() || *q != *r) return false;
  }
  return q != p.end();
}

// The IDX file `stem` in `dir`, raw or ".gz"; empty if neither exists.
fs::path FindIdx(const fs::path& dir, const std::string& stem) {
  std::error_code ec;
  if (fs::is_regular_file(dir / stem, ec)) return dir / stem;
  if (fs::is_regular_file(dir / (stem + ".gz"), ec)) return dir / (stem + ".gz");
  return {};
}

}  // namespace

std::string RandomHex(int bytes) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> l(mu);
  std::string out;
  for (int i = 0; i < bytes; ++i) absl::StrAppendFormat(&out, "%02x", rng() & 0xff);
  return out;
}

bool IsHexId(const std::string& id, size_t len) {
  if (id.size() != len) return false;
  return std::all_of(id.begin(), id.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

absl::StatusOr<std::unique_ptr<DatasetStore>> DatasetStore::Open(fs::path dir, std::vector<fs::path> roots,
                                                                 int64_t max_upload_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError("--data-dir: cannot create the datasets folder");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind(".upload-", 0) == 0) fs::remove_all(entry.path(), ec);
  }
  return std::unique_ptr<DatasetStore>(new DatasetStore(std::move(dir), std::move(roots), max_upload_bytes));
}

absl::StatusOr<fs::path> DatasetStore::Resolve(const kiln::v1::DatasetRef& ref) const {
  if (ref.has_dataset_id()) {
    if (!IsHexId(ref.dataset_id(), 16)) {
      return absl::InvalidArgumentError("dataset.dataset_id: must be 16 lowercase hex digits");
    }
    fs::path dir = dir_ / ref.dataset_id();
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      return absl::NotFoundError(absl::StrCat("dataset.dataset_id: no dataset '", ref.dataset_id(), "'"));
    }
    return dir;
  }
  if (!ref.has_idx_dir()) return absl::InvalidArgumentError("dataset: set dataset_id or idx_dir");
  const std::string& rel = ref.idx_dir();
  if (rel.empty() || rel.size() > kMaxDatasetPath) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.idx_dir: length must be 1..", kMaxDatasetPath));
  }
  if (rel.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("dataset.idx_dir: contains a NUL byte");
  }
  const fs::path p(rel);
  if (p.is_absolute()) {
    return absl::InvalidArgumentError(
        "dataset.idx_dir: must be relative to an allowed dataset root, not absolute");
  }
  for (const fs::path& part : p) {
    if (part == "..") {
      return absl::InvalidArgumentError("dataset.idx_dir: '..' is not allowed");
    }
  }
  std::error_code ec;
  for (const fs::path& root : roots_) {
    const fs::path croot = fs::canonical(root, ec);
    if (ec) continue;
    const fs::path dir = fs::canonical(croot / p, ec);
    if (ec) continue;
    if (!Inside(dir, croot)) {
      return absl::InvalidArgumentError(
          "dataset.idx_dir: resolves outside the allowed dataset roots (symlink)");
    }
    if (!fs::is_directory(dir, ec)) continue;
    // Each IDX file, too, must not be a symlink out of the root.
    for (const char* stem : kIdxFiles) {
      fs::path f = FindIdx(dir, stem);
      if (f.empty()) continue;
      if (!Inside(fs::canonical(f, ec), croot) || ec) {
        return absl::InvalidArgumentError(absl::StrCat(
            "dataset.idx_dir: ", stem, " resolves outside the allowed dataset roots (symlink)"));
      }
    }
    if (FindIdx(dir, kIdxFiles[0]).empty() || FindIdx(dir, kIdxFiles[1]).empty()) {
      return absl::InvalidArgumentError(
          "dataset.idx_dir: needs train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]");
    }
    return dir;
  }
  return absl::NotFoundError(
      absl::StrCat("dataset.idx_dir: no folder '", rel.substr(0, 64), "' under the dataset roots"));
}

absl::StatusOr<DatasetStore::Loaded> DatasetStore::Load(const kiln::v1::DatasetRef& ref) const {
  KILN_ASSIGN_OR_RETURN(fs::path dir, Resolve(ref));
  Loaded out;
  absl::StatusOr<api::ImageDataset> train = api::LoadIdxDataset(
      FindIdx(dir, kIdxFiles[0]).string(), FindIdx(dir, kIdxFiles[1]).string());
  if (!train.ok()) return absl::InvalidArgumentError(absl::StrCat("train ", train.status().message()));
  out.train = *std::move(train);
  const fs::path ti = FindIdx(dir, kIdxFiles[2]), tl = FindIdx(dir, kIdxFiles[3]);
  if (!ti.empty() && !tl.empty()) {
    absl::StatusOr<api::ImageDataset> test = api::LoadIdxDataset(ti.string(), tl.string());
    if (!test.ok()) return absl::InvalidArgumentError(absl::StrCat("test ", test.status().message()));
    out.test = *std::move(test);
    out.has_test = true;
  }
  return out;
}

// ---- uploads ----

absl::StatusOr<std::unique_ptr<DatasetStore::Upload>> DatasetStore::BeginUpload() {
  const std::string id = RandomHex(8);
  const fs::path staging = dir_ / (".upload-" + id);
  std::error_code ec;
  fs::create_directories(staging, ec);
  if (ec) return ErrnoStatus("upload", ec.value());
  return std::unique_ptr<Upload>(
      new Upload(staging, dir_ / id, id, max_upload_bytes_));
}

DatasetStore::Upload::~Upload() {
  std::error_code ec;
  if (!finished_) fs::remove_all(staging_, ec);
}

absl::Status DatasetStore::Upload::Append(const kiln::v1::DatasetChunk& chunk) {
  return Guard("UploadDataset", [&] { return AppendUnguarded(chunk); });
}

absl::Status DatasetStore::Upload::AppendUnguarded(const kiln::v1::DatasetChunk& chunk) {
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

absl::StatusOr<kiln::v1::UploadDatasetResponse> DatasetStore::Upload::Finish() {
  return Guard("UploadDataset", [&] { return FinishUnguarded(); });
}

absl::StatusOr<kiln::v1::UploadDatasetResponse> DatasetStore::Upload::FinishUnguarded() {
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
