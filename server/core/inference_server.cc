#include "server/core/inference_server.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/core/datatype.h"
#include "server/core/model_config.h"
#include "server/core/validate.h"

#ifndef KILN_VERSION
#define KILN_VERSION "0.0.0"
#endif

namespace kiln::server {
namespace {

// Protocol extensions kilnd implements (shared/reference/kserve-v2-protocol.md §8).
// Advertise nothing that is not served: perf_analyzer keys off "statistics".
constexpr const char* kExtensions[] = {"model_repository", "model_configuration", "statistics"};

uint64_t NanosSince(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
}

template <typename Tensor>
TensorMetadata ToMetadata(const Tensor& t, bool batching) {
  TensorMetadata m;
  m.name = t.name();
  m.datatype = std::string(DataTypeName(t.data_type()));
  if (batching) m.shape.push_back(-1);
  m.shape.insert(m.shape.end(), t.dims().begin(), t.dims().end());
  return m;
}

}  // namespace

InferenceServer::InferenceServer(ServerOptions options)
    : options_(std::move(options)), repository_(options_.model_repository) {}

absl::StatusOr<std::unique_ptr<InferenceServer>> InferenceServer::Create(ServerOptions options) {
  std::unique_ptr<InferenceServer> server(new InferenceServer(std::move(options)));
  if (absl::Status s = server->repository_.LoadAll(); !s.ok()) return s;
  return server;
}

ServerMetadata InferenceServer::Metadata() const {
  ServerMetadata m;
  m.name = "kiln";
  m.version = KILN_VERSION;
  for (const char* e : kExtensions) m.extensions.emplace_back(e);
  return m;
}

absl::StatusOr<std::shared_ptr<const ModelVersion>> InferenceServer::Resolve(
    const std::string& name, const std::string& version) const {
  if (name.empty()) return absl::InvalidArgumentError("model name: empty");
  return repository_.GetReady(name, version);
}

absl::StatusOr<bool> InferenceServer::ModelReady(const std::string& name,
                                                 const std::string& version) const {
  auto model = Resolve(name, version);
  if (model.ok()) return Ready();
  if (absl::IsInvalidArgument(model.status())) return model.status();
  return false;
}

absl::StatusOr<ModelMetadata> InferenceServer::GetModelMetadata(const std::string& name,
                                                                const std::string& version) const {
  absl::StatusOr<std::shared_ptr<const ModelVersion>> model = Resolve(name, version);
  if (!model.ok()) return model.status();
  const inference::ModelConfig& config = *(*model)->config;
  const bool batching = config.max_batch_size() > 0;
  ModelMetadata m;
  m.name = (*model)->name;
  m.platform = config.platform();
  if (version.empty()) {
    for (const auto& v : repository_.ReadyVersions(name)) {
      m.versions.push_back(std::to_string(v->version));
    }
  } else {
    m.versions.push_back(std::to_string((*model)->version));
  }
  for (const auto& in : config.input()) m.inputs.push_back(ToMetadata(in, batching));
  for (const auto& out : config.output()) m.outputs.push_back(ToMetadata(out, batching));
  return m;
}

absl::StatusOr<std::shared_ptr<const inference::ModelConfig>> InferenceServer::GetModelConfig(
    const std::string& name, const std::string& version) const {
  absl::StatusOr<std::shared_ptr<const ModelVersion>> model = Resolve(name, version);
  if (!model.ok()) return model.status();
  return (*model)->config;
}

std::vector<RepositoryIndexEntry> InferenceServer::RepositoryIndex(bool ready_only) const {
  return repository_.Index(ready_only);
}

absl::Status InferenceServer::LoadModel(const std::string& name, const LoadOptions& options) {
  if (!Ready()) return absl::UnavailableError("the server is shutting down");
  if (options.has_file_overrides) {
    return absl::InvalidArgumentError(
        "parameters: file:<version>/<name> overrides are not supported by kilnd");
  }
  std::optional<inference::ModelConfig> override_config;
  if (options.config_json.has_value()) {
    absl::StatusOr<inference::ModelConfig> parsed = ParseModelConfigJson(*options.config_json);
    if (!parsed.ok()) return parsed.status();
    override_config = std::move(*parsed);
  }
  return repository_.Load(name, std::move(override_config));
}

absl::Status InferenceServer::UnloadModel(const std::string& name) {
  if (!Ready()) return absl::UnavailableError("the server is shutting down");
  return repository_.Unload(name);
}

absl::StatusOr<std::vector<ModelStatsEntry>> InferenceServer::Statistics(
    const std::string& name, const std::string& version) const {
  std::vector<std::shared_ptr<const ModelVersion>> models;
  if (name.empty()) {
    models = repository_.AllReady();
  } else if (version.empty()) {
    if (!repository_.Exists(name)) {
      return absl::NotFoundError(absl::StrCat("unknown model '", name.substr(0, 256), "'"));
    }
    models = repository_.ReadyVersions(name);
  } else {
    absl::StatusOr<std::shared_ptr<const ModelVersion>> model = Resolve(name, version);
    if (!model.ok()) return model.status();
    models.push_back(*std::move(model));
  }
  std::vector<ModelStatsEntry> out;
  for (const auto& m : models) {
    out.push_back({m->name, std::to_string(m->version), m->stats->Snapshot()});
  }
  return out;
}

absl::StatusOr<InferResponse> InferenceServer::Infer(const InferRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  if (!Ready()) return absl::UnavailableError("the server is shutting down");
  if (request.model_name.empty()) return absl::InvalidArgumentError("model_name: empty");
  auto model = repository_.GetReady(request.model_name, request.model_version);
  if (!model.ok()) {
    const bool version_problem =
        !request.model_version.empty() && repository_.Exists(request.model_name);
    return absl::Status(model.status().code(),
                        absl::StrCat(version_problem ? "model_version" : "model_name", ": ",
                                     std::string(model.status().message())));
  }
  const ModelVersion& version = **model;
  absl::StatusOr<ValidatedRequest> valid =
      ValidateInferRequest(*version.config, request, options_.max_request_bytes);
  if (!valid.ok()) {
    version.stats->RecordFailure(NanosSince(start));
    return valid.status();
  }
  // TODO(#5): execute through engine/api once the engine lands.
  version.stats->RecordFailure(NanosSince(start));
  return absl::UnavailableError(absl::StrCat("platform ", version.config->platform(), " for model ",
                                             version.name, " is not available in this build"));
}

}  // namespace kiln::server
