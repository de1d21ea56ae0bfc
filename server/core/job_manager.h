// JobManager: kilnd's training jobs (kiln.v1.Training, proto/kiln/v1/training.proto).
//
// Jobs run one at a time on a worker thread, through engine/api's Trainer (its own Engine, so
// training never holds the inference engine's run lock): the train step runs under TinyJit and
// the loop is Trainer::Fit; JobManager keeps the job bookkeeping (states, events, the job store,
// checkpoint generations). Datasets (sandboxing, uploads) are DatasetStore's (dataset_store.h);
// the version folder a job publishes is written by ModelRepository::PublishBuiltin.
// State lives in <data-dir>: jobs.db (JobStore: job records and every step's loss), jobs/<id>/
// (CheckpointStore: the last 2 checkpoints, each a safetensors file of weights, optimizer state,
// step and data-order RNG state, plus a SHA-256 manifest), datasets/<id>/ (uploads).
//
// Lifecycle: QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED; Resume() queues an
// INTERRUPTED, FAILED or CANCELLED job again (a cancel checkpoints first). Create() turns jobs found
// RUNNING (kilnd was killed) into INTERRUPTED; with resume_jobs they and QUEUED jobs are queued
// again at once, else INTERRUPTED waits for Resume(). A resumed job restores its newest valid
// checkpoint (partial or corrupt generations are skipped, temp files removed) and continues; its
// loss curve is bitwise equal to an uninterrupted run's (same device). Shutdown() stops the
// running job at the next step boundary after a checkpoint and leaves it INTERRUPTED.
// Publishing never touches another model: spec.output_model must be a new name or a model that
// training created before (recorded in the job store before its folder is made); anything else is
// refused at Start (ALREADY_EXISTS) and again at publish time.
// Publishing: a finished job's weights become a new version folder of spec.output_model in the
// model repository (staged under a dot-folder, fsynced, renamed; config.pbtxt written durably
// first if the model is new), then `load_model` reloads the model: requests in flight keep the
// version they resolved, new ones get the new version. Publishing is idempotent across crashes:
// the version number is recorded in the job store before the folder is written, and a restart
// that finds that version holding the job's (deterministic) weights does not write another.
// Disk full: a checkpoint that cannot be written fails the job with RESOURCE_EXHAUSTED "no space
// left on device (ENOSPC) writing <data-dir>/jobs/<id>/<file>"; the previous checkpoint stays.
//
// Validation (Start): every JobSpec field, INVALID_ARGUMENT naming the field and the limit;
// dataset paths must stay inside an allowlisted root (DatasetStore::Resolve); architectures are
// engine/api's registry (architectures.h) or model:<name>.
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/engine.h"
#include "kiln/v1/training.pb.h"
#include "server/core/dataset_store.h"
#include "server/core/job_store.h"

namespace kiln::server {

inline constexpr int32_t kMaxJobBatch = 4096;
inline constexpr int64_t kMaxJobSteps = 1000000;
inline constexpr int64_t kMaxEvalImages = 100000;
// How long CancelJob waits for a running job to reach its next step boundary.
inline constexpr std::chrono::seconds kCancelWait{120};

// How training progress reaches server/metrics (set once before serving).
class TrainingObserver {
 public:
  virtual ~TrainingObserver() = default;
  virtual void ObserveTrainingStep(const std::string& job, double loss,
                                   double examples_per_second) = 0;
};

struct JobManagerOptions {
  std::filesystem::path data_dir;
  std::filesystem::path model_repository;
  bool repository_follow_links = false;  // as ServerOptions::repository_follow_links
  std::vector<std::filesystem::path> dataset_roots{"/usr/share/datasets"};
  bool resume_jobs = true;
  std::string device;  // "" = the engine default
  int64_t max_dataset_bytes = kDefaultMaxDatasetBytes;
  // Loads or reloads a repository model after publishing (InferenceServer::LoadModel).
  std::function<absl::Status(const std::string& model)> load_model;
};

class JobManager {
 public:
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(JobManagerOptions options);
  ~JobManager();  // Shutdown()

  absl::StatusOr<kiln::v1::Job> Start(const kiln::v1::JobSpec& spec);
  // NOT_FOUND for an unknown id, INVALID_ARGUMENT for a malformed one.
  absl::StatusOr<kiln::v1::Job> Get(const std::string& id, bool include_losses = false) const;
  std::vector<kiln::v1::Job> List() const;
  // Stops a job: a QUEUED one at once; a RUNNING one at its next step boundary, after a
  // checkpoint of its progress, and the call returns once it has stopped (CANCELLED; at most
  // kCancelWait later, else the job as it is then, still RUNNING). FAILED_PRECONDITION if the job
  // already ended.
  absl::StatusOr<kiln::v1::Job> Cancel(const std::string& id);
  // Queues an INTERRUPTED, FAILED or CANCELLED job again; it continues from its newest valid
  // checkpoint. FAILED_PRECONDITION otherwise.
  absl::StatusOr<kiln::v1::Job> Resume(const std::string& id);

  // The newest valid checkpoint of a job (safetensors: weights, optimizer state, step, data-order
  // RNG), opened for reading. NOT_FOUND if the job has none yet.
  class CheckpointFile;
  absl::StatusOr<std::unique_ptr<CheckpointFile>> OpenCheckpoint(const std::string& id) const;

  // Calls `listener` with every later event of job `id` (from the thread that made the change,
  // never concurrently with Unsubscribe returning). Returns a token for Unsubscribe.
  using Listener = std::function<void(const kiln::v1::JobEvent&)>;
  absl::StatusOr<uint64_t> Subscribe(const std::string& id, Listener listener);
  void Unsubscribe(uint64_t token);

  // Dataset uploads (DatasetStore::Upload): Begin, Append per chunk, Finish (validates the IDX
  // files and publishes the folder) or Abort. INVALID_ARGUMENT / RESOURCE_EXHAUSTED name the
  // field and the limit.
  using Upload = DatasetStore::Upload;
  absl::StatusOr<std::unique_ptr<Upload>> BeginUpload();
  int64_t max_dataset_bytes() const { return options_.max_dataset_bytes; }

  // Stops the worker: the running job checkpoints at its next step boundary and becomes
  // INTERRUPTED. Idempotent.
  void Shutdown();
  void SetObserver(TrainingObserver* observer) { observer_ = observer; }

  static bool IsTerminal(kiln::v1::JobState state);

 private:
  // The bodies of the public calls above; each public call runs its body under Guard (guard.h),
  // so an exception answers INTERNAL with a request id instead of ending the process.
  absl::StatusOr<kiln::v1::Job> StartUnguarded(const kiln::v1::JobSpec& spec);
  absl::StatusOr<kiln::v1::Job> GetUnguarded(const std::string& id, bool include_losses) const;
  absl::StatusOr<kiln::v1::Job> CancelUnguarded(const std::string& id);
  absl::StatusOr<kiln::v1::Job> ResumeUnguarded(const std::string& id);
  absl::StatusOr<uint64_t> SubscribeUnguarded(const std::string& id, Listener listener);

  struct Running;
  explicit JobManager(JobManagerOptions options) : options_(std::move(options)) {}
  absl::Status Validate(const kiln::v1::JobSpec& spec) const;
  // Publishing never touches another model: output_model must be a new name or a model that
  // training created (the job store's lineage). ALREADY_EXISTS names the model otherwise.
  absl::Status CheckOutputModel(const kiln::v1::JobSpec& spec) const;
  void WorkerLoop();
  void RunJob(const std::string& id);
  absl::Status Train(kiln::v1::Job& job, Running& run);
  // Claims spec.output_model for training's lineage if it is new, then writes the trained
  // weights as its next version (ModelRepository::PublishBuiltin), idempotently: the version
  // number is recorded in the job (publishing_version) before anything is written, and a
  // restarted publish that finds that version holding the same bytes only loads and marks it.
  // Sets job.published_version. Failpoints publish.* (failpoint.h) mark each stage.
  absl::StatusOr<int64_t> Publish(kiln::v1::Job& job, class api::Trainer& trainer);
  // Stores `job` under mu_ and in the job store, without an event. The store's status.
  absl::Status Persist(const kiln::v1::Job& job);
  // Stores `job` under mu_, then tells its listeners.
  void Update(const kiln::v1::Job& job, kiln::v1::JobEvent::Kind kind);
  static int64_t NowMs();

  JobManagerOptions options_;
  std::unique_ptr<api::Engine> engine_;
  std::unique_ptr<DatasetStore> datasets_;
  std::unique_ptr<JobStore> store_;
  TrainingObserver* observer_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_;          // queue_ or stopping_ changed
  std::condition_variable stopped_cv_;  // the running job stopped (running_ changed)
  std::map<std::string, kiln::v1::Job> jobs_;  // guarded by mu_
  std::deque<std::string> queue_;              // QUEUED ids, guarded by mu_
  std::string running_;                        // id of the running job, guarded by mu_
  bool cancel_running_ = false;                // guarded by mu_
  bool stopping_ = false;                      // guarded by mu_
  std::thread worker_;

  std::mutex listeners_mu_;
  uint64_t next_token_ = 1;
  std::map<uint64_t, std::pair<std::string, Listener>> listeners_;  // guarded by listeners_mu_
};

class JobManager::CheckpointFile {
 public:
  ~CheckpointFile();
  int64_t step() const { return step_; }
  uint64_t bytes() const { return bytes_; }
  const std::string& sha256() const { return sha256_; }  // lowercase hex
  // Appends up to `n` bytes from `offset` to `*out`; returns how many (0 at the end). Thread
  // safe (pread). The file stays readable while this object lives, even after the job removes it.
  absl::StatusOr<size_t> Read(uint64_t offset, size_t n, std::string* out) const;

 private:
  friend class JobManager;
  CheckpointFile(int fd, int64_t step, uint64_t bytes, std::string sha256)
      : fd_(fd), step_(step), bytes_(bytes), sha256_(std::move(sha256)) {}
  int fd_;
  int64_t step_;
  uint64_t bytes_;
  std::string sha256_;
};

}  // namespace kiln::server
