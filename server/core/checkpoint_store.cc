#include "server/core/checkpoint_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/api/trainer.h"
#include "server/core/checkpoint_manifest.h"
#include "server/core/failpoint.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace fs = std::filesystem;
namespace {

bool ParseStepName(const std::string& file, const std::string& suffix, int64_t* step) {
  if (file.size() != 5 + 10 + suffix.size() || file.rfind("ckpt-", 0) != 0 ||
      file.compare(15, suffix.size(), suffix) != 0) {
    return false;
  }
  return absl::SimpleAtoi(file.substr(5, 10), step);
}

absl::StatusOr<CheckpointInfo> ReadManifest(const fs::path& dir, int64_t step) {
  std::ifstream in(dir / (CheckpointStem(step) + ".manifest"), std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  absl::StatusOr<CheckpointManifest> m = ParseCheckpointManifest(text.str(), step);
  if (!m.ok()) return m.status();
  CheckpointInfo info;
  info.step = m->step;
  info.bytes = m->bytes;
  info.sha256 = m->sha256;
  info.data = dir / m->file;
  return info;
}

}  // namespace

absl::Status ErrnoStatus(const std::string& what, int err) {
  if (err == ENOSPC || err == EDQUOT) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": no space left on device (",
                                                     err == ENOSPC ? "ENOSPC" : "EDQUOT", ")"));
  }
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(err)));
}

absl::Status FsyncPath(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("fsync", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus("fsync", err);
  return absl::OkStatus();
}

absl::Status WriteFileDurable(const fs::path& path, const std::string& data) {
  const fs::path tmp = fs::path(path.string() + ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("write", errno);
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoStatus("write", err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoStatus("fsync", err);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("rename", err);
  }
  return FsyncPath(path.parent_path());
}

absl::StatusOr<CheckpointInfo> CheckpointStore::Save(
    int64_t step, const std::function<absl::Status(const std::string&)>& writer) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return ErrnoStatus(absl::StrCat("checkpoint folder ", display_), ec.value());
  const std::string name = CheckpointStem(step);
  const fs::path data = dir_ / (name + ".safetensors");
  const fs::path tmp = fs::path(data.string() + ".tmp");
  const std::string shown_tmp = absl::StrCat(display_, "/", name, ".safetensors.tmp");
  // What a failure leaves: nothing of this generation, and the newest complete one untouched.
  auto failed = [&](const absl::Status& st, const std::string& where) {
    fs::remove(tmp, ec);
    fs::remove(data, ec);
    fs::remove(fs::path(dir_ / (name + ".manifest.tmp")), ec);
    const std::vector<CheckpointInfo> kept = List();
    const std::string intact =
        kept.empty() ? "no earlier checkpoint exists"
                     : absl::StrCat("the checkpoint at step ", kept.back().step, " is intact");
    const std::string m(st.message());
    const bool full = absl::IsResourceExhausted(st) ||
                      m.find("No space left") != std::string::npos ||
                      m.find("no space left") != std::string::npos ||
                      m.find("quota exceeded") != std::string::npos;
    if (full) {
      spdlog::error("checkpoints: disk full writing {}: {}",
                    (dir_ / (name + ".safetensors")).string(), m);
      return absl::ResourceExhaustedError(
          absl::StrCat("checkpoint at step ", step, ": no space left on device (ENOSPC) writing ",
                       where, "; the partial file was removed and ", intact));
    }
    return absl::Status(st.code(), absl::StrCat("checkpoint at step ", step, ": writing ", where,
                                                ": ", m, "; ", intact));
  };
  absl::Status st = writer(tmp.string());
  if (!st.ok()) return failed(st, shown_tmp);
  KILN_FAILPOINT("checkpoint.after_temp_write");
  if (st = FsyncPath(tmp); !st.ok()) return failed(st, shown_tmp);
  KILN_FAILPOINT("checkpoint.after_temp_fsync");
  if (::rename(tmp.c_str(), data.c_str()) != 0) {
    return failed(ErrnoStatus("rename", errno), shown_tmp);
  }
  KILN_FAILPOINT("checkpoint.after_rename");
  if (st = FsyncPath(dir_); !st.ok()) return failed(st, display_);
  absl::StatusOr<std::string> sha = api::FileSha256Hex(data.string());
  CheckpointInfo info;
  info.step = step;
  info.data = data;
  info.bytes = fs::file_size(data, ec);
  if (!sha.ok() || ec) {
    return failed(absl::InternalError("cannot hash the data"),
                  absl::StrCat(display_, "/", name, ".safetensors"));
  }
  info.sha256 = *sha;
  const std::string manifest = FormatCheckpointManifest(
      {.step = step, .file = data.filename().string(), .bytes = info.bytes, .sha256 = info.sha256});
  if (st = WriteFileDurable(dir_ / (name + ".manifest"), manifest); !st.ok()) {
    return failed(st, absl::StrCat(display_, "/", name, ".manifest"));
  }
  KILN_FAILPOINT("checkpoint.after_manifest");
  // Keep the newest `keep_` generations: the manifest goes first, so a crash in between leaves
  // a data file without a manifest (partial; Clean removes it), never a manifest without data.
  std::vector<CheckpointInfo> all = List();
  for (size_t i = 0; i + keep_ < all.size(); ++i) {
    fs::remove(dir_ / (CheckpointStem(all[i].step) + ".manifest"), ec);
    fs::remove(all[i].data, ec);
  }
  (void)FsyncPath(dir_);
  return info;
}

std::vector<CheckpointInfo> CheckpointStore::List() const {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    int64_t step = 0;
    if (!ParseStepName(entry.path().filename().string(), ".manifest", &step)) continue;
    absl::StatusOr<CheckpointInfo> info = ReadManifest(dir_, step);
    if (info.ok()) {
      out.push_back(*info);
    } else {
      spdlog::warn("checkpoints: {}", std::string(info.status().message()));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
  return out;
}

absl::Status CheckpointStore::Verify(const CheckpointInfo& info) {
  std::error_code ec;
  const uint64_t bytes = fs::file_size(info.data, ec);
  if (ec || bytes != info.bytes) {
    return absl::DataLossError(absl::StrCat("checkpoint ", info.step, ": data size ",
                                            ec ? 0 : bytes, " != manifest ", info.bytes));
  }
  absl::StatusOr<std::string> sha = api::FileSha256Hex(info.data.string());
  if (!sha.ok() || *sha != info.sha256) {
    return absl::DataLossError(absl::StrCat("checkpoint ", info.step, ": SHA-256 mismatch"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointInfo> CheckpointStore::Latest(
    const std::function<absl::Status(const CheckpointInfo&)>& loader) const {
  std::vector<CheckpointInfo> all = List();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    absl::Status st = Verify(*it);
    if (st.ok()) st = loader(*it);
    if (st.ok()) return *it;
    spdlog::warn("checkpoints: skipping step {}: {}", it->step, std::string(st.message()));
  }
  return absl::NotFoundError("no valid checkpoint");
}

void CheckpointStore::Clean() const {
  std::error_code ec;
  std::vector<fs::path> remove;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    // "*.tmp" (ours) and "*.tmp.<pid>" (SafeSave's own temp inside the writer).
    if (name.find(".tmp") != std::string::npos) {
      remove.push_back(entry.path());
    } else if (ParseStepName(name, ".safetensors", &step) &&
               !fs::exists(dir_ / (CheckpointStem(step) + ".manifest"))) {
      remove.push_back(entry.path());
    }
  }
  for (const fs::path& p : remove) {
    spdlog::info("checkpoints: removing partial file {}", p.filename().string());
    fs::remove(p, ec);
  }
}

}  // namespace kiln::server
