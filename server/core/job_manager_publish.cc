// JobManager's model publishing (the lineage rules; ModelRepository::PublishBuiltin writes the
// version folder) and checkpoint downloads; the contracts are in job_manager.h.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "engine/api/status.h"
#include "engine/api/trainer.h"
#include "server/core/checkpoint_store.h"
#include "server/core/failpoint.h"
#include "server/core/job_manager.h"
#include "server/core/model_config.h"
#include "server/core/model_repository.h"
#include "server/core/repository_files.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace fs = std::filesystem;
using kiln::v1::Job;
using kiln::v1::JobSpec;

absl::Status JobManager::CheckOutputModel(const JobSpec& s) const {
  const std::string& name = s.output_model();
  std::error_code ec;
  if (::access(options_.model_repository.c_str(), W_OK) != 0) {
    return absl::FailedPreconditionError(
        "output_model: the model repository is not writable by kilnd (a read-only mount?); "
        "training jobs publish their model there");
  }
  if (store_->IsPublishedModel(name)) {  // training's own lineage
    // The common mistake answered at submit time; Publish checks the shapes, too.
    const std::string& arch = s.architecture();
    // Read as the model repository reads it (no link out of the root, bounded).
    const RepositoryFiles files(options_.model_repository, options_.repository_follow_links);
    absl::StatusOr<inference::ModelConfig> cfg = ReadModelConfig(files, name);
    if (arch.rfind("model:", 0) != 0 && cfg.ok() && cfg->parameters().count("architecture") &&
        cfg->parameters().at("architecture").string_value() != arch) {
      return absl::FailedPreconditionError(absl::StrCat(
          "output_model: '", name, "' is a ", cfg->parameters().at("architecture").string_value(),
          " model; a '", arch.substr(0, 64), "' job publishes to another name"));
    }
    return absl::OkStatus();
  }
  const fs::file_status st = fs::symlink_status(options_.model_repository / name, ec);
  if (fs::exists(st)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "output_model: '", name,
        "' is a model in the repository that no training job published; a job publishes only "
        "to a new model name or to a model an earlier job published, never into another model"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> JobManager::Publish(Job& job, api::Trainer& trainer) {
  const std::string& name = job.spec().output_model();
  std::error_code ec;
  // Publishing never touches another model: the name is training's (recorded before its folder
  // is created), or it is still free and this job claims it now.
  if (!store_->IsPublishedModel(name)) {
    if (fs::exists(fs::symlink_status(options_.model_repository / name, ec))) {
      return absl::AlreadyExistsError(absl::StrCat(
          "publish: output_model '", name,
          "' appeared in the model repository after the job started and no training job "
          "published it; it was not touched (resume after removing it, or start a job with a "
          "new output_model)"));
    }
    KILN_RETURN_IF_ERROR(store_->PutPublishedModel(name, job.id()));
  }
  BuiltinPublication p;
  p.model = name;
  p.architecture = trainer.architecture();
  p.input_shape = trainer.input_shape();
  p.num_classes = trainer.num_classes();
  p.staging_tag = job.id();
  p.recorded_version =
      job.published_version() > 0 ? job.published_version() : job.publishing_version();
  p.write_weights = [&](const std::string& path) { return trainer.ExportWeights(path); };
  p.record_intent = [&](int64_t version) {
    job.set_publishing_version(version);
    return Persist(job);
  };
  KILN_ASSIGN_OR_RETURN(int64_t version,
                        ModelRepository::PublishBuiltin(options_.model_repository,
                                                        options_.repository_follow_links, p));
  if (options_.load_model) {
    if (absl::Status ls = options_.load_model(name); !ls.ok()) {
      return absl::Status(ls.code(), absl::StrCat("publish: load: ", ls.message()));
    }
  }
  job.set_published_version(version);
  job.set_publishing_version(0);
  if (absl::Status ps = Persist(job); !ps.ok()) {
    return absl::Status(ps.code(), absl::StrCat("publish: ", ps.message()));
  }
  KILN_FAILPOINT("publish.after_mark");
  spdlog::info("training: job {} published {} version {}", job.id(), name, version);
  return version;
}

// ---- checkpoint downloads ----

JobManager::CheckpointFile::~CheckpointFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<size_t> JobManager::CheckpointFile::Read(uint64_t offset, size_t n,
                                                        std::string* out) const {
  const size_t start = out->size();
  out->resize(start + n);
  ssize_t got;
  do {
    got = ::pread(fd_, out->data() + start, n, static_cast<off_t>(offset));
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    out->resize(start);
    return ErrnoStatus("checkpoint: read", errno);
  }
  out->resize(start + static_cast<size_t>(got));
  return static_cast<size_t>(got);
}

absl::StatusOr<std::unique_ptr<JobManager::CheckpointFile>> JobManager::OpenCheckpoint(
    const std::string& id) const {
  KILN_RETURN_IF_ERROR(Get(id).status());
  CheckpointStore ckpts(options_.data_dir / "jobs" / id, 2, absl::StrCat("<data-dir>/jobs/", id));
  const std::vector<CheckpointInfo> all = ckpts.List();
  // Newest first. The file is opened, then hashed through that descriptor, so what is served is
  // exactly what matched the manifest even if the job replaces the generation meanwhile.
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const int fd = ::open(it->data.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    std::unique_ptr<CheckpointFile> file(new CheckpointFile(fd, it->step, it->bytes, it->sha256));
    struct stat st {};
    absl::StatusOr<std::string> sha = api::FileSha256Hex(absl::StrCat("/proc/self/fd/", fd));
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != it->bytes || !sha.ok() ||
        *sha != it->sha256) {
      continue;  // partial or replaced: the next older generation
    }
    return file;
  }
  return absl::NotFoundError(absl::StrCat("id: job ", id, " has no checkpoint yet"));
}

}  // namespace kiln::server
