// ModelRepository::PublishBuiltin and CheckBuiltinConfig: writing a trained kiln_builtin model
// into the repository folder as a new version; the contracts are in model_repository.h.
#include <cerrno>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/api/status.h"
#include "engine/api/trainer.h"
#include "server/core/checkpoint_store.h"
#include "server/core/failpoint.h"
#include "server/core/model_repository.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace fs = std::filesystem;

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

absl::Status ModelRepository::CheckBuiltinConfig(const RepositoryFiles& files, const std::string& model,
                                                 const std::string& architecture,
                                                 const std::vector<int64_t>& input_shape,
                                                 int64_t num_classes) {
  absl::StatusOr<inference::ModelConfig> cfg = ReadModelConfig(files, model);
  const auto dims = [](const auto& io) {
    return io.size() == 1 ? std::vector<int64_t>(io[0].dims().begin(), io[0].dims().end())
                          : std::vector<int64_t>();
  };
  const bool same = cfg.ok() && cfg->platform() == "kiln_builtin" &&
                    cfg->parameters().count("architecture") > 0 &&
                    cfg->parameters().at("architecture").string_value() == architecture &&
                    dims(cfg->input()) == input_shape &&
                    dims(cfg->output()) == std::vector<int64_t>{num_classes};
  if (!same) {
    return absl::FailedPreconditionError(absl::StrCat(
        "publish: output_model '", model, "' holds a model of another architecture or shape than '",
        architecture, "' (its config.pbtxt); not touched: publish to a new name"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ModelRepository::PublishBuiltin(const fs::path& root, bool follow_links,
                                                        const BuiltinPublication& p) {
  const std::string& name = p.model;
  const fs::path mdir = root / name;
  std::error_code ec;
  if (fs::exists(mdir / "config.pbtxt", ec)) {
    const RepositoryFiles files(root, follow_links);
    KILN_RETURN_IF_ERROR(
        CheckBuiltinConfig(files, name, p.architecture, p.input_shape, p.num_classes));
  }
  fs::create_directories(mdir, ec);
  if (ec) return ErrnoStatus("publish: model folder", ec.value());
  // The weights are staged and hashed first: they are a deterministic function of the
  // publisher's state, so a restarted publish can tell whether the version it meant to write is
  // there.
  const fs::path staging = mdir / absl::StrCat(".staging-", p.staging_tag);
  fs::remove_all(staging, ec);
  fs::create_directories(staging, ec);
  if (ec) return ErrnoStatus("publish: staging folder", ec.value());
  auto fail = [&](const absl::Status& st) {
    fs::remove_all(staging, ec);
    return absl::Status(st.code(), absl::StrCat("publish: ", st.message()));
  };
  const fs::path weights = staging / "model.safetensors";
  absl::Status st = p.write_weights(weights.string());
  if (!st.ok()) return fail(st);
  absl::StatusOr<std::string> sha = api::FileSha256Hex(weights.string());
  if (!sha.ok()) return fail(sha.status());
  // A version this publisher already wrote (it stopped after the folder was renamed into place
  // but before it recorded success): the same bytes under the recorded version number.
  int64_t version = p.recorded_version;
  bool written = false;
  if (version > 0 && fs::exists(mdir / std::to_string(version), ec)) {
    absl::StatusOr<std::string> there =
        api::FileSha256Hex((mdir / std::to_string(version) / "model.safetensors").string());
    written = there.ok() && *there == *sha;
    if (!written) version = 0;  // that number now holds another model: pick a new one
  }
  if (written) {
    spdlog::info("publish: {} version {} is already published", name, version);
    fs::remove_all(staging, ec);
    return version;
  }
  if (version == 0) {
    for (const auto& e : fs::directory_iterator(mdir, ec)) {
      int64_t v = 0;
      if (absl::SimpleAtoi(e.path().filename().string(), &v)) version = std::max(version, v);
    }
    ++version;
  }
  // Intent first: a restart from here on writes this version, never another one.
  if (p.record_intent) {
    if (absl::Status ps = p.record_intent(version); !ps.ok()) return fail(ps);
  }
  KILN_FAILPOINT("publish.after_intent");
  if (st = FsyncPath(weights); st.ok()) st = FsyncPath(staging);
  if (!st.ok()) return fail(st);
  // config.pbtxt before the version folder: a restart's repository scan never finds a version
  // without a config.
  if (!fs::exists(mdir / "config.pbtxt", ec)) {
    st = WriteFileDurable(mdir / "config.pbtxt",
                          ConfigText(name, p.architecture, p.input_shape, p.num_classes));
    if (!st.ok()) return fail(st);
  }
  const fs::path final_dir = mdir / std::to_string(version);
  if (::rename(staging.c_str(), final_dir.c_str()) != 0) {
    return fail(ErrnoStatus("rename", errno));
  }
  if (st = FsyncPath(mdir); !st.ok()) return fail(st);
  KILN_FAILPOINT("publish.after_version_write");
  return version;
}

}  // namespace kiln::server
