// RepositoryFiles: reading the model repository without leaving it.
//
// Every path below the root is opened one component at a time, each relative to its parent
// folder's descriptor with O_NOFOLLOW (openat). A symbolic link met on the way -- a model folder,
// a version folder, config.pbtxt, a model file -- is followed only when its realpath stays inside
// the root's realpath (a Kubernetes ConfigMap volume is links into its own ..data folder); the
// resolved path is then walked again the same way. A link that leads outside is refused, and so
// is a regular file with more than one hard link (it may be a name for a file outside the root).
// The root itself is the operator's choice and may be a link. With `follow_links` (kilnd
// --repository-follow-links) paths are opened normally, any link included.
// Messages name the path relative to the root ("model file 1/model.graph", "config.pbtxt") and
// never the link's target, an absolute path, or anything read from a refused file.
//
// Thread safety: const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::server {

class RepositoryFiles {
 public:
  RepositoryFiles(std::filesystem::path root, bool follow_links)
      : root_(std::move(root)), follow_links_(follow_links) {}

  const std::filesystem::path& root() const { return root_; }
  bool follow_links() const { return follow_links_; }

  enum class Kind { kMissing, kFile, kDir, kLink, kOther };
  // What root/rel is (kLink: a link that leads outside the root, or below one; links that stay
  // inside count as what they reach; with follow_links every link is followed). `rel` uses '/' and has no "." or ".." components.
  Kind Stat(const std::string& rel) const;

  // Names in folder root/rel that are folders, or links (so a refused link is reported, not
  // hidden), sorted. Empty if the folder cannot be read.
  std::vector<std::string> ListFolders(const std::string& rel) const;

  // The contents of the regular file root/rel (at most max_bytes). NOT_FOUND "<shown> is missing";
  // INVALID_ARGUMENT "<shown> is a symbolic link ..." / "... has N hard links ..." / "<shown>: B
  // bytes exceed the limit L".
  absl::StatusOr<std::string> Read(const std::string& rel, int64_t max_bytes,
                                   const std::string& shown) const;

  // An open regular file for loaders that take a path: path() reaches the very file that was
  // checked ("/proc/self/fd/N" while the object lives, so the check and the read see one file).
  class OpenFile {
   public:
    OpenFile() = default;
    OpenFile(OpenFile&& o) noexcept;
    OpenFile& operator=(OpenFile&& o) noexcept;
    ~OpenFile();
    const std::string& path() const { return path_; }

   private:
    friend class RepositoryFiles;
    int fd_ = -1;
    std::string path_;
  };
  absl::StatusOr<OpenFile> Open(const std::string& rel, const std::string& shown) const;

 private:
  // An O_RDONLY descriptor of root/rel after the checks above; errors as Read's. `dir`: want a
  // folder instead of a regular file.
  absl::StatusOr<int> OpenChecked(const std::string& rel, const std::string& shown, bool dir) const;
  // root/rel's realpath relative to the root's realpath, or "" when it is not strictly inside.
  std::string InsideTarget(const std::string& rel) const;

  std::filesystem::path root_;
  bool follow_links_;
};

}  // namespace kiln::server
