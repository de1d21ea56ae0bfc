#include "server/core/model_repository.h"

#include <algorithm>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/core/datatype.h"
#include "server/core/dynamic_batcher.h"
#include "server/core/graph_spec_codec.h"
#include "server/core/limits.h"
#include "server/core/model_artifact.h"
#include "server/core/model_config.h"
#include "server/core/onnx_config.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

// A version folder name: 1..18 digits, value > 0. nullopt otherwise.
std::optional<int64_t> ParseVersion(std::string_view s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(std::string(s), &v) || v <= 0) return std::nullopt;
  return v;
}

std::vector<int64_t> ListVersions(const RepositoryFiles& files, const std::string& model) {
  std::vector<int64_t> versions;
  for (const std::string& name : files.ListFolders(model)) {
    if (auto v = ParseVersion(name)) versions.push_back(*v);
    if (static_cast<int>(versions.size()) >= kMaxModelVersions) break;
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

template <typename Slot>
bool HasReady(const std::map<int64_t, Slot>& versions) {
  for (const auto& [v, slot] : versions) {
    if (slot.state == ModelState::kReady) return true;
  }
  return false;
}

// Decodes a kiln_graph version through the engine and checks the graph's input dtypes against
// the config. INVALID_ARGUMENT naming the field.
absl::StatusOr<std::shared_ptr<const api::PreparedGraph>> PrepareGraphModel(
    api::Engine& engine, const inference::ModelConfig& config, const kiln::v1::Graph& graph) {
  for (const auto& in : graph.inputs()) {
    for (const auto& c : config.input()) {
      if (c.name() != in.name()) continue;
      if (KilnDTypeName(c.data_type()) != in.dtype()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "graph input ", in.name(), " is ", in.dtype(), " but the config says ",
            std::string(DataTypeName(c.data_type()))));
      }
    }
  }
  absl::StatusOr<std::shared_ptr<const api::PreparedGraph>> prepared =
      engine.Prepare(GraphSpecFromProto(graph));
  if (!prepared.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph: ", std::string(prepared.status().message())));
  }
  return prepared;
}

template <typename Tensor>
absl::Status CheckBuiltinTensor(const char* field, const Tensor& t,
                                const std::vector<int64_t>& dims) {
  if (t.data_type() != inference::TYPE_FP32) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".data_type: the architecture needs TYPE_FP32, not ",
                                                   std::string(DataTypeName(t.data_type()))));
  }
  if (!std::equal(t.dims().begin(), t.dims().end(), dims.begin(), dims.end())) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".dims: [", absl::StrJoin(t.dims(), ", "),
                                                   "] but the architecture needs [",
                                                   absl::StrJoin(dims, ", "), "]"));
  }
  return absl::OkStatus();
}

// Loads a kiln_builtin version through the engine and checks the config's tensors against the
// architecture (one FP32 input and output, dims without the batch dim, batching on).
absl::StatusOr<std::shared_ptr<const api::BuiltinModel>> LoadBuiltinModel(
    api::Engine& engine, const RepositoryFiles& files, const inference::ModelConfig& config,
    const std::string& version_dir) {
  const std::string arch = config.parameters().at("architecture").string_value();
  const std::string file = DefaultModelFilename(config);
  // The engine reads the very file that was checked (no link, one name) through its descriptor.
  absl::StatusOr<RepositoryFiles::OpenFile> weights = files.Open(
      version_dir + "/" + file,
      absl::StrCat("model file ", version_dir.substr(version_dir.rfind('/') + 1), "/", file));
  if (!weights.ok()) return weights.status();
  absl::StatusOr<std::shared_ptr<const api::BuiltinModel>> model = engine.LoadBuiltin(arch, weights->path());
  if (!model.ok()) return model.status();
  if (config.max_batch_size() < 1) {
    return absl::InvalidArgumentError(
        "max_batch_size: kiln_builtin models batch; set max_batch_size >= 1");
  }
  if (config.input_size() != 1 || config.output_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input/output: architecture ", arch, " has one input and one output, the config has ",
        config.input_size(), " and ", config.output_size()));
  }
  if (absl::Status s = CheckBuiltinTensor("input[0]", config.input(0), (*model)->input_shape());
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckBuiltinTensor("output[0]", config.output(0), (*model)->output_shape());
      !s.ok()) {
    return s;
  }
  return model;
}

}  // namespace

std::string_view ModelStateName(ModelState state) {
  switch (state) {
    case ModelState::kUnknown:
      return "UNKNOWN";
    case ModelState::kReady:
      return "READY";
    case ModelState::kUnavailable:
      return "UNAVAILABLE";
    case ModelState::kLoading:
      return "LOADING";
    case ModelState::kUnloading:
      return "UNLOADING";
  }
  return "UNKNOWN";
}

ModelRepository::ModelRepository(std::filesystem::path root, ModelPlacer* placer, bool follow_links,
                                 bool strict_model_config)
    : root_(root), files_(std::move(root), follow_links), placer_(placer),
      strict_model_config_(strict_model_config) {}

std::vector<std::string> ModelRepository::ListModelFolders() const {
  std::vector<std::string> names;
  for (std::string& name : files_.ListFolders("")) {
    if (IsValidModelName(name)) names.push_back(std::move(name));
  }
  return names;
}

bool ModelRepository::HasFolder(std::string_view name) const {
  if (!IsValidModelName(name)) return false;
  const RepositoryFiles::Kind kind = files_.Stat(std::string(name));
  return kind == RepositoryFiles::Kind::kDir || kind == RepositoryFiles::Kind::kLink;
}

absl::Status ModelRepository::LoadAll() {
  std::error_code ec;
  if (!std::filesystem::is_directory(root_, ec)) {
    return absl::NotFoundError(
        absl::StrCat("model repository '", root_.string(), "' is not a readable folder"));
  }
  for (const std::string& name : ListModelFolders()) {
    absl::Status status = Load(name);
    if (status.ok()) {
      spdlog::info("model '{}' loaded", name);
    } else {
      spdlog::warn("model '{}' failed to load: {}", name, std::string(status.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<inference::ModelConfig> ReadModelConfig(const RepositoryFiles& files,
                                                       const std::string& name) {
  absl::StatusOr<std::string> text = files.Read(name + "/config.pbtxt", kMaxConfigBytes, "config.pbtxt");
  if (!text.ok()) return text.status();
  return ParseModelConfigText(*text);
}

absl::StatusOr<ModelRepository::ModelEntry> ModelRepository::BuildEntry(
    const std::string& name, std::optional<inference::ModelConfig> config_override) const {
  if (files_.Stat(name) != RepositoryFiles::Kind::kDir) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model folder '", name, "' is a symbolic link that leads outside the model repository, "
        "which kilnd does not follow (start kilnd with --repository-follow-links to allow it)"));
  }
  inference::ModelConfig config;
  if (config_override.has_value()) {
    config = std::move(*config_override);
  } else {
    if (files_.Stat(name + "/config.pbtxt") == RepositoryFiles::Kind::kMissing && !strict_model_config_ &&
        HasOnnxVersion(files_, name)) {
      config.set_platform(std::string(kPlatformOnnxruntime));  // no config: completed from model.onnx below
      config.set_backend(std::string(kBackendOnnxruntime));
    } else if (files_.Stat(name + "/config.pbtxt") == RepositoryFiles::Kind::kMissing && !strict_model_config_ &&
               HasGgufVersion(files_, name)) {
      config.set_platform(std::string(kPlatformLlm));  // no config: a GGUF LLM with the default settings
    } else {
      absl::StatusOr<inference::ModelConfig> parsed = ReadModelConfig(files_, name);
      if (!parsed.ok()) return parsed.status();
      config = std::move(*parsed);
    }
  }
  if (IsOnnxConfig(config) && !strict_model_config_) {
    if (absl::Status s = CompleteOnnxConfig(files_, name, &config); !s.ok()) return s;
  }
  if (absl::Status s = NormalizeModelConfig(name, &config); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<const OutputLabels>> labels = ReadOutputLabels(files_, name, config);
  if (!labels.ok()) return labels.status();
  ModelPlacer::Placement placement;
  if (placer_ != nullptr) {
    absl::StatusOr<ModelPlacer::Placement> placed = placer_->Place(&config);
    if (!placed.ok()) return placed.status();
    placement = *std::move(placed);
  }
  api::Engine* const engine = placement.engine;
  auto shared_config = std::make_shared<const inference::ModelConfig>(std::move(config));

  const std::vector<int64_t> available = ListVersions(files_, name);
  const inference::ModelVersionPolicy& policy = shared_config->version_policy();
  std::vector<int64_t> selected;
  ModelEntry entry;
  if (policy.has_all()) {
    selected = available;
  } else if (policy.has_specific()) {
    for (int64_t v : policy.specific().versions()) {
      if (std::binary_search(available.begin(), available.end(), v)) {
        selected.push_back(v);
      } else {
        entry.versions[v] = {ModelState::kUnavailable, "version folder is missing", nullptr};
      }
    }
  } else {
    const size_t n = std::max<uint32_t>(1, policy.latest().num_versions());
    const size_t skip = available.size() > n ? available.size() - n : 0;
    selected.assign(available.begin() + skip, available.end());
  }
  if (selected.empty()) {
    return absl::InvalidArgumentError(
        "no version folder matches the version_policy (versions are positive integer folders)");
  }

  std::string first_error;
  for (int64_t v : selected) {
    kiln::v1::Graph graph;
    const std::string version_dir = absl::StrCat(name, "/", v);
    absl::Status status = CheckModelArtifact(files_, *shared_config, version_dir, &graph);
    std::shared_ptr<const api::PreparedGraph> prepared;
    std::shared_ptr<const api::BuiltinModel> builtin;
    if (status.ok() && engine != nullptr && shared_config->platform() == kPlatformBuiltin) {
      absl::StatusOr<std::shared_ptr<const api::BuiltinModel>> b =
          LoadBuiltinModel(*engine, files_, *shared_config, version_dir);
      if (b.ok()) {
        builtin = *std::move(b);
      } else {
        status = b.status();
      }
    }
    std::shared_ptr<const api::OnnxModel> onnx;
    if (status.ok() && engine != nullptr && IsOnnxConfig(*shared_config)) {
      // The ONNX loader takes a path (external data files lie beside model.onnx and are confined
      // to its folder by the loader); the file itself is checked like every repository file.
      const std::string rel = absl::StrCat(version_dir, "/", DefaultModelFilename(*shared_config));
      absl::StatusOr<std::shared_ptr<const api::OnnxModel>> o =
          files_.Stat(rel) == RepositoryFiles::Kind::kFile
              ? engine->LoadOnnx((files_.root() / rel).string())
              : absl::StatusOr<std::shared_ptr<const api::OnnxModel>>(absl::InvalidArgumentError(absl::StrCat(
                    "model file ", v, "/", DefaultModelFilename(*shared_config),
                    " is missing, not a regular file, or a link that leads outside the model repository")));
      if (o.ok()) {
        onnx = *std::move(o);
      } else {
        status = o.status();
      }
    }
    std::shared_ptr<api::LlmModel> llm;
    if (status.ok() && engine != nullptr && shared_config->platform() == kPlatformLlm) {
      absl::StatusOr<LlmConfig> lc = ReadLlmConfig(*shared_config);
      const std::string rel = absl::StrCat(version_dir, "/", DefaultModelFilename(*shared_config));
      absl::StatusOr<std::shared_ptr<api::LlmModel>> m =
          !lc.ok() ? absl::StatusOr<std::shared_ptr<api::LlmModel>>(lc.status())
                   : api::LlmModel::Load((files_.root() / rel).string(),
                                         {.slots = lc->slots, .max_ctx = lc->max_ctx, .max_queue = lc->max_queue,
                                          .device = placement.device, .warm = lc->warm,
                                          .int8_activations = lc->int8_activations});
      if (m.ok()) {
        llm = *std::move(m);
      } else {
        status = m.status();
      }
    }
    if (status.ok() && engine != nullptr && shared_config->platform() == kPlatformGraph) {
      absl::StatusOr<std::shared_ptr<const api::PreparedGraph>> p =
          PrepareGraphModel(*engine, *shared_config, graph);
      if (p.ok()) {
        prepared = *std::move(p);
      } else {
        status = p.status();
      }
    }
    VersionSlot& slot = entry.versions[v];
    if (!status.ok()) {
      slot.state = ModelState::kUnavailable;
      slot.reason = std::string(status.message());
      if (first_error.empty()) first_error = absl::StrCat("version ", v, ": ", slot.reason);
      continue;
    }
    auto model = std::make_shared<ModelVersion>();
    model->name = name;
    model->version = v;
    model->config = shared_config;
    model->labels = *labels;
    model->stats = std::make_shared<ModelStats>();
    model->device = placement.device;
    model->graph = std::move(prepared);
    model->builtin = std::move(builtin);
    model->onnx = std::move(onnx);
    model->llm = std::move(llm);
    model->instance_count = 1 + static_cast<int>(placement.more_engines.size());
    for (api::Engine* more : placement.more_engines) {  // each instance its own engine model
      ModelVersion::Instance instance;
      if (model->builtin != nullptr) {
        absl::StatusOr<std::shared_ptr<const api::BuiltinModel>> b =
            LoadBuiltinModel(*more, files_, *shared_config, version_dir);
        if (!b.ok()) {
          status = b.status();
          break;
        }
        instance.builtin = *std::move(b);
      }
      if (model->onnx != nullptr) {
        absl::StatusOr<std::shared_ptr<const api::OnnxModel>> o =
            more->LoadOnnx((files_.root() / absl::StrCat(version_dir, "/", DefaultModelFilename(*shared_config))).string());
        if (!o.ok()) {
          status = o.status();
          break;
        }
        instance.onnx = *std::move(o);
      }
      model->more_instances.push_back(std::move(instance));
    }
    if (!status.ok()) {
      slot.state = ModelState::kUnavailable;
      slot.reason = absl::StrCat("instance ", model->more_instances.size() + 1, ": ", status.message());
      if (first_error.empty()) first_error = absl::StrCat("version ", v, ": ", slot.reason);
      continue;
    }
    if (shared_config->has_dynamic_batching()) {
      absl::StatusOr<BatchingPolicy> policy = BatchingPolicy::FromConfig(*shared_config);
      if (!policy.ok()) {
        slot.state = ModelState::kUnavailable;
        slot.reason = std::string(policy.status().message());
        if (first_error.empty()) first_error = absl::StrCat("version ", v, ": ", slot.reason);
        continue;
      }
      model->batcher = std::make_shared<DynamicBatcher>(*std::move(policy), model->instance_count);
    }
    if (absl::Status w = placer_ != nullptr ? placer_->Warmup(*model, files_) : absl::OkStatus(); !w.ok()) {
      slot.state = ModelState::kUnavailable;  // a failing warm-up fails the load (warmup.h)
      slot.reason = std::string(w.message());
      if (first_error.empty()) first_error = absl::StrCat("version ", v, ": ", slot.reason);
      continue;
    }
    slot.state = ModelState::kReady;
    slot.model = std::move(model);
  }
  if (!HasReady(entry.versions)) return absl::InvalidArgumentError(first_error);
  entry.state = ModelState::kReady;
  return entry;
}

absl::Status ModelRepository::Load(std::string_view name_view,
                                   std::optional<inference::ModelConfig> config_override) {
  if (!IsValidModelName(name_view)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model_name: '", std::string(name_view.substr(0, kMaxNameLength)),
                     "' is not a valid model name ([A-Za-z0-9_.-], no leading '.', at most ",
                     kMaxNameLength, " characters)"));
  }
  const std::string name(name_view);
  absl::MutexLock load_lock(&load_mu_);
  if (!HasFolder(name)) {
    return absl::NotFoundError(
        absl::StrCat("model_name: no model '", name, "' in the model repository"));
  }
  {
    absl::MutexLock lock(&mu_);
    ModelEntry& entry = models_[name];
    if (!HasReady(entry.versions)) entry.state = ModelState::kLoading;
  }
  absl::StatusOr<ModelEntry> built = BuildEntry(name, std::move(config_override));
  absl::MutexLock lock(&mu_);
  ModelEntry& entry = models_[name];
  if (!built.ok()) {
    const std::string reason = std::string(built.status().message());
    if (!HasReady(entry.versions)) {
      entry.versions.clear();
      entry.state = ModelState::kUnavailable;
      entry.reason = reason;
    }  // else: a failed reload keeps the versions that serve
    return absl::InvalidArgumentError(absl::StrCat("failed to load model '", name, "': ", reason));
  }
  entry = std::move(*built);
  return absl::OkStatus();
}

absl::Status ModelRepository::Unload(std::string_view name_view) {
  const std::string name(name_view.substr(0, kMaxNameLength));
  absl::MutexLock load_lock(&load_mu_);
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name_view);
  if (it == models_.end()) {
    if (HasFolder(name_view)) return absl::OkStatus();  // never loaded: nothing to do
    return absl::NotFoundError(absl::StrCat("model_name: unknown model '", name, "'"));
  }
  ModelEntry& entry = it->second;
  for (auto& [v, slot] : entry.versions) {
    slot.state = ModelState::kUnavailable;
    slot.reason = "unloaded";
    slot.model.reset();
  }
  entry.state = ModelState::kUnavailable;
  entry.reason = "unloaded";
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ModelVersion>> ModelRepository::GetReady(
    std::string_view name_view, std::string_view version) const {
  const std::string name(name_view.substr(0, kMaxNameLength));
  absl::ReaderMutexLock lock(&mu_);
  auto it = models_.find(name_view);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown model '", name, "'"));
  }
  const ModelEntry& entry = it->second;
  if (version.empty()) {
    for (auto v = entry.versions.rbegin(); v != entry.versions.rend(); ++v) {
      if (v->second.state == ModelState::kReady) return v->second.model;
    }
    const std::string reason = entry.reason.empty() ? "" : absl::StrCat(": ", entry.reason);
    return absl::UnavailableError(absl::StrCat("model '", name, "' has no ready version (",
                                               std::string(ModelStateName(entry.state)), reason,
                                               ")"));
  }
  std::optional<int64_t> v = ParseVersion(version);
  if (!v.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("version '", std::string(version.substr(0, 32)),
                                                   "' is not a positive integer"));
  }
  auto slot = entry.versions.find(*v);
  if (slot == entry.versions.end()) {
    return absl::NotFoundError(absl::StrCat("unknown version ", *v, " of model '", name, "'"));
  }
  if (slot->second.state != ModelState::kReady) {
    return absl::UnavailableError(absl::StrCat(
        "version ", *v, " of model '", name, "' is not ready (",
        std::string(ModelStateName(slot->second.state)), ": ", slot->second.reason, ")"));
  }
  return slot->second.model;
}

std::vector<std::shared_ptr<const ModelVersion>> ModelRepository::ReadyVersions(
    std::string_view name) const {
  std::vector<std::shared_ptr<const ModelVersion>> out;
  absl::ReaderMutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end()) return out;
  for (const auto& [v, slot] : it->second.versions) {
    if (slot.state == ModelState::kReady) out.push_back(slot.model);
  }
  return out;
}

std::vector<std::shared_ptr<const ModelVersion>> ModelRepository::AllReady() const {
  std::vector<std::shared_ptr<const ModelVersion>> out;
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [name, entry] : models_) {
    for (const auto& [v, slot] : entry.versions) {
      if (slot.state == ModelState::kReady) out.push_back(slot.model);
    }
  }
  return out;
}

bool ModelRepository::Exists(std::string_view name) const {
  {
    absl::ReaderMutexLock lock(&mu_);
    if (models_.find(name) != models_.end()) return true;
  }
  return HasFolder(name);
}

std::vector<RepositoryIndexEntry> ModelRepository::Index(bool ready_only) const {
  std::vector<std::string> folders = ListModelFolders();
  std::vector<RepositoryIndexEntry> rows;
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [name, entry] : models_) {
    if (!std::binary_search(folders.begin(), folders.end(), name)) folders.push_back(name);
  }
  std::sort(folders.begin(), folders.end());
  for (const std::string& name : folders) {
    auto it = models_.find(name);
    if (it == models_.end()) {
      if (!ready_only) rows.push_back({name, "", "", ""});
      continue;
    }
    const ModelEntry& entry = it->second;
    if (entry.versions.empty()) {
      if (!ready_only) {
        rows.push_back({name, "", std::string(ModelStateName(entry.state)), entry.reason});
      }
      continue;
    }
    for (const auto& [v, slot] : entry.versions) {
      if (ready_only && slot.state != ModelState::kReady) continue;
      rows.push_back(
          {name, std::to_string(v), std::string(ModelStateName(slot.state)), slot.reason});
    }
  }
  return rows;
}

}  // namespace kiln::server
