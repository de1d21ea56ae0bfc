#include "server/core/job_manager.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/api/status.h"
#include "engine/api/trainer.h"
#include "server/core/checkpoint_store.h"
#include "server/core/guard.h"
#include "server/core/limits.h"
#include "server/core/model_config.h"
#include "server/core/repository_files.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace fs = std::filesystem;
using kiln::v1::Job;
using kiln::v1::JobEvent;
using kiln::v1::JobSpec;
using kiln::v1::JobState;

namespace {

constexpr int64_t kEvalChunk = 1000;

bool IsHexId(const std::string& id, size_t len) {
  if (id.size() != len) return false;
  return std::all_of(id.begin(), id.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// `p` lies strictly inside `root` (both canonical).
bool Inside(const fs::path& p, const fs::path& root) {
  auto r = root.begin(), q = p.begin();
  for (; r != root.end(); ++r, ++q) {
    if (q == p.end() || *q != *r) return false;
  }
  return q != p.end();
}

// The IDX file `stem` in `dir`, raw or ".gz"; empty if neither exists.
fs::path FindIdx(const fs::path& dir, const std::string& stem) {
  std::error_code ec;
  if (fs::is_regular_file(dir / stem, ec)) return dir / stem;
  if (fs::is_regular_file(dir / (stem + ".gz"), ec)) return dir / (stem + ".gz");
  return {};
}

// Float pixels / `divisor` and labels of the items `idx`. The CNN takes raw 0-255 pixels, as
// tinygrad's beautiful_mnist does (its BatchNorms normalize; [0, 1] inputs measured ~2 points lower
// after 70 steps), the MLP pixels / 255 (PixelDivisor).
float PixelDivisor(const std::string& architecture) { return architecture == "mnist_cnn" ? 1.0f : 255.0f; }

void Gather(const api::ImageDataset& d, const std::vector<int64_t>& idx, float divisor, std::string* x,
            std::string* y) {
  const int64_t px = d.item_shape[0] * d.item_shape[1];
  x->resize(idx.size() * px * 4);
  y->resize(idx.size() * 4);
  float* xf = reinterpret_cast<float*>(x->data());
  int32_t* yi = reinterpret_cast<int32_t*>(y->data());
  for (size_t b = 0; b < idx.size(); ++b) {
    const uint8_t* src = reinterpret_cast<const uint8_t*>(d.pixels.data()) + idx[b] * px;
    for (int64_t p = 0; p < px; ++p) xf[b * px + p] = static_cast<float>(src[p]) / divisor;
    yi[b] = d.labels[idx[b]];
  }
}

}  // namespace

struct JobManager::Running {
  std::unique_ptr<api::Trainer> trainer;
  api::ImageDataset train, test;
  bool has_test = false;
};

std::string JobManager::RandomHex(int bytes) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> l(mu);
  std::string out;
  for (int i = 0; i < bytes; ++i) absl::StrAppendFormat(&out, "%02x", rng() & 0xff);
  return out;
}

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
  fs::create_directories(options.data_dir / "datasets", ec);
  if (ec) return absl::UnavailableError("--data-dir: cannot create the jobs folder");
  std::unique_ptr<JobManager> m(new JobManager(std::move(options)));
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
  for (const auto& entry : fs::directory_iterator(m->options_.data_dir / "datasets", ec)) {
    if (entry.path().filename().string().rfind(".upload-", 0) == 0) fs::remove_all(entry.path(), ec);
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

absl::StatusOr<fs::path> JobManager::ResolveDataset(const kiln::v1::DatasetRef& ref) const {
  if (ref.has_dataset_id()) {
    if (!IsHexId(ref.dataset_id(), 16)) {
      return absl::InvalidArgumentError("dataset.dataset_id: must be 16 lowercase hex digits");
    }
    fs::path dir = options_.data_dir / "datasets" / ref.dataset_id();
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      return absl::NotFoundError(absl::StrCat("dataset.dataset_id: no dataset '", ref.dataset_id(), "'"));
    }
    return dir;
  }
  if (!ref.has_idx_dir()) return absl::InvalidArgumentError("dataset: set dataset_id or idx_dir");
  const std::string& rel = ref.idx_dir();
  if (rel.empty() || rel.size() > kMaxDatasetPath) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.idx_dir: length must be 1..", kMaxDatasetPath));
  }
  if (rel.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("dataset.idx_dir: contains a NUL byte");
  }
  const fs::path p(rel);
  if (p.is_absolute()) {
    return absl::InvalidArgumentError(
        "dataset.idx_dir: must be relative to an allowed dataset root, not absolute");
  }
  for (const fs::path& part : p) {
    if (part == "..") {
      return absl::InvalidArgumentError("dataset.idx_dir: '..' is not allowed");
    }
  }
  std::error_code ec;
  for (const fs::path& root : options_.dataset_roots) {
    const fs::path croot = fs::canonical(root, ec);
    if (ec) continue;
    const fs::path dir = fs::canonical(croot / p, ec);
    if (ec) continue;
    if (!Inside(dir, croot)) {
      return absl::InvalidArgumentError(
          "dataset.idx_dir: resolves outside the allowed dataset roots (symlink)");
    }
    if (!fs::is_directory(dir, ec)) continue;
    // Each IDX file, too, must not be a symlink out of the root.
    for (const char* stem : kIdxFiles) {
      fs::path f = FindIdx(dir, stem);
      if (f.empty()) continue;
      if (!Inside(fs::canonical(f, ec), croot) || ec) {
        return absl::InvalidArgumentError(absl::StrCat(
            "dataset.idx_dir: ", stem, " resolves outside the allowed dataset roots (symlink)"));
      }
    }
    if (FindIdx(dir, kIdxFiles[0]).empty() || FindIdx(dir, kIdxFiles[1]).empty()) {
      return absl::InvalidArgumentError(
          "dataset.idx_dir: needs train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]");
    }
    return dir;
  }
  return absl::NotFoundError(
      absl::StrCat("dataset.idx_dir: no folder '", rel.substr(0, 64), "' under the dataset roots"));
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
  } else if (arch != "mnist_cnn" && arch != "mlp") {
    return absl::InvalidArgumentError(absl::StrCat(
        "architecture: unknown '", arch.substr(0, 64), "' (known: mnist_cnn, mlp, model:<name>)"));
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
  return ResolveDataset(s.dataset()).status();
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
  KILN_ASSIGN_OR_RETURN(fs::path dir, ResolveDataset(spec.dataset()));
  {
    absl::StatusOr<api::ImageDataset> train = api::LoadIdxDataset(
        FindIdx(dir, kIdxFiles[0]).string(), FindIdx(dir, kIdxFiles[1]).string());
    if (!train.ok()) return absl::InvalidArgumentError(absl::StrCat("train ", train.status().message()));
    run.train = *std::move(train);
    const fs::path ti = FindIdx(dir, kIdxFiles[2]), tl = FindIdx(dir, kIdxFiles[3]);
    if (!ti.empty() && !tl.empty()) {
      absl::StatusOr<api::ImageDataset> test = api::LoadIdxDataset(ti.string(), tl.string());
      if (!test.ok()) return absl::InvalidArgumentError(absl::StrCat("test ", test.status().message()));
      run.test = *std::move(test);
      run.has_test = true;
    }
  }
  // ** model and optimizer **
  api::TrainerSpec ts;
  ts.architecture = spec.architecture();
  ts.seed = spec.seed();
  const int64_t pixels = run.train.item_shape[0] * run.train.item_shape[1];
  RepositoryFiles::OpenFile init_file;  // open until CreateTrainer has read it
  if (ts.architecture.rfind("model:", 0) == 0) {
    const std::string model = ts.architecture.substr(6);
    // Read as the model repository reads it: nothing below the root through a link, bounded.
    const RepositoryFiles files(options_.model_repository, options_.repository_follow_links);
    absl::StatusOr<std::string> text = files.Read(model + "/config.pbtxt", kMaxConfigBytes, "config.pbtxt");
    absl::StatusOr<inference::ModelConfig> cfg =
        text.ok() ? ParseModelConfigText(*text) : absl::StatusOr<inference::ModelConfig>(text.status());
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
  if (ts.architecture == "mlp") {
    ts.mlp_sizes.assign(spec.mlp_sizes().begin(), spec.mlp_sizes().end());
    if (ts.mlp_sizes.empty()) ts.mlp_sizes = {pixels, 128, 10};
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
  std::vector<int64_t> xshape = {spec.batch_size()};
  xshape.insert(xshape.end(), trainer.input_shape().begin(), trainer.input_shape().end());

  // ** resume **
  CheckpointStore ckpts(options_.data_dir / "jobs" / job.id(), 2,
                        absl::StrCat("<data-dir>/jobs/", job.id()));
  std::error_code ec;
  fs::create_directories(ckpts.dir(), ec);
  ckpts.Clean();
  std::mt19937_64 rng(spec.seed());
  int64_t step = 0;
  absl::StatusOr<CheckpointInfo> latest = ckpts.Latest([&](const CheckpointInfo& info) {
    KILN_ASSIGN_OR_RETURN(auto meta, trainer.LoadCheckpoint(info.data.string()));
    int64_t s = 0;
    if (!absl::SimpleAtoi(meta["step"], &s) || s != info.step || meta["job"] != job.id()) {
      return absl::DataLossError("metadata does not match the manifest");
    }
    std::istringstream rs(meta["data_rng"]);
    std::mt19937_64 r;
    rs >> r;
    if (rs.fail()) return absl::DataLossError("data_rng is malformed");
    rng = r;
    step = s;
    return absl::OkStatus();
  });
  if (latest.ok()) {
    spdlog::info("training: job {} resumes from the checkpoint at step {}", job.id(), step);
    job.set_checkpoint_step(step);
  } else if (job.step() > 0) {
    spdlog::warn("training: job {} has no valid checkpoint; starting over", job.id());
  }
  job.set_step(step);

  auto checkpoint = [&]() -> absl::Status {
    std::ostringstream rs;
    rs << rng;
    const std::map<std::string, std::string> meta = {
        {"job", job.id()}, {"step", std::to_string(step)}, {"data_rng", rs.str()},
        {"seed", std::to_string(spec.seed())}, {"format", "kiln-checkpoint-1"}};
    KILN_ASSIGN_OR_RETURN(CheckpointInfo info, ckpts.Save(step, [&](const std::string& tmp) {
                            return trainer.SaveCheckpoint(tmp, meta);
                          }));
    job.set_checkpoint_step(info.step);
    Update(job, JobEvent::CHECKPOINT);
    return absl::OkStatus();
  };
  auto evaluate = [&]() -> absl::Status {
    if (!run.has_test) return absl::OkStatus();
    const int64_t n = spec.eval_images() > 0 ? std::min(spec.eval_images(), run.test.count)
                                             : run.test.count;
    int64_t correct = 0;
    std::string x, y;
    for (int64_t s0 = 0; s0 < n; s0 += kEvalChunk) {
      const int64_t m = std::min(kEvalChunk, n - s0);
      std::vector<int64_t> idx(m);
      for (int64_t i = 0; i < m; ++i) idx[i] = s0 + i;
      Gather(run.test, idx, PixelDivisor(trainer.architecture()), &x, &y);
      std::vector<int64_t> shape = {m};
      shape.insert(shape.end(), trainer.input_shape().begin(), trainer.input_shape().end());
      KILN_ASSIGN_OR_RETURN(std::vector<int32_t> pred, trainer.Predict({"float32", shape, x}));
      const int32_t* yi = reinterpret_cast<const int32_t*>(y.data());
      for (int64_t i = 0; i < m; ++i) correct += pred[i] == yi[i];
    }
    job.set_eval_accuracy(static_cast<double>(correct) / static_cast<double>(n));
    Update(job, JobEvent::EVAL);
    return absl::OkStatus();
  };

  // ** steps **
  std::uniform_int_distribution<int64_t> pick(0, run.train.count - 1);
  std::vector<int64_t> idx(spec.batch_size());
  std::string x, y;
  double ema_seconds = 0;
  while (step < spec.steps()) {
    JobState stop = kiln::v1::RUNNING;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (cancel_running_) {
        stop = kiln::v1::CANCELLED;
      } else if (stopping_) {
        stop = kiln::v1::INTERRUPTED;
      }
    }
    if (stop != kiln::v1::RUNNING) {
      // Stopped between steps: keep the progress, so that a resume continues from here.
      if (step > job.checkpoint_step()) KILN_RETURN_IF_ERROR(checkpoint());
      job.set_state(stop);
      job.set_message(stop == kiln::v1::CANCELLED
                          ? absl::StrCat("cancelled at step ", step, "; ResumeJob continues from there")
                          : absl::StrCat("kilnd stopped; resumes from step ", step));
      return absl::OkStatus();
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t& k : idx) k = pick(rng);
    Gather(run.train, idx, PixelDivisor(trainer.architecture()), &x, &y);
    KILN_ASSIGN_OR_RETURN(float loss, trainer.Step({"float32", xshape, x},
                                                   {"int32", {spec.batch_size()}, y}));
    KILN_RETURN_IF_ERROR(store_->PutLoss(job.id(), step, loss));
    ++step;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ema_seconds = ema_seconds == 0 ? secs : 0.7 * ema_seconds + 0.3 * secs;
    job.set_step(step);
    job.set_loss(loss);
    job.set_examples_per_second(spec.batch_size() / std::max(ema_seconds, 1e-9));
    job.set_eta_seconds(ema_seconds * static_cast<double>(spec.steps() - step));
    if (observer_ != nullptr) {
      observer_->ObserveTrainingStep(job.id(), loss, job.examples_per_second());
    }
    Update(job, JobEvent::STEP);
    if (spec.eval_interval() > 0 && step % spec.eval_interval() == 0 && step < spec.steps()) {
      KILN_RETURN_IF_ERROR(evaluate());
    }
    if (spec.checkpoint_interval() > 0 && step % spec.checkpoint_interval() == 0 &&
        step < spec.steps()) {
      KILN_RETURN_IF_ERROR(checkpoint());
    }
  }
  if (job.checkpoint_step() < step) KILN_RETURN_IF_ERROR(checkpoint());
  KILN_RETURN_IF_ERROR(evaluate());
  return Publish(job, trainer).status();
}

}  // namespace kiln::server
