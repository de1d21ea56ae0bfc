// InferenceServer: the one API that transports (server/grpc, server/rest) call. It owns the
// model repository, answers health/metadata/config/index/statistics queries, validates
// inference requests and runs them through engine/api.
//
// Execution: InferAsync validates on the caller's thread, then admits the request into its model
// version's queue (bounded: config dynamic_batching.default_queue_policy.max_queue_size, else
// ServerOptions::max_queue_size; a full queue answers RESOURCE_EXHAUSTED naming the limit) and
// returns at once. One executor thread takes requests in arrival order (the engine runs one at a
// time) and calls `done` with the answer; queue time is arrival to execution start.
//
// Thread safety: every method may be called concurrently from any thread.
// Shutdown: BeginShutdown() makes Ready() false and refuses new inference and repository calls
// with UNAVAILABLE at once; requests already admitted still execute and answer normally.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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
  int64_t max_queue_size = kDefaultMaxQueueSize;  // per model version, unless its config sets one
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
  ~InferenceServer();  // runs the requests still queued, then stops the executor
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

  using InferCallback = std::function<void(absl::StatusOr<InferResponse>)>;

  // Validates `request` fully, queues it and executes it through the engine (kiln_graph and
  // kiln_builtin models); `done` runs exactly once, on this thread for a request refused before
  // queueing, else on the executor thread. The request's views (InferInput::raw, shape) must stay
  // valid until `done` runs. Statistics are updated for every request that reaches a version.
  void InferAsync(const InferRequest& request, InferCallback done);
  // InferAsync and wait for the answer.
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
  struct Task {
    std::shared_ptr<const ModelVersion> model;
    InferRequest request;
    ValidatedRequest valid;
    std::chrono::steady_clock::time_point start;     // arrival
    InferObservation obs;
    InferCallback done;
  };

  InferenceServer(ServerOptions options, std::unique_ptr<api::Engine> engine);
  // Resolves, validates and admits; on refusal returns the error (obs filled).
  absl::Status Admit(const InferRequest& request, Task* task);
  void Finish(Task& task, absl::StatusOr<InferResponse> response);
  void ExecutorLoop();
  void RunTask(Task& task);
  absl::StatusOr<InferResponse> Execute(const ModelVersion& version, const InferRequest& request,
                                        const ValidatedRequest& valid, ExecutionTimes* times,
                                        InferObservation* obs);
  absl::StatusOr<InferResponse> ExecuteBuiltin(const ModelVersion& version,
                                               const InferRequest& request,
                                               const ValidatedRequest& valid, ExecutionTimes* times,
                                               InferObservation* obs);
  void ObserveRun(const api::RunResult& run);
  // The engine call of Execute / ExecuteBuiltin, timed into times->compute_infer_ns and observed;
  // a failure other than INVALID_ARGUMENT marks obs->engine_failure.
  absl::StatusOr<api::RunResult> TimedRun(
      const std::function<absl::StatusOr<api::RunResult>()>& run_engine, ExecutionTimes* times,
      InferObservation* obs);
  // A response naming the model version and echoing the request id, with no outputs yet.
  static InferResponse ResponseFor(const ModelVersion& version, const InferRequest& request);
  absl::StatusOr<std::shared_ptr<const ModelVersion>> Resolve(const std::string& name,
                                                              const std::string& version) const;

  const ServerOptions options_;
  std::unique_ptr<api::Engine> engine_;  // before repository_: the repository prepares graphs with it
  GraphService graphs_;
  InferObserver* observer_ = nullptr;
  ModelRepository repository_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<int64_t> seen_jit_evictions_{0};

  absl::Mutex queue_mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stop_executor_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread executor_;  // last: started after everything above exists
};

}  // namespace kiln::server
