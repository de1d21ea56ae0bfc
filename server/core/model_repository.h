// The model repository: Triton's folder layout, load/unload, version policies, readiness.
//
//   <root>/<model>/config.pbtxt      inference::ModelConfig in protobuf text
//   <root>/<model>/<version>/...     version folders: positive integers; files per platform
//
// Load(model) reads the config, picks versions by version_policy (latest N / all / specific),
// checks each version's files (model_artifact.h) and publishes the result atomically: a reload
// that fails keeps the versions already serving. Unload(model) marks every version UNAVAILABLE
// ("unloaded"); requests in flight keep their shared_ptr<const ModelVersion> and finish.
//
// States per version: UNKNOWN, READY, UNAVAILABLE, LOADING, UNLOADING (Triton's names).
// Thread safety: every method may be called from any thread. Loads and unloads are serialized
// (one at a time); lookups take a shared lock only and never wait for a load's file I/O.
// Model names are checked with IsValidModelName and looked up in the folder listing, never used
// to build a path unchecked; messages name models and versions, never absolute paths.
// Confinement: every file is read through RepositoryFiles (repository_files.h): no symbolic link
// below the root is followed (a linked model folder is listed UNAVAILABLE with the reason) and no
// multiply-linked file is read, unless `follow_links`; parse errors never quote a file's text.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/api/engine.h"
#include "engine/api/llm_model.h"
#include "inference/model_config.pb.h"
#include "server/core/classification.h"
#include "server/core/repository_files.h"
#include "server/core/statistics.h"

namespace kiln::server {

class DynamicBatcher;  // dynamic_batcher.h

enum class ModelState { kUnknown, kReady, kUnavailable, kLoading, kUnloading };

std::string_view ModelStateName(ModelState state);

// One loaded, READY version. Immutable except for `stats`.
struct ModelVersion {
  std::string name;
  int64_t version = 0;
  std::shared_ptr<const inference::ModelConfig> config;
  // Classification labels of the outputs that name a label_filename (classification.h); null if none.
  std::shared_ptr<const OutputLabels> labels;
  std::shared_ptr<ModelStats> stats;
  // The canonical device the version runs on (placement.h); "" when loaded without a placer.
  std::string device;
  // kiln_graph: the graph, decoded and validated by the engine at load (null without an engine).
  std::shared_ptr<const api::PreparedGraph> graph;
  // kiln_builtin: the architecture with its weights, loaded by the engine (null without an engine).
  std::shared_ptr<const api::BuiltinModel> builtin;
  // ONNX (onnx_config.h): the model loaded by the engine (null without an engine).
  std::shared_ptr<const api::OnnxModel> onnx;
  // kiln_llm: the LLM and its generator (its own thread and KV cache), loaded at load time (null
  // without an engine). Served by the generate / OpenAI routes (server/rest/llm_routes.h) and the
  // KServe inference calls (llm_infer.cc).
  std::shared_ptr<api::LlmModel> llm;
  // Instances (instance_group count, placement.h): how many executors run the version, each on
  // its own lane of `device` (instance 0 uses the fields above). Instances 1.. of kiln_builtin and
  // ONNX versions hold their own copy of the model, loaded by their own engine (an engine model is
  // not shared between engines); kiln_graph instances share `graph`.
  int instance_count = 1;
  struct Instance {
    std::shared_ptr<const api::BuiltinModel> builtin;
    std::shared_ptr<const api::OnnxModel> onnx;
  };
  std::vector<Instance> more_instances;  // instances 1 .. instance_count - 1
  // Where InferenceServer::PickLane starts its scan (round robin), so that requests arriving
  // together at idle instances spread over them.
  std::shared_ptr<std::atomic<uint32_t>> next_instance = std::make_shared<std::atomic<uint32_t>>(0);
  // Dynamic batching (dynamic_batcher.h): the version's batch queue; null when the config has no
  // dynamic_batching block (each request then runs as it comes).
  std::shared_ptr<DynamicBatcher> batcher;
  // Requests of this version waiting for execution (bounded by InferenceServer).
  std::shared_ptr<std::atomic<int64_t>> pending = std::make_shared<std::atomic<int64_t>>(0);
  // Engine time per batch item of the version's latest successful run (0 = none yet); how
  // InferenceServer judges whether a request is short enough to run inline.
  std::shared_ptr<std::atomic<uint64_t>> last_compute_ns_per_item =
      std::make_shared<std::atomic<uint64_t>>(0);
};

struct RepositoryIndexEntry {
  std::string name;
  std::string version;  // "" for a model with no version loaded
  std::string state;    // ModelStateName, or "" for a model never loaded
  std::string reason;
};

// Decides where a model runs (placement.h) and hands out that device's engine. Implemented by
// InferenceServer; called by Load with the normalized config, once per load.
class ModelPlacer {
 public:
  struct Placement {
    std::string device;             // canonical device name
    api::Engine* engine = nullptr;  // not owned; outlives the repository. Null: no engine (the
                                    // versions load, checked by their files only, and cannot run)
    // The engines of instances 1.. (instance_group count - 1 of them; placement.h), not owned.
    std::vector<api::Engine*> more_engines;
  };
  virtual ~ModelPlacer() = default;
  // May rewrite config->instance_group to the resolved placement (Triton echoes it).
  // INVALID_ARGUMENT naming the field for a device the machine does not have.
  virtual absl::StatusOr<Placement> Place(inference::ModelConfig* config) = 0;
  // Runs the version's config.model_warmup before it is published READY (warmup.h); an error
  // fails the version's load. Default: nothing to run.
  virtual absl::Status Warmup(const ModelVersion& version, const RepositoryFiles& files) {
    return absl::OkStatus();
  }
};

// Reads <name>/config.pbtxt through `files` as Load does (no link out of the root, at most
// kMaxConfigBytes) and parses it. The reader's status (NOT_FOUND, ...) or INVALID_ARGUMENT.
absl::StatusOr<inference::ModelConfig> ReadModelConfig(const RepositoryFiles& files,
                                                       const std::string& name);

// A trained kiln_builtin model to publish as a new version (ModelRepository::PublishBuiltin).
struct BuiltinPublication {
  std::string model;         // a valid model name; the caller decided it may be written
  std::string architecture;  // an architectures.h name
  std::vector<int64_t> input_shape;
  int64_t num_classes = 0;
  std::string staging_tag;       // unique per publisher (a job id): <model>/.staging-<tag>
  int64_t recorded_version = 0;  // the version this publisher recorded earlier (0 = none)
  // Writes the weights (safetensors) to `path`; deterministic for a given publisher.
  std::function<absl::Status(const std::string& path)> write_weights;
  // Records `version` durably before anything is written (the publisher's intent).
  std::function<absl::Status(int64_t version)> record_intent;
};

class ModelRepository {
 public:
  // Publishes `p` as the next version folder of <root>/<p.model>, idempotently: the weights are
  // staged and hashed; a recorded version already holding the same bytes is answered as is
  // (a publisher that crashed after the rename); else the next free number is recorded
  // (record_intent), the staging folder is fsynced, config.pbtxt is written durably first if
  // the model is new, and the folder is renamed into place. FAILED_PRECONDITION if an existing
  // config.pbtxt describes another architecture or shape (nothing is touched). Errors are
  // prefixed "publish: ". Failpoints publish.after_intent, publish.after_version_write. Does not
  // load the model (Load does). Needs no repository object: the trainer's process may publish
  // into the folder another process serves.
  static absl::StatusOr<int64_t> PublishBuiltin(const std::filesystem::path& root, bool follow_links,
                                                const BuiltinPublication& p);
  // OK if <model>/config.pbtxt is a kiln_builtin config of `architecture` with `input_shape`
  // and `num_classes` outputs; FAILED_PRECONDITION naming the model otherwise.
  static absl::Status CheckBuiltinConfig(const RepositoryFiles& files, const std::string& model,
                                         const std::string& architecture,
                                         const std::vector<int64_t>& input_shape,
                                         int64_t num_classes);

  // `placer` (may be null; not owned, must outlive the repository) places each model and gives
  // the engine that prepares kiln_graph versions and loads kiln_builtin weights at load, so a
  // model the engine rejects never goes READY.
  // `strict_model_config` (--strict-model-config): every model needs a complete config.pbtxt;
  // nothing is completed from model.onnx.
  explicit ModelRepository(std::filesystem::path root, ModelPlacer* placer = nullptr,
                           bool follow_links = false, bool strict_model_config = false);

  // Loads every model folder under the root. Models that fail stay UNAVAILABLE with a reason
  // (logged); only an unreadable root is an error (NOT_FOUND).
  absl::Status LoadAll();

  // Loads or reloads `name`. `config_override` replaces config.pbtxt (the `config` load
  // parameter). NOT_FOUND: no such model folder; INVALID_ARGUMENT: bad name, config or files.
  absl::Status Load(std::string_view name,
                    std::optional<inference::ModelConfig> config_override = std::nullopt);

  // Unloads every version of `name`. NOT_FOUND if the model is neither loaded nor in the folder.
  absl::Status Unload(std::string_view name);

  // The version that serves a request: `version` "" = the highest READY version.
  // NOT_FOUND: unknown model or version; INVALID_ARGUMENT: `version` is not a positive integer;
  // UNAVAILABLE: known but not READY.
  absl::StatusOr<std::shared_ptr<const ModelVersion>> GetReady(std::string_view name,
                                                               std::string_view version) const;

  // READY versions of `name`, ascending (empty if none or unknown).
  std::vector<std::shared_ptr<const ModelVersion>> ReadyVersions(std::string_view name) const;

  // Every READY version of every model, by name then version.
  std::vector<std::shared_ptr<const ModelVersion>> AllReady() const;

  // True if `name` is loaded or has a folder in the repository.
  bool Exists(std::string_view name) const;

  // Models in the folder or loaded, with one row per known version. `ready_only`: READY rows.
  std::vector<RepositoryIndexEntry> Index(bool ready_only) const;

 private:
  struct VersionSlot {
    ModelState state = ModelState::kUnknown;
    std::string reason;
    std::shared_ptr<const ModelVersion> model;  // set iff state == kReady
  };
  struct ModelEntry {
    ModelState state = ModelState::kUnknown;  // used when `versions` is empty
    std::string reason;
    std::map<int64_t, VersionSlot> versions;
  };

  std::vector<std::string> ListModelFolders() const;
  bool HasFolder(std::string_view name) const;
  // Builds a new entry for `name` without touching the published state (file I/O only).
  absl::StatusOr<ModelEntry> BuildEntry(
      const std::string& name, std::optional<inference::ModelConfig> config_override) const;

  const std::filesystem::path root_;
  const RepositoryFiles files_;
  ModelPlacer* const placer_;
  const bool strict_model_config_;
  absl::Mutex load_mu_;  // serializes Load / Unload
  mutable absl::Mutex mu_;
  std::map<std::string, ModelEntry, std::less<>> models_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
