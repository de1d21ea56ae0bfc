// kiln.v1.Training on the gRPC callback API (proto/kiln/v1/training.proto): each call goes to
// server/core's JobManager; errors map through ToGrpcStatus. WatchJob streams the job now, then
// every event until the job ends or the client leaves (a slow reader loses intermediate STEP
// events beyond kMaxPendingEvents, never STATE events). UploadDataset reads chunks in order;
// GetCheckpoint streams the newest checkpoint in 1 MiB pieces, one write in flight at a time.
// Without a JobManager (kilnd without --data-dir) every call answers UNAVAILABLE.
#pragma once

#include "kiln/v1/training.grpc.pb.h"
#include "server/core/job_manager.h"
#include "server/grpc/call_gate.h"

namespace kiln::server {

class TrainingService final : public kiln::v1::Training::CallbackService {
 public:
  explicit TrainingService(JobManager* jobs, const Authenticator* auth = nullptr)
      : jobs_(jobs), gate_{auth, "/kiln.v1.Training/"} {}

  grpc::ServerUnaryReactor* StartJob(grpc::CallbackServerContext* ctx,
                                     const kiln::v1::StartJobRequest* request,
                                     kiln::v1::Job* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const kiln::v1::GetJobRequest* request,
                                   kiln::v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const kiln::v1::ListJobsRequest* request,
                                     kiln::v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const kiln::v1::CancelJobRequest* request,
                                      kiln::v1::Job* response) override;
  grpc::ServerUnaryReactor* ResumeJob(grpc::CallbackServerContext* ctx,
                                      const kiln::v1::ResumeJobRequest* request,
                                      kiln::v1::Job* response) override;
  grpc::ServerWriteReactor<kiln::v1::JobEvent>* WatchJob(
      grpc::CallbackServerContext* ctx, const kiln::v1::WatchJobRequest* request) override;
  grpc::ServerReadReactor<kiln::v1::DatasetChunk>* UploadDataset(
      grpc::CallbackServerContext* ctx, kiln::v1::UploadDatasetResponse* response) override;
  grpc::ServerWriteReactor<kiln::v1::CheckpointChunk>* GetCheckpoint(
      grpc::CallbackServerContext* ctx, const kiln::v1::GetCheckpointRequest* request) override;

 private:
  JobManager* const jobs_;
  const CallGate gate_;
};

}  // namespace kiln::server
