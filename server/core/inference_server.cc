#include "server/core/inference_server.h"

#include "engine/api/onnx_model.h"
#include "server/core/onnx_config.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/core/classification.h"
#include "server/core/datatype.h"
#include "server/core/dynamic_batcher.h"
#include "server/core/failpoint.h"
#include "server/core/guard.h"
#include "server/core/inference_lanes.h"
#include "server/core/model_artifact.h"
#include "server/core/model_config.h"
#include "server/core/model_control.h"
#include "server/core/placement.h"
#include "server/core/validate.h"
#include "spdlog/spdlog.h"

#ifndef KILN_VERSION
#define KILN_VERSION "0.0.0"
#endif

namespace kiln::server {
namespace {

// Protocol extensions kilnd implements (shared/reference/kserve-v2-protocol.md §8).
// Advertise nothing that is not served: perf_analyzer keys off "statistics".
constexpr const char* kExtensions[] = {"model_repository", "model_configuration", "statistics",
                                       "logging", "trace"};

template <typename Tensor>
TensorMetadata ToMetadata(const Tensor& t, bool batching) {
  TensorMetadata m;
  m.name = t.name();
  m.datatype = std::string(DataTypeName(t.data_type()));
  if (batching) m.shape.push_back(-1);
  m.shape.insert(m.shape.end(), t.dims().begin(), t.dims().end());
  return m;
}

// The options of every device's engine ("" = the engine's default device).
api::EngineOptions EngineOptionsFor(const ServerOptions& options, const std::string& device) {
  api::EngineOptions e;
  e.device = device;
  e.limits.max_nodes = kMaxGraphNodes;
  e.limits.max_inputs = kMaxGraphInputs;
  e.limits.max_outputs = kMaxGraphOutputs;
  e.prepared_cache_bytes = options.prepared_cache_bytes;
  e.jit_cache_bytes = options.jit_cache_bytes;
  return e;
}

}  // namespace

InferenceServer::InferenceServer(ServerOptions options, std::string default_device,
                                 std::unique_ptr<api::Engine> default_engine)
    : options_(std::move(options)),
      default_device_(std::move(default_device)),
      memory_budget_(options_.global_memory_bytes > 0
                         ? std::make_unique<api::MemoryBudget>(options_.global_memory_bytes)
                         : nullptr),
      policy_([this] {
        RunPolicy p = options_.run;
        p.memory_budget = memory_budget_.get();
        p.profiler = &profiler_;
        return p;
      }()),
      default_engine_(default_engine.get()),
      lanes_([this](const std::string& device) { return api::Engine::Create(EngineOptionsFor(options_, device)); }),
      graphs_(default_engine.get(), &policy_,
              [this](const std::string& device) -> absl::StatusOr<api::Engine*> {
                absl::StatusOr<DeviceLane*> lane = lanes_.For(device);
                if (!lane.ok()) return lane.status();
                return &(*lane)->engine();
              }),
      repository_(options_.model_repository, this, options_.repository_follow_links,
                  options_.strict_model_config),
      shared_memory_(options_.allow_client_shm),
      trace_(options_.trace_file) {
  if (options_.response_cache_bytes > 0) {
    response_cache_ = std::make_unique<ResponseCache>(options_.response_cache_bytes);
  }
  if (default_engine != nullptr) lanes_.Start(default_device_, std::move(default_engine));
}

InferenceServer::~InferenceServer() { lanes_.StopAll(); }

absl::StatusOr<std::unique_ptr<InferenceServer>> InferenceServer::Create(ServerOptions options) {
  std::string default_device = "CPU";
  if (!options.device.empty()) {
    absl::StatusOr<std::string> canonical = api::CanonicalDeviceName(options.device);
    if (!canonical.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("device '", options.device.substr(0, 64),
                                                     "': ", canonical.status().message()));
    }
    default_device = *std::move(canonical);
  }
  absl::StatusOr<std::unique_ptr<api::Engine>> engine =
      api::Engine::Create(EngineOptionsFor(options, options.device.empty() ? "" : default_device));
  if (engine.ok()) {
    default_device = (*engine)->device();
  } else {
    if (!options.device.empty()) return engine.status();
    spdlog::warn("no engine device: {}; kiln_graph models cannot execute",
                 std::string(engine.status().message()));
    engine = std::unique_ptr<api::Engine>();
  }
  std::unique_ptr<InferenceServer> server(
      new InferenceServer(std::move(options), std::move(default_device), *std::move(engine)));
  if (!server->options_.load_all_at_start) return server;  // explicit mode: LoadStartupModels
  if (absl::Status s = server->repository_.LoadAll(); !s.ok()) return s;
  return server;
}

std::vector<std::string> InferenceServer::Devices() {
  absl::MutexLock lock(&devices_mu_);
  if (!devices_.has_value()) devices_ = api::ListDevices();
  return *devices_;
}

std::vector<std::string> InferenceServer::ActiveDevices() const { return lanes_.Devices(); }

absl::StatusOr<ModelPlacer::Placement> InferenceServer::Place(inference::ModelConfig* config) {
  const bool default_is_cpu_like =
      default_device_ == "CPU" || default_device_ == "INTERP" || default_device_ == "NULL";
  std::vector<std::string> devices;
  if (PlacementNeedsDevices(*config) || !default_is_cpu_like) devices = Devices();
  absl::StatusOr<std::string> device = ResolvePlacement(*config, devices, default_device_);
  if (!device.ok()) return device.status();
  absl::StatusOr<int> instances = InstanceCount(*config);
  if (!instances.ok()) return instances.status();
  EchoPlacement(*device, devices, config);
  Placement placement;
  placement.device = *device;
  if (*device == default_device_ && default_engine_ == nullptr) {
    return placement;  // no engine on the default device: the versions load but cannot run
  }
  absl::StatusOr<DeviceLane*> lane = lanes_.For(*device);
  if (!lane.ok()) {
    return absl::UnavailableError(absl::StrCat("instance_group: device ", *device,
                                               " cannot run models: ", lane.status().message()));
  }
  placement.engine = &(*lane)->engine();
  for (int i = 1; i < *instances; ++i) {
    absl::StatusOr<DeviceLane*> more = lanes_.For(*device, i);
    if (!more.ok()) {
      return absl::UnavailableError(absl::StrCat("instance_group: instance ", i, " on device ", *device,
                                                 " cannot start: ", more.status().message()));
    }
    placement.more_engines.push_back(&(*more)->engine());
  }
  return placement;
}

void InferenceServer::SetObserver(InferObserver* observer) {
  observer_ = observer;
  graphs_.SetObserver(observer);
  PublishModels();
}

absl::StatusOr<std::string> InferenceServer::ModelDevice(const std::string& name,
                                                         const std::string& version) const {
  absl::StatusOr<std::shared_ptr<const ModelVersion>> model = Resolve(name, version);
  if (!model.ok()) return model.status();
  return (*model)->device;
}

std::vector<ModelMemoryObservation> InferenceServer::ModelMemory() const {
  std::vector<ModelMemoryObservation> out;
  for (const auto& m : repository_.AllReady()) {
    ModelMemoryObservation o;
    o.model = m->name;
    o.version = std::to_string(m->version);
    o.device = m->device;
    o.bytes = m->builtin != nullptr ? m->builtin->device_bytes() : 0;
    for (const ModelVersion::Instance& more : m->more_instances) {
      if (more.builtin != nullptr) o.bytes += more.builtin->device_bytes();
    }
    out.push_back(std::move(o));
  }
  return out;
}

void InferenceServer::PublishModels() {
  if (observer_ == nullptr) return;
  std::vector<api::DeviceMemoryUsage> devices;
  for (DeviceLane* lane : lanes_.All()) {
    if (lane->instance() != 0) continue;  // instances share their device's memory
    for (const api::DeviceMemoryUsage& m : lane->engine().DeviceMemory()) devices.push_back(m);
  }
  observer_->ObserveModels(ModelMemory(), devices);
}

ServerMetadata InferenceServer::Metadata() const {
  ServerMetadata m;
  m.name = "kiln";
  m.version = KILN_VERSION;
  for (const char* e : kExtensions) m.extensions.emplace_back(e);
  if (options_.allow_client_shm) m.extensions.emplace_back("system_shared_memory");
  return m;
}

absl::StatusOr<std::shared_ptr<const ModelVersion>> InferenceServer::Resolve(
    const std::string& name, const std::string& version) const {
  if (name.empty()) return absl::InvalidArgumentError("model name: empty");
  return repository_.GetReady(name, version);
}

absl::StatusOr<std::shared_ptr<const ModelVersion>> InferenceServer::LlmVersion(
    const std::string& name, const std::string& version) const {
  if (!Ready()) return absl::UnavailableError("the server is shutting down");
  absl::StatusOr<std::shared_ptr<const ModelVersion>> resolved = Resolve(name, version);
  if (!resolved.ok()) return resolved.status();
  std::shared_ptr<const ModelVersion> v = *std::move(resolved);
  if (v->config->platform() != kPlatformLlm) {
    return absl::InvalidArgumentError(absl::StrCat("model '", v->name, "' is a ", v->config->platform(),
                                                   " model, not a kiln_llm text generator: use /v2/models/",
                                                   v->name, "/infer"));
  }
  if (v->llm == nullptr) {
    return absl::UnavailableError(absl::StrCat("model '", v->name, "' has no engine in this kilnd"));
  }
  return v;
}

std::vector<std::shared_ptr<const ModelVersion>> InferenceServer::LlmVersions() const {
  std::vector<std::shared_ptr<const ModelVersion>> out;
  for (const RepositoryIndexEntry& e : RepositoryIndex(/*ready_only=*/true)) {
    if (!out.empty() && out.back()->name == e.name) continue;
    absl::StatusOr<std::shared_ptr<const ModelVersion>> v = Resolve(e.name, "");
    if (v.ok() && (*v)->llm != nullptr) out.push_back(*std::move(v));
  }
  return out;
}

absl::StatusOr<bool> InferenceServer::ModelReady(const std::string& name,
                                                 const std::string& version) const {
  return Guard("ModelReady", [&]() -> absl::StatusOr<bool> {
    auto model = Resolve(name, version);
    if (model.ok()) return Ready();
    if (absl::IsInvalidArgument(model.status())) return model.status();
    return false;
  });
}

absl::StatusOr<ModelMetadata> InferenceServer::GetModelMetadata(const std::string& name,
                                                                const std::string& version) const {
  return Guard("ModelMetadata", [&]() -> absl::StatusOr<ModelMetadata> {
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
  });
}

absl::StatusOr<std::shared_ptr<const inference::ModelConfig>> InferenceServer::GetModelConfig(
    const std::string& name, const std::string& version) const {
  absl::StatusOr<std::shared_ptr<const ModelVersion>> model = Resolve(name, version);
  if (!model.ok()) return model.status();
  return (*model)->config;
}

bool InferenceServer::ServerReady() const {
  return Ready() && (!options_.strict_readiness || AllModelsReady(repository_.Index(false)));
}

std::vector<RepositoryIndexEntry> InferenceServer::RepositoryIndex(bool ready_only) const {
  return repository_.Index(ready_only);
}

absl::Status InferenceServer::LoadModel(const std::string& name, const LoadOptions& options) {
  return Guard("RepositoryModelLoad", [&]() -> absl::Status { return LoadModelUnguarded(name, options); });
}

absl::Status InferenceServer::LoadModelUnguarded(const std::string& name, const LoadOptions& options) {
  if (!Ready()) return absl::UnavailableError("the server is shutting down");
  if (!options.internal && !options_.model_control_api) return ModelControlRefused();
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
  absl::Status status = repository_.Load(name, std::move(override_config));
  PublishModels();
  return status;
}

absl::Status InferenceServer::UnloadModel(const std::string& name, bool internal) {
  return Guard("RepositoryModelUnload", [&]() -> absl::Status {
    if (!Ready()) return absl::UnavailableError("the server is shutting down");
    if (!internal && !options_.model_control_api) return ModelControlRefused();
    absl::Status status = repository_.Unload(name);
    PublishModels();
    return status;
  });
}

absl::StatusOr<std::vector<ModelStatsEntry>> InferenceServer::Statistics(
    const std::string& name, const std::string& version) const {
  return Guard("ModelStatistics", [&]() -> absl::StatusOr<std::vector<ModelStatsEntry>> {
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
  });
}

absl::StatusOr<InferResponse> InferenceServer::Infer(const InferRequest& request) {
  absl::Notification finished;
  absl::StatusOr<InferResponse> out = absl::UnknownError("no answer");
  InferAsync(request, [&](absl::StatusOr<InferResponse> response) {
    out = std::move(response);
    finished.Notify();
  });
  finished.WaitForNotification();
  return out;
}

void InferenceServer::InferAsync(const InferRequest& request, InferCallback done) {
  Start(request, std::move(done), nullptr);
}

InferenceServer::StreamHandle InferenceServer::InferStreamAsync(const InferRequest& request,
                                                                StreamCallback on_response) {
  InferCallback once = [on_response](absl::StatusOr<InferResponse> response) {
    on_response(std::move(response), /*final=*/true);
  };
  return Start(request, std::move(once), std::move(on_response));
}

InferenceServer::StreamHandle InferenceServer::Start(const InferRequest& request,
                                                     InferCallback done, StreamCallback decoupled) {
  Task task;
  task.start = std::chrono::steady_clock::now();
  task.done = std::move(done);
  task.obs.protocol = request.protocol;
  absl::Status admitted = Guard("ModelInfer", [&] { return Admit(request, &task); });
  if (!admitted.ok()) {
    Finish(task, admitted);
    return {};
  }
  if (task.model->config->platform() == kPlatformLlm) {  // to the model's generator
    if (decoupled != nullptr) {
      return GenerateInfer(task.model, request, /*decoupled=*/true, std::move(decoupled));
    }
    auto once = [done = std::move(task.done)](absl::StatusOr<InferResponse> r, bool final) {
      if (final) done(std::move(r));
    };
    return GenerateInfer(task.model, request, /*decoupled=*/false, std::move(once));
  }
  if (task.model->batcher != nullptr) {  // dynamic batching: the batcher decides when it runs
    Enqueue(std::move(task));
    return {};
  }
  DeviceLane& lane = *task.lane;
  // Expected engine time from the version's latest run; unknown (0) means queue: first runs
  // compile, which must not hold a transport thread.
  const uint64_t per_item = task.model->last_compute_ns_per_item->load(std::memory_order_relaxed);
  const bool short_enough =
      per_item > 0 && per_item * static_cast<uint64_t>(task.valid.batch_size) <=
                          static_cast<uint64_t>(options_.inline_max_compute_us) * 1000;
  task.admitted = std::chrono::steady_clock::now();
  lane.Submit([this, task = std::move(task)]() mutable { RunTask(task); },
              /*may_inline=*/options_.inline_execution && short_enough);
  return {};
}

DeviceLane* InferenceServer::PickLane(const ModelVersion& version) const {
  const int n = version.instance_count;
  if (n <= 1) return lanes_.Find(version.device);
  // The scan starts at the next instance in turn: picks made at the same moment (before either
  // has submitted its work) land on different idle instances.
  const int start = static_cast<int>(version.next_instance->fetch_add(1, std::memory_order_relaxed) %
                                     static_cast<uint32_t>(n));
  DeviceLane* best = nullptr;
  int64_t best_load = 0;
  for (int k = 0; k < n; ++k) {
    DeviceLane* lane = lanes_.Find(version.device, (start + k) % n);
    if (lane == nullptr) continue;
    const int64_t load = lane->load();
    if (best == nullptr || load < best_load) {
      best = lane;
      best_load = load;
    }
    if (best_load == 0) break;
  }
  return best;
}

absl::Status InferenceServer::Admit(const InferRequest& request, Task* task) {
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
  task->model = *model;
  task->obs.model = version.name;
  task->obs.version = std::to_string(version.version);
  task->obs.reached_model = true;
  if (version.config->platform() == kPlatformLlm) return absl::OkStatus();  // GenerateInfer
  absl::StatusOr<ValidatedRequest> valid =
      ValidateInferRequest(*version.config, request, options_.max_request_bytes);
  if (!valid.ok()) return valid.status();
  task->lane = version.device.empty() ? nullptr : PickLane(version);
  const bool runnable = task->lane != nullptr &&
                        ((version.config->platform() == kPlatformGraph && version.graph) ||
                         (version.config->platform() == kPlatformBuiltin && version.builtin) ||
                         (IsOnnxConfig(*version.config) && version.onnx));
  if (!runnable) {
    return absl::UnavailableError(absl::StrCat("platform ", version.config->platform(),
                                               " for model ", version.name,
                                               " is not available in this build"));
  }
  if (version.batcher != nullptr) {
    if (absl::StatusOr<uint32_t> level = version.batcher->LevelOf(request.priority); !level.ok()) {
      return level.status();
    }
  }
  task->request = request;  // before the pending count: nothing below may fail
  if (version.batcher == nullptr && request.timeout_us > 0) {  // else the queue policy's (infer_request.h)
    task->request.deadline = std::min(
        task->request.deadline,
        absl::Now() - absl::FromChrono(std::chrono::steady_clock::now() - task->start) +
            absl::Microseconds(request.timeout_us));
  }
  // The server's bound on every version's waiting requests; a dynamic batcher's queue policy
  // bounds each priority level on its own (DynamicBatcher::Push, UNAVAILABLE as in Triton).
  const int64_t limit = options_.max_queue_size;
  if (version.pending->fetch_add(1) >= limit) {
    version.pending->fetch_sub(1);
    task->obs.rejected = true;
    return absl::ResourceExhaustedError(absl::StrCat(
        "model '", version.name, "' version ", version.version,
        ": the queue is full (max_queue_size ", limit, " requests waiting); retry later"));
  }
  if (observer_ != nullptr) observer_->ObservePending(task->obs.model, task->obs.version, +1);
  task->valid = *std::move(valid);
  task->trace_id = trace_.Sample(version.name);
  return absl::OkStatus();
}

void InferenceServer::Finish(Task& task, absl::StatusOr<InferResponse> response) {
  if (response.ok() && !task.request.shared_memory_outputs.empty()) {
    if (absl::Status s = WriteSharedMemoryOutputs(task.request, &*response); !s.ok()) response = s;
  }
  const uint64_t total_ns = NanosSince(task.start);
  if (task.model != nullptr && !response.ok()) task.model->stats->RecordFailure(total_ns);
  if (task.trace_id != 0) RecordTrace(task);
  if (observer_ != nullptr) {
    task.obs.code = response.status().code();
    task.obs.duration_ns = total_ns;
    observer_->ObserveInfer(task.obs);
  }
  InferCallback done = std::move(task.done);
  GuardVoid("ModelInfer (answer)", [&] { done(std::move(response)); });
}

absl::Status InferenceServer::WriteSharedMemoryOutputs(const InferRequest& request,
                                                       InferResponse* response) {
  for (const SharedMemoryOutput& target : request.shared_memory_outputs) {
    for (InferOutput& out : response->outputs) {
      if (out.name != target.name) continue;
      if (out.raw.size() > target.block.size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "outputs['", out.name, "'].parameters.shared_memory_byte_size: ", target.block.size,
            " bytes in region '", target.block.region, "' cannot hold the output's ",
            out.raw.size(), " bytes"));
      }
    }
  }
  for (const SharedMemoryOutput& target : request.shared_memory_outputs) {
    for (InferOutput& out : response->outputs) {
      if (out.name != target.name) continue;
      if (!out.raw.empty()) std::memcpy(target.block.data, out.raw.data(), out.raw.size());
      out.raw.clear();
      out.raw.shrink_to_fit();
      out.in_shared_memory = true;
    }
  }
  return absl::OkStatus();
}

void InferenceServer::RecordTrace(const Task& task) {
  using Clock = std::chrono::steady_clock;
  auto ns = [](Clock::time_point t) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
  };
  TraceRecord r;
  r.id = task.trace_id;
  r.model_name = task.obs.model;
  r.model_version = task.obs.version;
  r.request_id = task.request.id;
  r.timestamps.emplace_back("REQUEST_START", ns(task.start));
  if (task.admitted != Clock::time_point{}) r.timestamps.emplace_back("QUEUE_START", ns(task.admitted));
  if (task.compute_start != Clock::time_point{}) {
    r.timestamps.emplace_back("COMPUTE_START", ns(task.compute_start));
    if (task.compute_end != Clock::time_point{}) r.timestamps.emplace_back("COMPUTE_END", ns(task.compute_end));
  }
  r.timestamps.emplace_back("REQUEST_END", ns(Clock::now()));
  trace_.Record(std::move(r));
}

void InferenceServer::RunTask(Task& task) {
  absl::StatusOr<InferResponse> response = Guard("ModelInfer", [&] { return ExecuteTask(task); });
  // Before answering: the device is free for the next request (the executor takes over anything
  // queued while an inline run held it).
  task.lane->Release();
  Finish(task, std::move(response));
}

std::optional<absl::StatusOr<InferResponse>> InferenceServer::BeginTask(Task& task, CacheProbe* cached,
                                                                        ExecutionTimes* times) {
  const ModelVersion& version = *task.model;
  version.pending->fetch_sub(1);
  if (observer_ != nullptr) observer_->ObservePending(task.obs.model, task.obs.version, -1);
  times->batch_size = static_cast<uint64_t>(task.valid.batch_size);
  times->queue_ns = NanosSince(task.admitted);
  task.obs.batch_size = times->batch_size;
  task.obs.queue_ns = times->queue_ns;
  // The deadline first: a transport cancels a call whose deadline passed, too.
  if (absl::Now() >= task.request.deadline) {
    task.obs.dropped = true;
    return absl::DeadlineExceededError(absl::StrCat(
        "the request's deadline passed while it waited in the queue (", times->queue_ns / 1000, " us)"));
  }
  if (task.request.cancellation != nullptr && task.request.cancellation->cancelled()) {
    task.obs.dropped = true;
    return absl::CancelledError("the request was cancelled while it waited in the queue");
  }
  if (!task.request.viz) {  // a request asking to be recorded must run
    *cached = ProbeCache(response_cache_.get(), version, task.request, task.start, &task.obs);
  }
  if (cached->hit.has_value()) return *std::move(cached->hit);  // response_cache.h
  task.compute_start = std::chrono::steady_clock::now();
  return std::nullopt;
}

void InferenceServer::EndTask(Task& task, const CacheProbe& cached, const ExecutionTimes& times,
                              bool count_execution, absl::StatusOr<InferResponse>& response) {
  task.compute_end = std::chrono::steady_clock::now();
  const ModelVersion& version = *task.model;
  task.obs.compute_input_ns = times.compute_input_ns;
  task.obs.compute_infer_ns = times.compute_infer_ns;
  task.obs.compute_output_ns = times.compute_output_ns;
  if (response.ok()) {
    absl::Status s =
        ApplyClassification(*version.config, version.labels.get(), task.request, &*response);
    if (!s.ok()) response = s;
  }
  StoreInCache(response_cache_.get(), cached, version, response, &task.obs);
  if (!response.ok()) return;
  version.stats->RecordRequest(NanosSince(task.start), times);
  if (count_execution) version.stats->RecordExecution(times);
}

absl::StatusOr<InferResponse> InferenceServer::ExecuteTask(Task& task) {
  const ModelVersion& version = *task.model;
  DeviceLane& lane = *task.lane;
  ExecutionTimes times;
  CacheProbe cached;
  if (auto answer = BeginTask(task, &cached, &times); answer.has_value()) return *std::move(answer);
  KILN_FAILPOINT("infer.execute");
  api::RunOptions run_options =
      policy_.For(task.request.deadline, task.request.cancellation, task.request.max_response_bytes);
  run_options.label = version.name;
  run_options.viz = task.request.viz;
  absl::StatusOr<InferResponse> response =
      Execute(lane, version, task.request, task.valid, run_options, &times, &task.obs);
  task.obs.executed_rows = times.batch_size;
  EndTask(task, cached, times, /*count_execution=*/true, response);
  if (response.ok()) {
    version.last_compute_ns_per_item->store(
        std::max<uint64_t>(1, times.compute_infer_ns / std::max<uint64_t>(1, times.batch_size)),
        std::memory_order_relaxed);
  }
  return response;
}

}  // namespace kiln::server
