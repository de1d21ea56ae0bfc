#include "server/core/repository_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln::server {
namespace {

constexpr int kReadFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;  // O_NONBLOCK: a FIFO never blocks

std::vector<std::string> Components(const std::string& rel) {
  std::vector<std::string> out;
  for (absl::string_view c : absl::StrSplit(rel, '/', absl::SkipEmpty())) out.emplace_back(c);
  return out;
}

bool IsLinkAt(int dfd, const std::string& name) {
  struct stat st;
  return fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
}

absl::Status LinkRefused(const std::string& shown) {
  return absl::InvalidArgumentError(absl::StrCat(
      shown, " is, or is inside, a symbolic link that leads outside the model repository, which "
             "kilnd does not follow (start kilnd with --repository-follow-links to allow it)"));
}

}  // namespace

RepositoryFiles::OpenFile::OpenFile(OpenFile&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}
RepositoryFiles::OpenFile& RepositoryFiles::OpenFile::operator=(OpenFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}
RepositoryFiles::OpenFile::~OpenFile() {
  if (fd_ >= 0) close(fd_);
}

namespace {

// Opens `parts` below the folder `root` one component at a time with O_NOFOLLOW. Returns the
// descriptor, or -1 with *link set when a component is a symbolic link, or -1 with *err = errno.
int Walk(const std::string& root, const std::vector<std::string>& parts, bool dir, bool* link, int* err) {
  *link = false;
  int dfd = open(root.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECTORY);
  if (dfd < 0) {
    *err = errno;
    return -1;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    const int flags = kReadFlags | O_NOFOLLOW | (!last || dir ? O_DIRECTORY : 0);
    const int next = openat(dfd, parts[i].c_str(), flags);
    *err = errno;
    *link = next < 0 && (*err == ELOOP || *err == ENOTDIR || *err == EMLINK) && IsLinkAt(dfd, parts[i]);
    close(dfd);
    if (next < 0) return -1;
    dfd = next;
  }
  return dfd;
}

// realpath(3) as a string; "" if it fails.
std::string RealPath(const std::string& path) {
  char* r = realpath(path.c_str(), nullptr);
  if (r == nullptr) return "";
  std::string out(r);
  std::free(r);
  return out;
}

}  // namespace

std::string RepositoryFiles::InsideTarget(const std::string& rel) const {
  const std::string root = RealPath(root_.string());
  const std::string target = RealPath((root_ / rel).string());
  if (root.empty() || target.empty() || target.size() <= root.size() + 1 ||
      target.compare(0, root.size(), root) != 0 || target[root.size()] != '/') {
    return "";
  }
  return target.substr(root.size() + 1);
}

absl::StatusOr<int> RepositoryFiles::OpenChecked(const std::string& rel, const std::string& shown,
                                                 bool dir) const {
  const std::vector<std::string> parts = Components(rel);
  for (const std::string& p : parts) {
    if (p == "." || p == "..") return absl::InvalidArgumentError(absl::StrCat(shown, ": not a plain path"));
  }
  int fd = -1;
  if (follow_links_) {
    fd = open((root_ / rel).c_str(), kReadFlags | (dir ? O_DIRECTORY : 0));
    if (fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR) return absl::NotFoundError(absl::StrCat(shown, " is missing"));
      return absl::NotFoundError(absl::StrCat(shown, " is unreadable"));
    }
  } else {
    bool link = false;
    int err = 0;
    fd = Walk(root_.string(), parts, dir, &link, &err);
    if (fd < 0 && link) {
      // A link that stays inside the root (a Kubernetes ConfigMap volume is made of such links
      // into its ..data folder) is followed: the resolved path is walked again, link-free.
      const std::string inside = InsideTarget(rel);
      if (inside.empty()) return LinkRefused(shown);
      fd = Walk(RealPath(root_.string()), Components(inside), dir, &link, &err);
      if (fd < 0 && link) return LinkRefused(shown);  // changed meanwhile
    }
    if (fd < 0) {
      if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(absl::StrCat(shown, " is missing"));
      return absl::NotFoundError(absl::StrCat(shown, " is unreadable"));
    }
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::NotFoundError(absl::StrCat(shown, " is unreadable"));
  }
  if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(shown, " is not a ", dir ? "folder" : "regular file"));
  }
  if (!dir && !follow_links_ && st.st_nlink > 1) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        shown, " has ", st.st_nlink, " hard links; kilnd reads only files with one name in the model repository "
        "(start kilnd with --repository-follow-links to allow links)"));
  }
  return fd;
}

RepositoryFiles::Kind RepositoryFiles::Stat(const std::string& rel) const {
  struct stat st;
  if (follow_links_) {
    if (stat((root_ / rel).c_str(), &st) != 0) return Kind::kMissing;
    return S_ISDIR(st.st_mode) ? Kind::kDir : S_ISREG(st.st_mode) ? Kind::kFile : Kind::kOther;
  }
  std::vector<std::string> parts = Components(rel);
  if (parts.empty()) return Kind::kDir;
  const std::string last = parts.back();
  parts.pop_back();
  std::string parent;
  for (const std::string& p : parts) absl::StrAppend(&parent, parent.empty() ? "" : "/", p);
  absl::StatusOr<int> dfd = parts.empty() ? absl::StatusOr<int>(open(root_.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECTORY))
                                          : OpenChecked(parent, parent, /*dir=*/true);
  if (!dfd.ok()) return absl::IsInvalidArgument(dfd.status()) ? Kind::kLink : Kind::kMissing;
  // (A parent that is an inside link was resolved by OpenChecked; `last` is looked at in it.)
  if (*dfd < 0) return Kind::kMissing;
  Kind kind = Kind::kMissing;
  if (fstatat(*dfd, last.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    kind = S_ISLNK(st.st_mode) ? Kind::kLink
           : S_ISDIR(st.st_mode) ? Kind::kDir
           : S_ISREG(st.st_mode) ? Kind::kFile
                                 : Kind::kOther;
  }
  close(*dfd);
  if (kind == Kind::kLink && !InsideTarget(rel).empty() && stat((root_ / rel).c_str(), &st) == 0) {
    kind = S_ISDIR(st.st_mode) ? Kind::kDir : S_ISREG(st.st_mode) ? Kind::kFile : Kind::kOther;
  }
  return kind;
}

std::vector<std::string> RepositoryFiles::ListFolders(const std::string& rel) const {
  std::vector<std::string> names;
  absl::StatusOr<int> fd = rel.empty() ? absl::StatusOr<int>(open(root_.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECTORY))
                                       : OpenChecked(rel, rel, /*dir=*/true);
  if (!fd.ok() || *fd < 0) return names;
  DIR* d = fdopendir(*fd);  // owns fd from here
  if (d == nullptr) {
    close(*fd);
    return names;
  }
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (fstatat(dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    bool listed = S_ISDIR(st.st_mode);
    if (S_ISLNK(st.st_mode)) {  // listed when it names a folder: refused at load (or followed)
      struct stat target;
      listed = fstatat(dirfd(d), name.c_str(), &target, 0) == 0 && S_ISDIR(target.st_mode);
    }
    if (listed) names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> RepositoryFiles::Read(const std::string& rel, int64_t max_bytes,
                                                  const std::string& shown) const {
  absl::StatusOr<int> fd = OpenChecked(rel, shown, /*dir=*/false);
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (fstat(*fd, &st) != 0 || st.st_size > max_bytes) {
    const int64_t size = st.st_size;
    close(*fd);
    return absl::InvalidArgumentError(
        absl::StrCat(shown, ": ", size, " bytes exceed the limit ", max_bytes));
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = read(*fd, data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(*fd);
  if (got != data.size()) return absl::NotFoundError(absl::StrCat(shown, " is unreadable"));
  return data;
}

absl::StatusOr<RepositoryFiles::OpenFile> RepositoryFiles::Open(const std::string& rel,
                                                               const std::string& shown) const {
  absl::StatusOr<int> fd = OpenChecked(rel, shown, /*dir=*/false);
  if (!fd.ok()) return fd.status();
  OpenFile f;
  f.fd_ = *fd;
  const std::string proc = absl::StrCat("/proc/self/fd/", *fd);
  struct stat via_proc, direct;
  // The file reached through /proc must be the one that was checked; without /proc, the checked
  // path (a race with a concurrent rename is the operator's own).
  if (stat(proc.c_str(), &via_proc) == 0 && fstat(*fd, &direct) == 0 && via_proc.st_ino == direct.st_ino &&
      via_proc.st_dev == direct.st_dev) {
    f.path_ = proc;
  } else {
    f.path_ = (root_ / rel).string();
  }
  return f;
}

}  // namespace kiln::server
