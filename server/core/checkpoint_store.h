// CheckpointStore: durable checkpoint generations of one training job in one folder.
//
// Layout: ckpt-<step 10 digits>.safetensors (the data, written by the caller's writer) and
// ckpt-<step>.manifest (text: format line, step, file name, byte count, SHA-256), both published
// with PostgreSQL's durable_rename recipe: write "<name>.tmp", fsync it, rename over the final
// name, fsync the folder. The manifest is written after its data, so a manifest names only data
// that is complete on disk; a checkpoint without a manifest is partial.
//
//   Save(step, writer)  writer(tmp_path) writes the data; fsync; rename; fsync folder; then the
//                       manifest (durably) and generations beyond `keep` (newest kept) are
//                       removed, manifest first. On failure every file of this generation is
//                       removed and the previous generations are untouched; a full disk is
//                       RESOURCE_EXHAUSTED "no space left on device (ENOSPC) writing <file>; ...
//                       the checkpoint at step N is intact". Failpoints checkpoint.* (failpoint.h)
//                       mark each stage.
//   Latest(loader)      newest generation whose manifest parses and whose data matches the
//                       manifest's size and SHA-256, and that `loader` accepts; a generation that
//                       fails any check is skipped (logged) and the next older one is tried.
//                       NOT_FOUND when none is valid.
//   Clean()             removes temp files (*.tmp, and the writer's *.tmp.<pid>) and data files
//                       that have no manifest (left by a crash).
// Thread safety: one job's store is used by one thread at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::server {

struct CheckpointInfo {
  int64_t step = 0;
  std::filesystem::path data;  // the safetensors file
  uint64_t bytes = 0;
  std::string sha256;
};

class CheckpointStore {
 public:
  // `display` names the folder in error messages (default: its path), e.g. "<data-dir>/jobs/<id>"
  // so that messages sent to clients do not carry the host's paths.
  CheckpointStore(std::filesystem::path dir, int keep = 2, std::string display = "")
      : dir_(std::move(dir)),
        keep_(keep),
        display_(display.empty() ? dir_.string() : std::move(display)) {}

  absl::StatusOr<CheckpointInfo> Save(
      int64_t step, const std::function<absl::Status(const std::string& tmp_path)>& writer);
  absl::StatusOr<CheckpointInfo> Latest(
      const std::function<absl::Status(const CheckpointInfo&)>& loader) const;
  // Generations with a manifest, oldest first (not verified).
  std::vector<CheckpointInfo> List() const;
  // Verifies one generation's data against its manifest (size and SHA-256). DATA_LOSS if not.
  static absl::Status Verify(const CheckpointInfo& info);
  void Clean() const;

  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  int keep_;
  std::string display_;
};

// Durable file publication (also used to publish model versions): writes `data` to
// "<path>.tmp", fsyncs, renames onto `path`, fsyncs the parent folder.
absl::Status WriteFileDurable(const std::filesystem::path& path, const std::string& data);
// fsync of a file or folder by path.
absl::Status FsyncPath(const std::filesystem::path& path);
// "write failed: <strerror>" as INTERNAL, or RESOURCE_EXHAUSTED "no space left on device".
absl::Status ErrnoStatus(const std::string& what, int err);

}  // namespace kiln::server
