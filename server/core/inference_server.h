// InferenceServer: the one API that transports (server/grpc, server/rest) call -- a facade over
// the model repository (model_repository.h), the scheduling module (inference_lanes.h: one lane
// per device, FIFO queue, inline execution, where a dynamic batcher will live), the tensor binder
// (inference_binder.h) and the one execute path (inference_execute.cc: every model kind through
// api::Model). It answers health/metadata/config/index/statistics queries, validates inference
// requests and runs them through engine/api.
//
// Placement: each model runs on the device its config's instance_group names (placement.h;
// default ServerOptions::device). Every device that a loaded model uses gets, lazily, its own
// api::Engine and its own executor ("lane"), so models on different devices run concurrently;
// requests of one lane run one at a time, in admission order. A model whose instance_group counts
// N instances runs on N lanes of its device (instances 1.. have their own engines and executors);
// each request goes to the least busy one, each dynamic batch to a free one.
//
// Execution: InferAsync validates on the caller's thread and admits the request against its
// model version's bound (config dynamic_batching.default_queue_policy.max_queue_size, else
// ServerOptions::max_queue_size; over it answers RESOURCE_EXHAUSTED naming the limit). Then, if
// the device is idle (nothing running, nothing queued) and ServerOptions::inline_execution is on,
// and the request is expected to be short (its version's latest run took at most
// ServerOptions::inline_max_compute_us for this batch size; a version that has not run yet --
// whose first runs compile -- never is), the request runs at once on the calling thread, which
// holds the device meanwhile. Otherwise it joins the device's FIFO queue and InferAsync returns;
// the device's executor thread runs it after everything admitted before it. Queue time is
// admission to execution start (about 0 inline). The cap keeps long computations off transport
// threads (gRPC callback threads serve every other call too).
//
// Limits: every engine run obeys ServerOptions::run (run_policy.h: work, memory and response caps
// checked before anything is allocated, the request's deadline capped by max_run_seconds, its
// cancellation) and the process-wide memory budget ServerOptions::global_memory_bytes.
// No request can end the process: the entry points and the executor threads run their work under
// guard.h, so an escaped exception answers INTERNAL (or RESOURCE_EXHAUSTED for std::bad_alloc)
// with a request id and is logged.
//
// Shared memory (Triton's system_shared_memory extension): a transport resolves the parameters
// of inputs into InferInput::raw views of mapped regions and of requested outputs into
// InferRequest::shared_memory_outputs; the request holds the mappings until it is answered.
// Finish writes such outputs into their regions (after classification and the response cache,
// so cached answers are written too) and sends only their shape and datatype; an output larger
// than its window fails the request with INVALID_ARGUMENT naming the parameter.
//
// kiln_llm models (llm_infer.cc) answer the same inference calls the way Triton's vLLM backend
// does: inputs text_input (BYTES, one prompt), optional stream (BOOL), sampling_parameters (BYTES,
// a JSON object of llm_sampling.h's fields) and exclude_input_in_output (BOOL, true only), the
// sampling fields also taken from request parameters; output text_output (BYTES). InferAsync
// answers once with the whole generated text; InferStreamAsync with stream=true answers once per
// text delta, then an empty final response. Such a request is not queued on a device lane: it
// goes straight to the model's generator (continuous batching, its own thread), so it is neither
// counted in the request statistics nor in nv_inference_* metrics but in the kiln_llm_* ones.
//
// Thread safety: every method may be called concurrently from any thread.
// Shutdown: BeginShutdown() makes Ready() false and refuses new inference and repository calls
// with UNAVAILABLE at once; requests already admitted still execute and answer normally.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/api/engine.h"
#include "engine/api/model.h"
#include "inference/model_config.pb.h"
#include "server/core/graph_service.h"
#include "server/core/infer_request.h"
#include "server/core/infer_task.h"
#include "server/core/inference_lanes.h"
#include "server/core/limits.h"
#include "server/core/model_repository.h"
#include "server/core/observer.h"
#include "server/core/response_cache.h"
#include "server/core/run_policy.h"
#include "server/core/shared_memory.h"
#include "server/core/statistics.h"
#include "server/core/trace.h"

namespace kiln::server {

struct ServerOptions {
  std::filesystem::path model_repository;
  int64_t max_request_bytes = kDefaultMaxRequestBytes;
  std::string device;  // default device of models that name none; "" = the engine's default (CPU)
  int64_t max_queue_size = kDefaultMaxQueueSize;  // per model version, unless its config sets one
  bool inline_execution = true;  // run a request on the caller's thread when its device is idle
  int64_t inline_max_compute_us = 2000;  // ... and its expected engine time is at most this
  RunPolicy run;                          // per-run limits and deadline cap (memory_budget is set by Create)
  int64_t global_memory_bytes = 0;        // process-wide memory budget (<= 0: none)
  size_t prepared_cache_bytes = size_t{64} << 20;  // per device engine: prepared graphs ...
  size_t jit_cache_bytes = size_t{512} << 20;      // ... and JIT traces (bytes their plans allocated)
  bool repository_follow_links = false;  // follow symbolic links below the model repository root
  // Model control (model_control.h): Create loads every model; the repository load/unload calls
  // are allowed (Triton: explicit mode only); strict readiness; config.pbtxt required.
  bool load_all_at_start = true;
  bool model_control_api = true;
  bool strict_readiness = true;
  bool strict_model_config = false;
  int64_t response_cache_bytes = 0;  // --cache-config local,size=N (response_cache.h); 0 = none
  // Triton's system shared memory extension (shared_memory.h): clients may register regions
  // (--allow-client-shm, default off as in Triton).
  bool allow_client_shm = false;
  std::string trace_file;  // Triton's trace extension (trace.h): where traces go; "" = none
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
  bool internal = false;  // by kilnd itself (start-up, poller, jobs): allowed in every control mode
};

class InferenceServer : private ModelPlacer {
 public:
  ~InferenceServer() override;  // runs the requests still queued, then stops the executors
  // Loads every model under options.model_repository. NOT_FOUND if the folder is unreadable.
  static absl::StatusOr<std::unique_ptr<InferenceServer>> Create(ServerOptions options);

  bool Live() const { return true; }
  bool Ready() const { return !shutting_down_.load(std::memory_order_acquire); }
  // Health readiness (/v2/health/ready, ServerReady): Ready() and, with strict readiness, every
  // model that should be loaded READY (model_control.h).
  bool ServerReady() const;
  void BeginShutdown() {
    shutting_down_.store(true, std::memory_order_release);
    profiler_.Shutdown();
  }

  // A profile of the kernel launches of the next `seconds` (profiler.h): of model `model`'s runs
  // (NOT_FOUND when no version of it is served), or of every run when `model` is "".
  absl::StatusOr<Profile> CaptureProfile(const std::string& model, double seconds);

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
  // `internal`: kilnd's own call (allowed whatever ServerOptions::model_control_api says).
  absl::Status UnloadModel(const std::string& name, bool internal = false);
  // name "" = every model; version "" = every READY version of the model.
  absl::StatusOr<std::vector<ModelStatsEntry>> Statistics(const std::string& name,
                                                          const std::string& version) const;

  using InferCallback = server::InferCallback;

  // Validates `request` fully, then executes it through its device's engine (kiln_graph and
  // kiln_builtin models): inline when the device is idle, else queued (see above). `done` runs
  // exactly once: on this thread for a request refused before queueing or run inline (InferAsync
  // then returns after `done`), else on the device's executor thread; the device is released
  // before `done` runs. The request's views
  // (InferInput::raw, shape) must stay valid until `done` runs. Statistics are updated for every
  // request that reaches a version. A kiln_llm request (see above) runs its whole generation and
  // answers once with the text, `done` on the model's generator thread; the request's
  // cancellation and deadline are checked at every token (a cancelled one ends at the next step).
  void InferAsync(const InferRequest& request, InferCallback done);
  // InferAsync and wait for the answer.
  absl::StatusOr<InferResponse> Infer(const InferRequest& request);

  // One response of a request on a stream; `final` on its last one, after which none comes (an
  // error is always final).
  using StreamCallback = std::function<void(absl::StatusOr<InferResponse> response, bool final)>;
  struct StreamHandle {
    // The request may answer with several responses (Triton's decoupled models: a kiln_llm
    // generation), which need not wait for the answers of requests sent before it.
    bool decoupled = false;
    // Ends a decoupled request early (its final response follows, CANCELLED): any thread, any
    // number of times, a no-op once it has ended. Null when !decoupled.
    std::function<void()> cancel;
  };
  // ModelStreamInfer's entry: InferAsync, except that a kiln_llm request asking for stream=true
  // answers once per text delta (each response text_output = the new text, parameter
  // triton_final_response false), then with an empty response whose triton_final_response is true;
  // with stream=false, once with the whole text and triton_final_response true. Every other
  // request answers exactly once, final. `on_response` runs on this thread (refused before
  // queueing, or run inline), the device's executor or the model's generator thread, never
  // concurrently for one request; the request's views must stay valid until the final response.
  StreamHandle InferStreamAsync(const InferRequest& request, StreamCallback on_response);

  // Reports every Infer (and every kernel launch, Infer and graphs) and the loaded models' memory
  // to `observer` (not owned; null = none). Call once before serving.
  void SetObserver(InferObserver* observer);
  InferObserver* observer() const { return observer_; }

  // A READY kiln_llm version's model (server/rest/llm_routes.h); NOT_FOUND / UNAVAILABLE as for
  // Infer, INVALID_ARGUMENT when the model is not a kiln_llm one.
  absl::StatusOr<std::shared_ptr<const ModelVersion>> LlmVersion(const std::string& name,
                                                                 const std::string& version) const;
  // Every READY kiln_llm version, newest version of each model (GET /v1/models).
  std::vector<std::shared_ptr<const ModelVersion>> LlmVersions() const;

  // kiln.v1.Engine's core: graphs run directly on the default device's engine.
  GraphService& graphs() { return graphs_; }

  // Registered system shared memory regions (shared_memory.h): transports register, resolve the
  // inputs' and outputs' shared memory parameters against it; Finish writes such outputs.
  SharedMemoryManager& shared_memory() { return shared_memory_; }

  // Triton's trace extension (trace.h): the settings the transports read and update. Admitted
  // requests are sampled; a traced one's timestamps are recorded when it is answered.
  TraceManager& trace() { return trace_; }

  // The canonical default device ("CPU" unless ServerOptions::device says otherwise).
  const std::string& default_device() const { return default_device_; }
  // Devices with an engine and an executor, sorted.
  std::vector<std::string> ActiveDevices() const;
  // The device of a READY version ("" version = the highest READY).
  absl::StatusOr<std::string> ModelDevice(const std::string& name,
                                          const std::string& version) const;
  // Device memory of every READY version, by name then version.
  std::vector<ModelMemoryObservation> ModelMemory() const;

 private:
  using Task = InferTask;
  InferenceServer(ServerOptions options, std::string default_device,
                  std::unique_ptr<api::Engine> default_engine);
  // ModelPlacer: resolves config's placement, echoes it, and gives the device's engine.
  absl::StatusOr<Placement> Place(inference::ModelConfig* config) override;
  // ModelPlacer: runs config.model_warmup on the version's device (warmup.cc).
  absl::Status Warmup(const ModelVersion& version, const RepositoryFiles& files) override;
  // The machine's devices (api::ListDevices), discovered on first use.
  std::vector<std::string> Devices();
  // InferAsync and InferStreamAsync: admits, then queues or runs a tensor model's request, or
  // starts a kiln_llm generation, answering through `decoupled` when it is set (a stream) and else
  // through `done` once.
  StreamHandle Start(const InferRequest& request, InferCallback done, StreamCallback decoupled);
  // Resolves, validates and admits; on refusal returns the error (obs filled). A kiln_llm request
  // is admitted once resolved (GenerateInfer checks the rest).
  absl::Status Admit(const InferRequest& request, Task* task);
  // A kiln_llm version's KServe v2 inference (llm_infer.cc): reads the request's inputs and
  // parameters, submits the generation and answers through `respond` (one final response unless
  // `decoupled` and the request asks for stream=true).
  StreamHandle GenerateInfer(std::shared_ptr<const ModelVersion> version,
                             const InferRequest& request, bool decoupled, StreamCallback respond);
  void Finish(Task& task, absl::StatusOr<InferResponse> response);
  // Writes the outputs that the request directs into shared memory (see above); all or none.
  static absl::Status WriteSharedMemoryOutputs(const InferRequest& request, InferResponse* response);
  // Hands a traced task's timestamps to trace_ (trace.h), REQUEST_END = now.
  void RecordTrace(const Task& task);
  // Runs a task whose lane it holds (busy): ExecuteTask, release the lane, then Finish.
  void RunTask(Task& task);
  // Executes an admitted task (statistics included): BeginTask, Execute, EndTask.
  absl::StatusOr<InferResponse> ExecuteTask(Task& task);
  // What happens to a task when its execution starts: leaves the pending count, queue time
  // measured, refused if cancelled or past its deadline, answered from the response cache if it
  // can be. A value = the task's answer (no execution); nullopt = execute it.
  std::optional<absl::StatusOr<InferResponse>> BeginTask(Task& task, CacheProbe* cached,
                                                         ExecutionTimes* times);
  // After an execution: classification, response cache, statistics. `count_execution`: this task
  // also records the execution (false for every request of a batch but one, which records it).
  void EndTask(Task& task, const CacheProbe& cached, const ExecutionTimes& times,
               bool count_execution, absl::StatusOr<InferResponse>& response);
  // Dynamic batching (inference_batching.cc, dynamic_batcher.h): queues an admitted task of a
  // version with a batcher, scheduling a pull on its lane when none is.
  void Enqueue(Task task);
  // A pull: forms the version's next batch (waiting for it on the lane) and runs it, answers what
  // the batcher refused, schedules the next pull while requests wait, releases the lane.
  void RunBatches(const std::shared_ptr<const ModelVersion>& version, DeviceLane* lane);
  // Runs `tasks` (at least two, equal non-batch shapes) as one execution: inputs concatenated
  // along dim 0, outputs split back; one answer per task, in order.
  std::vector<absl::StatusOr<InferResponse>> ExecuteBatch(DeviceLane& lane, const ModelVersion& version,
                                                          std::vector<std::unique_ptr<Task>>& tasks);
  // The one execute path of every model kind (inference_execute.cc).
  absl::StatusOr<InferResponse> Execute(DeviceLane& lane, const ModelVersion& version,
                                        const InferRequest& request, const ValidatedRequest& valid,
                                        const api::RunOptions& run_options, ExecutionTimes* times,
                                        InferObservation* obs);
  // Reports the version's memory after a run that may have grown it (not a replay, not kiln_graph).
  void ObserveModelGrowth(const ModelVersion& version, const api::Model& model,
                          const api::RunResult& run);
  // The lane of the version's least busy instance (an idle one if any; the scan starts at the
  // next instance in turn).
  DeviceLane* PickLane(const ModelVersion& version) const;
  // The version's engine model behind the one api::Model interface (a small adapter), the copy
  // of the lane's instance.
  static std::shared_ptr<api::Model> ModelFor(DeviceLane& lane, const ModelVersion& version);
  absl::Status LoadModelUnguarded(const std::string& name, const LoadOptions& options);
  void ObserveRun(DeviceLane& lane, const std::string& model, const api::RunResult& run);
  // Tells the observer the loaded versions' and the devices' memory (after start, load, unload).
  void PublishModels();
  // The engine call of Execute, timed into times->compute_infer_ns and observed;
  // a failure other than INVALID_ARGUMENT marks obs->engine_failure.
  absl::StatusOr<api::RunResult> TimedRun(
      DeviceLane& lane, const std::function<absl::StatusOr<api::RunResult>()>& run_engine,
      ExecutionTimes* times, InferObservation* obs);
  // A response naming the model version and echoing the request id, with no outputs yet.
  static InferResponse ResponseFor(const ModelVersion& version, const InferRequest& request);
  absl::StatusOr<std::shared_ptr<const ModelVersion>> Resolve(const std::string& name,
                                                              const std::string& version) const;

  const ServerOptions options_;
  const std::string default_device_;
  std::unique_ptr<api::MemoryBudget> memory_budget_;  // null when global_memory_bytes <= 0
  KernelProfiler profiler_;
  RunPolicy policy_;  // options_.run with memory_budget_ and profiler_
  api::Engine* default_engine_ = nullptr;  // owned by its lane; null when it could not start
  // Before repository_: versions hold the engines' models. Lanes are never removed.
  DeviceLanes lanes_;
  absl::Mutex devices_mu_;
  std::optional<std::vector<std::string>> devices_ ABSL_GUARDED_BY(devices_mu_);
  GraphService graphs_;
  InferObserver* observer_ = nullptr;
  ModelRepository repository_;
  std::atomic<bool> shutting_down_{false};
  std::unique_ptr<ResponseCache> response_cache_;  // null without --cache-config
  SharedMemoryManager shared_memory_;
  TraceManager trace_;
};

}  // namespace kiln::server
