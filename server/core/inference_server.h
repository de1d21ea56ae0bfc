// InferenceServer: the one API that transports (server/grpc, server/rest) call. It owns the
// model repository, answers health/metadata/config/index/statistics queries, validates
// inference requests and (once the engine lands, through engine/api) runs them.
//
// Thread safety: every method may be called concurrently from any thread.
// Shutdown: BeginShutdown() makes Ready() false and refuses new inference and repository calls
// with UNAVAILABLE at once; calls already inside Infer() finish normally.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/api/engine.h"
#include "inference/model_config.pb.h"
#include "server/core/graph_service.h"
#include "server/core/infer_request.h"
#include "server/core/limits.h"
#include "server/core/model_repository.h"
#include "server/core/observer.h"
#include "server/core/statistics.h"

namespace kiln::server {

struct ServerOptions {
  std::filesystem::path model_repository;
  int64_t max_request_bytes = kDefaultMaxRequestBytes;
  std::string device;  // engine device; "" = the engine's default
};

struct ServerMetadata {
  std::string name;
  std::string version;
  std::vector<std::string> extensions;
};

struct TensorMetadata {
  std::string name;
  std::string datatype;        // wire string ("FP32")
  std::vector<int64_t> shape;  // batching models start with -1
};

struct ModelMetadata {
  std::string name;
  std::vector<std::string> versions;  // READY versions, ascending
  std::string platform;
  std::vector<TensorMetadata> inputs;
  std::vector<TensorMetadata> outputs;
};

struct ModelStatsEntry {
  std::string name;
  std::string version;
  ModelStatsSnapshot stats;
};

struct LoadOptions {
  std::optional<std::string> config_json;  // the `config` parameter: JSON ModelConfig
  bool has_file_overrides = false;         // a `file:<version>/<name>` parameter was given
};

class InferenceServer {
 public:
  // Loads every model under options.model_repository. NOT_FOUND if the folder is unreadable.
  static absl::StatusOr<std::unique_ptr<InferenceServer>> Create(ServerOptions options);

  bool Live() const { return true; }
  bool Ready() const { return !shutting_down_.load(std::memory_order_acquire); }
  void BeginShutdown() { shutting_down_.store(true, std::memory_order_release); }

  const ServerOptions& options() const { return options_; }
  ServerMetadata Metadata() const;

  // OK(false) when the model or version is not ready or unknown; INVALID_ARGUMENT for a
  // malformed version string.
  absl::StatusOr<bool> ModelReady(const std::string& name, const std::string& version) const;
  absl::StatusOr<ModelMetadata> GetModelMetadata(const std::string& name,
                                                 const std::string& version) const;
  absl::StatusOr<std::shared_ptr<const inference::ModelConfig>> GetModelConfig(
      const std::string& name, const std::string& version) const;
  std::vector<RepositoryIndexEntry> RepositoryIndex(bool ready_only) const;
  absl::Status LoadModel(const std::string& name, const LoadOptions& options);
  absl::Status UnloadModel(const std::string& name);
  // name "" = every model; version "" = every READY version of the model.
  absl::StatusOr<std::vector<ModelStatsEntry>> Statistics(const std::string& name,
                                                          const std::string& version) const;

  // Validates `request` fully, then executes it through the engine (kiln_graph models). Other
  // platforms end in UNAVAILABLE naming the platform and the model. Statistics are updated for
  // every request that reaches a model version.
  absl::StatusOr<InferResponse> Infer(const InferRequest& request);

  // Reports every Infer (and every kernel launch, Infer and graphs) to `observer` (not owned;
  // null = none). Call once before serving.
  void SetObserver(InferObserver* observer) {
    observer_ = observer;
    graphs_.SetObserver(observer);
  }

  // kiln.v1.Engine's core: graphs run directly on the engine.
  GraphService& graphs() { return graphs_; }

 private:
  InferenceServer(ServerOptions options, std::unique_ptr<api::Engine> engine);
  absl::StatusOr<InferResponse> InferImpl(const InferRequest& request, InferObservation* obs);
  absl::StatusOr<InferResponse> Execute(const ModelVersion& version, const InferRequest& request,
                                        const ValidatedRequest& valid, ExecutionTimes* times,
                                        InferObservation* obs);
  absl::StatusOr<std::shared_ptr<const ModelVersion>> Resolve(const std::string& name,
                                                              const std::string& version) const;

  const ServerOptions options_;
  std::unique_ptr<api::Engine> engine_;  // before repository_: the repository prepares graphs with it
  GraphService graphs_;
  InferObserver* observer_ = nullptr;
  ModelRepository repository_;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace kiln::server
