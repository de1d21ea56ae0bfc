#include "server/grpc/training_service.h"

#include <deque>
#include <memory>
#include <mutex>

#include "engine/api/status.h"
#include "server/grpc/status_map.h"

namespace kiln::server {
namespace {

constexpr size_t kMaxPendingEvents = 256;

absl::Status NoJobs() {
  return absl::UnavailableError("training jobs need kilnd --data-dir");
}

// Streams JobEvents: the first is the job's state when the call starts.
class WatchReactor final : public grpc::ServerWriteReactor<kiln::v1::JobEvent> {
 public:
  WatchReactor(JobManager* jobs, const std::string& id) : jobs_(jobs) {
    absl::Status st = Guard("WatchJob", [&]() -> absl::Status {
      Start(id);
      return absl::OkStatus();
    });
    if (!st.ok()) Stop(ToGrpcStatus(st));
  }

  void Start(const std::string& id) {
    if (jobs_ == nullptr) {
      Stop(ToGrpcStatus(NoJobs()));
      return;
    }
    absl::StatusOr<uint64_t> token =
        jobs_->Subscribe(id, [this](const kiln::v1::JobEvent& e) { Push(e); });
    if (!token.ok()) {
      Stop(ToGrpcStatus(token.status()));
      return;
    }
    token_ = *token;
    subscribed_ = true;
    absl::StatusOr<kiln::v1::Job> job = jobs_->Get(id);
    if (!job.ok()) {
      Stop(ToGrpcStatus(job.status()));
      return;
    }
    kiln::v1::JobEvent first;
    first.set_kind(kiln::v1::JobEvent::STATE);
    *first.mutable_job() = *job;
    Push(first);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> l(mu_);
    writing_ = false;
    if (!ok || stop_requested_) {
      FinishLocked(ok ? stop_status_ : grpc::Status::CANCELLED);
      return;
    }
    queue_.pop_front();
    WriteNextLocked();
  }
  void OnCancel() override { Stop(grpc::Status::CANCELLED); }
  void OnDone() override {
    if (subscribed_) jobs_->Unsubscribe(token_);  // no Push runs after this returns
    delete this;
  }

 private:
  void Push(const kiln::v1::JobEvent& e) {
    std::lock_guard<std::mutex> l(mu_);
    if (finished_) return;
    if (queue_.size() >= kMaxPendingEvents && e.kind() == kiln::v1::JobEvent::STEP) return;
    queue_.push_back(e);
    WriteNextLocked();
  }
  void WriteNextLocked() {
    if (writing_ || finished_) return;
    if (queue_.empty()) {
      if (ended_) StopLocked(grpc::Status::OK);
      return;
    }
    const kiln::v1::JobEvent& e = queue_.front();
    if (e.kind() == kiln::v1::JobEvent::STATE && JobManager::IsTerminal(e.job().state())) {
      ended_ = true;
    }
    if (e.kind() == kiln::v1::JobEvent::STATE && e.job().state() == kiln::v1::INTERRUPTED) {
      ended_ = true;
    }
    writing_ = true;
    StartWrite(&queue_.front());
  }
  void Stop(const grpc::Status& st) {
    std::lock_guard<std::mutex> l(mu_);
    StopLocked(st);
  }
  // Finishes now, or after the write in flight completes.
  void StopLocked(const grpc::Status& st) {
    if (writing_) {
      stop_requested_ = true;
      stop_status_ = st;
      return;
    }
    FinishLocked(st);
  }
  void FinishLocked(const grpc::Status& st) {
    if (finished_) return;
    finished_ = true;
    Finish(st);
  }

  JobManager* const jobs_;
  uint64_t token_ = 0;
  bool subscribed_ = false;
  std::mutex mu_;
  std::deque<kiln::v1::JobEvent> queue_;
  bool writing_ = false, finished_ = false, ended_ = false, stop_requested_ = false;
  grpc::Status stop_status_;
};

class UploadReactor final : public grpc::ServerReadReactor<kiln::v1::DatasetChunk> {
 public:
  UploadReactor(JobManager* jobs, kiln::v1::UploadDatasetResponse* response)
      : response_(response) {
    absl::Status st = Guard("UploadDataset", [&]() -> absl::Status {
      Start(jobs);
      return absl::OkStatus();
    });
    if (!st.ok()) FinishOnce(ToGrpcStatus(st));
  }
  void Start(JobManager* jobs) {
    if (jobs == nullptr) {
      FinishOnce(ToGrpcStatus(NoJobs()));
      return;
    }
    absl::StatusOr<std::unique_ptr<JobManager::Upload>> up = jobs->BeginUpload();
    if (!up.ok()) {
      FinishOnce(ToGrpcStatus(up.status()));
      return;
    }
    upload_ = *std::move(up);
    StartRead(&chunk_);
  }
  void OnReadDone(bool ok) override {
    absl::Status st = Guard("UploadDataset", [&]() -> absl::Status {
      if (!ok) {  // the client finished sending
        absl::StatusOr<kiln::v1::UploadDatasetResponse> r = upload_->Finish();
        if (r.ok()) *response_ = *r;
        FinishOnce(ToGrpcStatus(r.status()));
        return absl::OkStatus();
      }
      if (absl::Status append = upload_->Append(chunk_); !append.ok()) {
        FinishOnce(ToGrpcStatus(append));
        return absl::OkStatus();
      }
      StartRead(&chunk_);
      return absl::OkStatus();
    });
    if (!st.ok()) FinishOnce(ToGrpcStatus(st));
  }
  void OnCancel() override {}
  void OnDone() override { delete this; }

 private:
  void FinishOnce(const grpc::Status& st) {
    if (finished_) return;
    finished_ = true;
    Finish(st);
  }
  bool finished_ = false;  // touched by the constructor and the read chain only (one at a time)
  kiln::v1::UploadDatasetResponse* response_;
  std::unique_ptr<JobManager::Upload> upload_;
  kiln::v1::DatasetChunk chunk_;
};

// Streams one checkpoint file: metadata with the first piece, then kCheckpointPiece bytes per
// message; reads the next piece only when the previous write completed.
class CheckpointReactor final : public grpc::ServerWriteReactor<kiln::v1::CheckpointChunk> {
 public:
  CheckpointReactor(JobManager* jobs, const std::string& id) {
    if (jobs == nullptr) {
      Finish(ToGrpcStatus(NoJobs()));
      return;
    }
    absl::StatusOr<std::unique_ptr<JobManager::CheckpointFile>> file = jobs->OpenCheckpoint(id);
    if (!file.ok()) {
      Finish(ToGrpcStatus(file.status()));
      return;
    }
    file_ = *std::move(file);
    chunk_.set_step(file_->step());
    chunk_.set_bytes(static_cast<int64_t>(file_->bytes()));
    chunk_.set_sha256(file_->sha256());
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    chunk_.Clear();
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (started_ && offset_ >= file_->bytes()) {
      Finish(grpc::Status::OK);
      return;
    }
    absl::StatusOr<size_t> got = file_->Read(offset_, kCheckpointPiece, chunk_.mutable_data());
    if (!got.ok()) {
      Finish(ToGrpcStatus(got.status()));
      return;
    }
    if (*got == 0 && offset_ < file_->bytes()) {
      Finish(ToGrpcStatus(absl::DataLossError("checkpoint: the file ended early")));
      return;
    }
    offset_ += *got;
    started_ = true;
    StartWrite(&chunk_);
  }

  static constexpr size_t kCheckpointPiece = 1 << 20;
  std::unique_ptr<JobManager::CheckpointFile> file_;
  kiln::v1::CheckpointChunk chunk_;
  uint64_t offset_ = 0;
  bool started_ = false;  // the first message (with the metadata) was written
};

}  // namespace

grpc::ServerUnaryReactor* TrainingService::StartJob(grpc::CallbackServerContext* ctx,
                                                    const kiln::v1::StartJobRequest* request,
                                                    kiln::v1::Job* response) {
  return Unary(ctx, gate_, "StartJob", [&]() -> absl::Status {
    if (jobs_ == nullptr) return NoJobs();
    KILN_ASSIGN_OR_RETURN(*response, jobs_->Start(request->spec()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TrainingService::GetJob(grpc::CallbackServerContext* ctx,
                                                  const kiln::v1::GetJobRequest* request,
                                                  kiln::v1::Job* response) {
  return Unary(ctx, gate_, "GetJob", [&]() -> absl::Status {
    if (jobs_ == nullptr) return NoJobs();
    KILN_ASSIGN_OR_RETURN(*response, jobs_->Get(request->id(), request->include_losses()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TrainingService::ListJobs(grpc::CallbackServerContext* ctx,
                                                    const kiln::v1::ListJobsRequest*,
                                                    kiln::v1::ListJobsResponse* response) {
  return Unary(ctx, gate_, "ListJobs", [&]() -> absl::Status {
    if (jobs_ == nullptr) return NoJobs();
    for (kiln::v1::Job& j : jobs_->List()) *response->add_jobs() = std::move(j);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TrainingService::CancelJob(grpc::CallbackServerContext* ctx,
                                                     const kiln::v1::CancelJobRequest* request,
                                                     kiln::v1::Job* response) {
  return Unary(ctx, gate_, "CancelJob", [&]() -> absl::Status {
    if (jobs_ == nullptr) return NoJobs();
    KILN_ASSIGN_OR_RETURN(*response, jobs_->Cancel(request->id()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TrainingService::ResumeJob(grpc::CallbackServerContext* ctx,
                                                     const kiln::v1::ResumeJobRequest* request,
                                                     kiln::v1::Job* response) {
  return Unary(ctx, gate_, "ResumeJob", [&]() -> absl::Status {
    if (jobs_ == nullptr) return NoJobs();
    KILN_ASSIGN_OR_RETURN(*response, jobs_->Resume(request->id()));
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<kiln::v1::JobEvent>* TrainingService::WatchJob(
    grpc::CallbackServerContext* ctx, const kiln::v1::WatchJobRequest* request) {
  if (absl::Status denied = gate_.Check(*ctx, "WatchJob"); !denied.ok()) {
    return new RefusedWriter<kiln::v1::JobEvent>(denied);
  }
  return new WatchReactor(jobs_, request->id());
}

grpc::ServerReadReactor<kiln::v1::DatasetChunk>* TrainingService::UploadDataset(
    grpc::CallbackServerContext* ctx, kiln::v1::UploadDatasetResponse* response) {
  if (absl::Status denied = gate_.Check(*ctx, "UploadDataset"); !denied.ok()) {
    return new RefusedReader<kiln::v1::DatasetChunk>(denied);
  }
  return new UploadReactor(jobs_, response);
}

grpc::ServerWriteReactor<kiln::v1::CheckpointChunk>* TrainingService::GetCheckpoint(
    grpc::CallbackServerContext* ctx, const kiln::v1::GetCheckpointRequest* request) {
  if (absl::Status denied = gate_.Check(*ctx, "GetCheckpoint"); !denied.ok()) {
    return new RefusedWriter<kiln::v1::CheckpointChunk>(denied);
  }
  return new CheckpointReactor(jobs_, request->id());
}

}  // namespace kiln::server
