#include "server/core/job_manager.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/api/architectures.h"
#include "engine/api/status.h"
#include "engine/api/trainer.h"
#include "server/core/checkpoint_store.h"
#include "server/core/guard.h"
#include "server/core/limits.h"
#include "server/core/model_config.h"
#include "server/core/model_repository.h"
#include "server/core/repository_files.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace fs = std::filesystem;
using kiln::v1::Job;
using kiln::v1::JobEvent;
using kiln::v1::JobSpec;
using kiln::v1::JobState;

struct JobManager::Running {
  std::unique_ptr<api::Trainer> trainer;
  DatasetStore::Loaded data;
};

bool JobManager::IsTerminal(JobState s) {
  return s == kiln::v1::SUCCEEDED || s == kiln::v1::FAILED || s == kiln::v1::CANCELLED;
}

int64_t JobManager::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(JobManagerOptions options) {
  std::error_code ec;
  fs::create_directories(options.data_dir / "jobs", ec);
  if (ec) return absl::UnavailableError("--data-dir: cannot create the jobs folder");
  std::unique_ptr<JobManager> m(new JobManager(std::move(options)));
  KILN_ASSIGN_OR_RETURN(m->datasets_, DatasetStore::Open(m->options_.data_dir / "datasets",
                                                         m->options_.dataset_roots,
                                                         m->options_.max_dataset_bytes));
  api::EngineOptions eo;
  eo.device = m->options_.device;
  KILN_ASSIGN_OR_RETURN(m->engine_, api::Engine::Create(eo));
  KILN_ASSIGN_OR_RETURN(m->store_, JobStore::Open(m->options_.data_dir / "jobs.db"));
  std::vector<Job> jobs = m->store_->All();
  for (Job& job : jobs) {
    if (job.state() == kiln::v1::RUNNING) {
      job.set_state(kiln::v1::INTERRUPTED);
      job.set_message("kilnd stopped while the job ran");
      job.set_updated_unix_ms(NowMs());
      KILN_RETURN_IF_ERROR(m->store_->Put(job));
    }
    if (m->options_.resume_jobs && job.state() == kiln::v1::INTERRUPTED) {
      job.set_state(kiln::v1::QUEUED);
      job.set_message("resumed at start-up");
      KILN_RETURN_IF_ERROR(m->store_->Put(job));
    }
    if (job.state() == kiln::v1::QUEUED) m->queue_.push_back(job.id());
    // Jobs that published before the lineage table existed: their models are training's.
    if (job.published_version() > 0) {
      KILN_RETURN_IF_ERROR(m->store_->PutPublishedModel(job.spec().output_model(), job.id()));
    }
    m->jobs_[job.id()] = job;
  }
  m->worker_ = std::thread([p = m.get()] { p->WorkerLoop(); });
  return m;
}

JobManager::~JobManager() { Shutdown(); }

void JobManager::Shutdown() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

absl::Status JobManager::Validate(const JobSpec& s) const {
  auto range = [](const char* field, int64_t v, int64_t lo, int64_t hi) -> absl::Status {
    if (v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", v, " is not in [", lo, ", ", hi, "]"));
    }
    return absl::OkStatus();
  };
  if (!s.name().empty() && !IsValidModelName(s.name())) {
    return absl::InvalidArgumentError(
        "name: 1..256 characters of [A-Za-z0-9_.-], not starting with '.'");
  }
  if (!IsValidModelName(s.output_model())) {
    return absl::InvalidArgumentError(
        "output_model: 1..256 characters of [A-Za-z0-9_.-], not starting with '.'");
  }
  const std::string& arch = s.architecture();
  if (arch.rfind("model:", 0) == 0) {
    if (!IsValidModelName(arch.substr(6))) {
      return absl::InvalidArgumentError("architecture: model:<name> needs a valid model name");
    }
  } else if (api::FindArchitecture(arch) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("architecture: unknown '", arch.substr(0, 64),
                                                   "' (known: ", api::KnownArchitectures(),
                                                   ", model:<name>)"));
  }
  if (s.mlp_sizes_size() > 0) {
    if (s.mlp_sizes_size() < 2 || s.mlp_sizes_size() > 17) {
      return absl::InvalidArgumentError("mlp_sizes: need 2 to 17 sizes");
    }
    for (int i = 0; i < s.mlp_sizes_size(); ++i) {
      KILN_RETURN_IF_ERROR(
          range(absl::StrCat("mlp_sizes[", i, "]").c_str(), s.mlp_sizes(i), 1, 65536));
    }
  }
  KILN_RETURN_IF_ERROR(range("batch_size", s.batch_size(), 1, kMaxJobBatch));
  KILN_RETURN_IF_ERROR(range("steps", s.steps(), 1, kMaxJobSteps));
  KILN_RETURN_IF_ERROR(range("eval_interval", s.eval_interval(), 0, s.steps()));
  KILN_RETURN_IF_ERROR(range("checkpoint_interval", s.checkpoint_interval(), 0, s.steps()));
  KILN_RETURN_IF_ERROR(range("eval_images", s.eval_images(), 0, kMaxEvalImages));
  const auto& o = s.optimizer();
  if (!o.name().empty() && o.name() != "sgd" && o.name() != "adam" && o.name() != "adamw") {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.name: unknown '", o.name().substr(0, 32),
                                                   "' (known: sgd, adam, adamw)"));
  }
  if (!(o.lr() >= 0) || o.lr() > 10) {
    return absl::InvalidArgumentError("optimizer.lr: must be in (0, 10] (0 = 0.001)");
  }
  if (!(o.momentum() >= 0) || o.momentum() >= 1) {
    return absl::InvalidArgumentError("optimizer.momentum: must be in [0, 1)");
  }
  if (!(o.weight_decay() >= 0) || o.weight_decay() > 1) {
    return absl::InvalidArgumentError("optimizer.weight_decay: must be in [0, 1]");
  }
  for (double b : {o.beta1(), o.beta2()}) {
    if (!(b >= 0) || b >= 1) {
      return absl::InvalidArgumentError("optimizer.beta1/beta2: must be in [0, 1) (0 = default)");
    }
  }
  if (!(o.eps() >= 0) || o.eps() > 1) {
    return absl::InvalidArgumentError("optimizer.eps: must be in [0, 1] (0 = 1e-8)");
  }
  KILN_RETURN_IF_ERROR(CheckOutputModel(s));
  if (!s.device().empty() && s.device() != engine_->device()) {
    return absl::InvalidArgumentError(absl::StrCat("device: '", s.device().substr(0, 32),
                                                   "' is not available (kilnd trains on ",
                                                   engine_->device(), ")"));
  }
  return datasets_->Resolve(s.dataset()).status();
}

absl::StatusOr<Job> JobManager::Start(const JobSpec& spec) {
  return Guard("StartJob", [&] { return StartUnguarded(spec); });
}

absl::StatusOr<Job> JobManager::StartUnguarded(const JobSpec& spec) {
  KILN_RETURN_IF_ERROR(Validate(spec));
  Job job;
  job.set_id(RandomHex(8));
  *job.mutable_spec() = spec;
  job.set_state(kiln::v1::QUEUED);
  job.set_eval_accuracy(-1);
  job.set_created_unix_ms(NowMs());
  job.set_updated_unix_ms(job.created_unix_ms());
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return absl::UnavailableError("kilnd is shutting down");
    KILN_RETURN_IF_ERROR(store_->Put(job));
    jobs_[job.id()] = job;
    queue_.push_back(job.id());
  }
  cv_.notify_all();
  return job;
}

absl::StatusOr<std::unique_ptr<JobManager::Upload>> JobManager::BeginUpload() {
  return Guard("UploadDataset", [&] { return datasets_->BeginUpload(); });
}

absl::StatusOr<Job> JobManager::Get(const std::string& id, bool include_losses) const {
  return Guard("GetJob", [&] { return GetUnguarded(id, include_losses); });
}

absl::StatusOr<Job> JobManager::GetUnguarded(const std::string& id, bool include_losses) const {
  if (!IsHexId(id, 16)) return absl::InvalidArgumentError("id: must be 16 lowercase hex digits");
  Job job;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("id: no job '", id, "'"));
    job = it->second;
  }
  if (include_losses) {
    for (float f : store_->Losses(id)) job.add_losses(f);
  }
  return job;
}

std::vector<Job> JobManager::List() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<Job> out;
  for (const auto& [id, job] : jobs_) out.push_back(job);
  std::sort(out.begin(), out.end(),
            [](const Job& a, const Job& b) { return a.created_unix_ms() < b.created_unix_ms(); });
  return out;
}

absl::StatusOr<Job> JobManager::Cancel(const std::string& id) {
  return Guard("CancelJob", [&] { return CancelUnguarded(id); });
}

absl::StatusOr<Job> JobManager::CancelUnguarded(const std::string& id) {
  KILN_ASSIGN_OR_RETURN(Job job, Get(id));
  if (IsTerminal(job.state())) {
    return absl::FailedPreconditionError(absl::StrCat("id: job ", id, " already ended"));
  }
  {
    std::unique_lock<std::mutex> l(mu_);
    if (running_ == id) {
      // The worker stops at its next step boundary, checkpoints and marks the job CANCELLED;
      // wait for that so that a ResumeJob right after this call finds the job stopped.
      cancel_running_ = true;
      stopped_cv_.wait_for(l, kCancelWait, [&] { return running_ != id; });
      return jobs_[id];
    }
    queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
    job = jobs_[id];  // under mu_: the state the worker last stored
  }
  if (IsTerminal(job.state())) return job;
  job.set_state(kiln::v1::CANCELLED);
  job.set_message("cancelled");
  Update(job, JobEvent::STATE);
  return job;
}

absl::StatusOr<Job> JobManager::Resume(const std::string& id) {
  return Guard("ResumeJob", [&] { return ResumeUnguarded(id); });
}

absl::StatusOr<Job> JobManager::ResumeUnguarded(const std::string& id) {
  KILN_RETURN_IF_ERROR(Get(id).status());
  Job job;
  {
    // Checked and marked under one lock: of two concurrent resumes, one queues the job.
    std::lock_guard<std::mutex> l(mu_);
    job = jobs_[id];
    if (job.state() != kiln::v1::INTERRUPTED && job.state() != kiln::v1::FAILED &&
        job.state() != kiln::v1::CANCELLED) {
      return absl::FailedPreconditionError(absl::StrCat(
          "id: job ", id, " is ", kiln::v1::JobState_Name(job.state()),
          "; only INTERRUPTED, FAILED or CANCELLED jobs resume"));
    }
    if (running_ == id) {
      return absl::FailedPreconditionError(
          absl::StrCat("id: job ", id, " is still stopping; resume it once it has stopped"));
    }
    job.set_state(kiln::v1::QUEUED);
    job.set_message(job.checkpoint_step() > 0
                        ? absl::StrCat("resumed; continues from the checkpoint at step ",
                                       job.checkpoint_step())
                        : "resumed");
    jobs_[id] = job;  // a second Resume now sees QUEUED
  }
  Update(job, JobEvent::STATE);  // listeners see QUEUED before the worker can pick the job up
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(id);
  }
  cv_.notify_all();
  return job;
}

absl::StatusOr<uint64_t> JobManager::Subscribe(const std::string& id, Listener listener) {
  return Guard("WatchJob", [&] { return SubscribeUnguarded(id, std::move(listener)); });
}

absl::StatusOr<uint64_t> JobManager::SubscribeUnguarded(const std::string& id, Listener listener) {
  KILN_RETURN_IF_ERROR(Get(id).status());
  std::lock_guard<std::mutex> l(listeners_mu_);
  const uint64_t token = next_token_++;
  listeners_[token] = {id, std::move(listener)};
  return token;
}

void JobManager::Unsubscribe(uint64_t token) {
  std::lock_guard<std::mutex> l(listeners_mu_);
  listeners_.erase(token);
}

void JobManager::Update(const Job& in, JobEvent::Kind kind) {
  Job job = in;
  job.set_updated_unix_ms(NowMs());
  job.clear_losses();
  {
    std::lock_guard<std::mutex> l(mu_);
    jobs_[job.id()] = job;
  }
  if (absl::Status st = store_->Put(job); !st.ok()) {
    spdlog::error("training: {}", std::string(st.message()));
  }
  JobEvent event;
  event.set_kind(kind);
  *event.mutable_job() = job;
  std::lock_guard<std::mutex> l(listeners_mu_);
  for (auto& [token, entry] : listeners_) {
    if (entry.first == job.id()) entry.second(event);
  }
}

absl::Status JobManager::Persist(const Job& in) {
  Job job = in;
  job.set_updated_unix_ms(NowMs());
  job.clear_losses();
  {
    std::lock_guard<std::mutex> l(mu_);
    jobs_[job.id()] = job;
  }
  return store_->Put(job);
}

void JobManager::WorkerLoop() {
  while (true) {
    std::string id;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      id = queue_.front();
      queue_.pop_front();
      running_ = id;
      cancel_running_ = false;
    }
    RunJob(id);
    {
      std::lock_guard<std::mutex> l(mu_);
      running_.clear();
    }
    stopped_cv_.notify_all();
  }
}

void JobManager::RunJob(const std::string& id) {
  absl::StatusOr<Job> got = Get(id);
  if (!got.ok()) return;
  Job job = *got;
  job.set_state(kiln::v1::RUNNING);
  job.set_message("");
  Update(job, JobEvent::STATE);
  Running run;
  // The worker thread must survive anything a job does: an escaped exception fails the job.
  absl::Status st = Guard("training job", [&] { return Train(job, run); });
  if (job.state() == kiln::v1::RUNNING) {
    if (st.ok()) {
      job.set_state(kiln::v1::SUCCEEDED);
      job.set_eta_seconds(0);
    } else {
      job.set_state(kiln::v1::FAILED);
      job.set_message(std::string(st.message()));
      spdlog::warn("training: job {} failed: {}", id, std::string(st.message()));
    }
  }
  Update(job, JobEvent::STATE);
}

absl::Status JobManager::Train(Job& job, Running& run) {
  const JobSpec& spec = job.spec();
  // ** data **
  KILN_ASSIGN_OR_RETURN(run.data, datasets_->Load(spec.dataset()));
  // ** model and optimizer **
  api::TrainerSpec ts;
  ts.architecture = spec.architecture();
  ts.seed = spec.seed();
  int64_t pixels = 1;
  for (int64_t d : run.data.train.item_shape) pixels *= d;
  RepositoryFiles::OpenFile init_file;  // open until CreateTrainer has read it
  if (ts.architecture.rfind("model:", 0) == 0) {
    const std::string model = ts.architecture.substr(6);
    // Read as the model repository reads it: nothing below the root through a link, bounded.
    const RepositoryFiles files(options_.model_repository, options_.repository_follow_links);
    absl::StatusOr<inference::ModelConfig> cfg = ReadModelConfig(files, model);
    if (!cfg.ok() || cfg->platform() != "kiln_builtin" || !cfg->parameters().count("architecture")) {
      return absl::InvalidArgumentError(
          absl::StrCat("architecture: model '", model, "' is not a kiln_builtin repository model"));
    }
    ts.architecture = cfg->parameters().at("architecture").string_value();
    int64_t best = 0;
    for (const std::string& name : files.ListFolders(model)) {
      int64_t v = 0;
      if (absl::SimpleAtoi(name, &v) && v > best &&
          files.Stat(absl::StrCat(model, "/", name, "/model.safetensors")) == RepositoryFiles::Kind::kFile) {
        best = v;
      }
    }
    if (best == 0) {
      return absl::InvalidArgumentError(absl::StrCat("architecture: model '", model, "' has no weights"));
    }
    KILN_ASSIGN_OR_RETURN(init_file, files.Open(absl::StrCat(model, "/", best, "/model.safetensors"),
                                                absl::StrCat("model file ", best, "/model.safetensors")));
    ts.init_weights = init_file.path();
  }
  const api::Architecture* arch = api::FindArchitecture(ts.architecture);
  if (arch != nullptr && arch->sized) {
    ts.mlp_sizes.assign(spec.mlp_sizes().begin(), spec.mlp_sizes().end());
    if (ts.mlp_sizes.empty()) {
      ts.mlp_sizes = arch->default_sizes;
      ts.mlp_sizes.front() = pixels;
    }
    if (ts.mlp_sizes.front() != pixels) {
      return absl::InvalidArgumentError(absl::StrCat("mlp_sizes[0]: ", ts.mlp_sizes.front(),
                                                     ", the dataset's items have ", pixels, " pixels"));
    }
  }
  const auto& o = spec.optimizer();
  ts.optimizer.name = o.name().empty() ? "adam" : o.name();
  ts.optimizer.lr = o.lr() > 0 ? o.lr() : 1e-3;
  ts.optimizer.momentum = o.momentum();
  ts.optimizer.nesterov = o.nesterov();
  ts.optimizer.weight_decay = o.weight_decay();
  if (o.beta1() > 0) ts.optimizer.beta1 = o.beta1();
  if (o.beta2() > 0) ts.optimizer.beta2 = o.beta2();
  if (o.eps() > 0) ts.optimizer.eps = o.eps();
  KILN_ASSIGN_OR_RETURN(run.trainer, engine_->CreateTrainer(ts));
  api::Trainer& trainer = *run.trainer;

  // ** resume **
  CheckpointStore ckpts(options_.data_dir / "jobs" / job.id(), 2,
                        absl::StrCat("<data-dir>/jobs/", job.id()));
  std::error_code ec;
  fs::create_directories(ckpts.dir(), ec);
  ckpts.Clean();
  api::FitSpec fit;
  fit.batch_size = spec.batch_size();
  fit.steps = spec.steps();
  fit.eval_interval = spec.eval_interval();
  fit.checkpoint_interval = spec.checkpoint_interval();
  fit.eval_images = spec.eval_images();
  fit.seed = spec.seed();
  absl::StatusOr<CheckpointInfo> latest = ckpts.Latest([&](const CheckpointInfo& info) {
    KILN_ASSIGN_OR_RETURN(auto meta, trainer.LoadCheckpoint(info.data.string()));
    int64_t s = 0;
    if (!absl::SimpleAtoi(meta["step"], &s) || s != info.step || meta["job"] != job.id()) {
      return absl::DataLossError("metadata does not match the manifest");
    }
    KILN_RETURN_IF_ERROR(api::Trainer::CheckDataOrder(meta["data_rng"]));
    fit.data_order = meta["data_rng"];
    fit.start_step = s;
    return absl::OkStatus();
  });
  if (latest.ok()) {
    spdlog::info("training: job {} resumes from the checkpoint at step {}", job.id(), fit.start_step);
    job.set_checkpoint_step(fit.start_step);
  } else if (job.step() > 0) {
    spdlog::warn("training: job {} has no valid checkpoint; starting over", job.id());
  }
  job.set_step(fit.start_step);
  fit.checkpoint_step = job.checkpoint_step();

  // ** steps: Trainer::Fit; the callbacks keep the job's record **
  api::FitCallbacks cb;
  cb.should_stop = [&] {
    std::lock_guard<std::mutex> l(mu_);
    if (cancel_running_) return api::FitStop::kCancel;
    if (stopping_) return api::FitStop::kInterrupt;
    return api::FitStop::kNone;
  };
  cb.on_step = [&](const api::FitProgress& p) -> absl::Status {
    KILN_RETURN_IF_ERROR(store_->PutLoss(job.id(), p.step - 1, p.loss));
    job.set_step(p.step);
    job.set_loss(p.loss);
    job.set_examples_per_second(p.examples_per_second);
    job.set_eta_seconds(p.eta_seconds);
    if (observer_ != nullptr) {
      observer_->ObserveTrainingStep(job.id(), p.loss, job.examples_per_second());
    }
    Update(job, JobEvent::STEP);
    return absl::OkStatus();
  };
  cb.on_checkpoint = [&](int64_t step, const std::string& data_order) -> absl::Status {
    const std::map<std::string, std::string> meta = {
        {"job", job.id()}, {"step", std::to_string(step)}, {"data_rng", data_order},
        {"seed", std::to_string(spec.seed())}, {"format", "kiln-checkpoint-1"}};
    KILN_ASSIGN_OR_RETURN(CheckpointInfo info, ckpts.Save(step, [&](const std::string& tmp) {
                            return trainer.SaveCheckpoint(tmp, meta);
                          }));
    job.set_checkpoint_step(info.step);
    Update(job, JobEvent::CHECKPOINT);
    return absl::OkStatus();
  };
  cb.on_eval = [&](double accuracy) -> absl::Status {
    job.set_eval_accuracy(accuracy);
    Update(job, JobEvent::EVAL);
    return absl::OkStatus();
  };
  KILN_ASSIGN_OR_RETURN(
      api::FitResult result,
      trainer.Fit(run.data.train, run.data.has_test ? &run.data.test : nullptr, fit, cb));
  if (result.stopped != api::FitStop::kNone) {
    const bool cancelled = result.stopped == api::FitStop::kCancel;
    job.set_state(cancelled ? kiln::v1::CANCELLED : kiln::v1::INTERRUPTED);
    job.set_message(cancelled ? absl::StrCat("cancelled at step ", result.step,
                                             "; ResumeJob continues from there")
                              : absl::StrCat("kilnd stopped; resumes from step ", result.step));
    return absl::OkStatus();
  }
  return Publish(job, trainer).status();
}

}  // namespace kiln::server
