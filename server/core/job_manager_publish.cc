// JobManager's model publishing (lineage check, version folder) and checkpoint downloads; the
// contracts are in job_manager.h.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/api/status.h"
#include "engine/api/trainer.h"
#include "server/core/checkpoint_store.h"
#include "server/core/failpoint.h"
#include "server/core/job_manager.h"
#include "server/core/limits.h"
#include "server/core/model_config.h"
#include "server/core/repository_files.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace fs = std::filesystem;
using kiln::v1::Job;
using kiln::v1::JobSpec;

namespace {

std::string ConfigText(const std::string& name, const std::string& arch,
                       const std::vector<int64_t>& in, int64_t classes) {
  return absl::StrCat("# Published by a kilnd training job.\nname: \"", name,
                      "\"\nplatform: \"kiln_builtin\"\nmax_batch_size: 64\n",
                      "input [{ name: \"INPUT\" data_type: TYPE_FP32 dims: [ ",
                      absl::StrJoin(in, ", "), " ] }]\n",
                      "output [{ name: \"OUTPUT\" data_type: TYPE_FP32 dims: [ ", classes,
                      " ] }]\n", "parameters { key: \"architecture\" value { string_value: \"",
                      arch, "\" } }\nversion_policy: { latest: { num_versions: 1 } }\n");
}

}  // namespace

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
    absl::StatusOr<std::string> text = files.Read(name + "/config.pbtxt", kMaxConfigBytes, "config.pbtxt");
    absl::StatusOr<inference::ModelConfig> cfg =
        text.ok() ? ParseModelConfigText(*text) : absl::StatusOr<inference::ModelConfig>(text.status());
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

absl::Status JobManager::CheckPublishedConfig(const fs::path& config, const std::string& name,
                                              const api::Trainer& trainer) {
  std::ifstream in(config);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<inference::ModelConfig> cfg = ParseModelConfigText(text.str());
  const auto dims = [](const auto& io) {
    return io.size() == 1 ? std::vector<int64_t>(io[0].dims().begin(), io[0].dims().end())
                          : std::vector<int64_t>();
  };
  const bool same = in && cfg.ok() && cfg->platform() == "kiln_builtin" &&
                    cfg->parameters().count("architecture") > 0 &&
                    cfg->parameters().at("architecture").string_value() == trainer.architecture() &&
                    dims(cfg->input()) == trainer.input_shape() &&
                    dims(cfg->output()) == std::vector<int64_t>{trainer.num_classes()};
  if (!same) {
    return absl::FailedPreconditionError(absl::StrCat(
        "publish: output_model '", name, "' holds a model of another architecture or shape than '",
        trainer.architecture(), "' (its config.pbtxt); not touched: publish to a new name"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> JobManager::Publish(Job& job, api::Trainer& trainer) {
  const std::string& name = job.spec().output_model();
  const fs::path mdir = options_.model_repository / name;
  std::error_code ec;
  // Publishing never touches another model: the name is training's (recorded before its folder
  // is created), or it is still free and this job claims it now.
  if (!store_->IsPublishedModel(name)) {
    if (fs::exists(fs::symlink_status(mdir, ec))) {
      return absl::AlreadyExistsError(absl::StrCat(
          "publish: output_model '", name,
          "' appeared in the model repository after the job started and no training job "
          "published it; it was not touched (resume after removing it, or start a job with a "
          "new output_model)"));
    }
    KILN_RETURN_IF_ERROR(store_->PutPublishedModel(name, job.id()));
  } else if (fs::exists(mdir / "config.pbtxt", ec)) {
    KILN_RETURN_IF_ERROR(CheckPublishedConfig(mdir / "config.pbtxt", name, trainer));
  }
  fs::create_directories(mdir, ec);
  if (ec) return ErrnoStatus("publish: model folder", ec.value());
  // The weights are staged and hashed first: they are a deterministic function of the final
  // checkpoint, so a restarted publish can tell whether the version it meant to write is there.
  const fs::path staging = mdir / absl::StrCat(".staging-", job.id());
  fs::remove_all(staging, ec);
  fs::create_directories(staging, ec);
  if (ec) return ErrnoStatus("publish: staging folder", ec.value());
  auto fail = [&](const absl::Status& st) {
    fs::remove_all(staging, ec);
    return absl::Status(st.code(), absl::StrCat("publish: ", st.message()));
  };
  const fs::path weights = staging / "model.safetensors";
  absl::Status st = trainer.ExportWeights(weights.string());
  if (!st.ok()) return fail(st);
  absl::StatusOr<std::string> sha = api::FileSha256Hex(weights.string());
  if (!sha.ok()) return fail(sha.status());
  // A version this job already wrote (kilnd stopped after the folder was renamed into place but
  // before the job was marked SUCCEEDED): the same bytes under the recorded version number.
  int64_t version =
      job.published_version() > 0 ? job.published_version() : job.publishing_version();
  bool written = false;
  if (version > 0 && fs::exists(mdir / std::to_string(version), ec)) {
    absl::StatusOr<std::string> there =
        api::FileSha256Hex((mdir / std::to_string(version) / "model.safetensors").string());
    written = there.ok() && *there == *sha;
    if (!written) version = 0;  // that number now holds another model: pick a new one
  }
  if (written) {
    spdlog::info("training: job {}: {} version {} is already published", job.id(), name, version);
    fs::remove_all(staging, ec);
  } else {
    if (version == 0) {
      for (const auto& e : fs::directory_iterator(mdir, ec)) {
        int64_t v = 0;
        if (absl::SimpleAtoi(e.path().filename().string(), &v)) version = std::max(version, v);
      }
      ++version;
    }
    // Intent first: a restart from here on writes this version, never another one.
    job.set_publishing_version(version);
    if (absl::Status ps = Persist(job); !ps.ok()) return fail(ps);
    KILN_FAILPOINT("publish.after_intent");
    if (st = FsyncPath(weights); st.ok()) st = FsyncPath(staging);
    if (!st.ok()) return fail(st);
    // config.pbtxt before the version folder: a restart's repository scan never finds a version
    // without a config.
    if (!fs::exists(mdir / "config.pbtxt", ec)) {
      st = WriteFileDurable(
          mdir / "config.pbtxt",
          ConfigText(name, trainer.architecture(), trainer.input_shape(), trainer.num_classes()));
      if (!st.ok()) return fail(st);
    }
    const fs::path final_dir = mdir / std::to_string(version);
    if (::rename(staging.c_str(), final_dir.c_str()) != 0) {
      return fail(ErrnoStatus("rename", errno));
    }
    if (st = FsyncPath(mdir); !st.ok()) return fail(st);
    KILN_FAILPOINT("publish.after_version_write");
  }
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
