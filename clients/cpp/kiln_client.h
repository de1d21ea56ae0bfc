// KilnClient: a blocking C++ client for kilnd over gRPC — the KServe v2 service
// (inference.GRPCInferenceService), kiln's graph service (kiln.v1.Engine) and training jobs
// (kiln.v1.Training, served when kilnd runs with --data-dir) — on the generated stubs. Every call returns absl::Status carrying the server's code and message unchanged.
// Thread safety: one client may be used from several threads (gRPC stubs are thread-safe).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clients/cpp/npy.h"
#include "inference/grpc_service.grpc.pb.h"
#include "kiln/v1/engine.grpc.pb.h"
#include "kiln/v1/training.grpc.pb.h"

namespace kiln::client {

struct NamedTensor {
  std::string name;
  NpyArray array;
};

class KilnClient {
 public:
  // `address` is host:port of kilnd's gRPC port. Calls time out after `timeout`.
  explicit KilnClient(const std::string& address,
                      std::chrono::milliseconds timeout = std::chrono::seconds(60));

  absl::StatusOr<bool> ServerLive();
  absl::StatusOr<bool> ServerReady();
  absl::StatusOr<inference::ServerMetadataResponse> ServerMetadata();
  absl::StatusOr<inference::RepositoryIndexResponse> RepositoryIndex();
  absl::Status Load(const std::string& model);
  absl::Status Unload(const std::string& model);
  absl::StatusOr<inference::ModelStatisticsResponse> Statistics(const std::string& model);
  // Sends every input raw; returns every output (or only `outputs` when given) in server order.
  absl::StatusOr<std::vector<NamedTensor>> Infer(const std::string& model,
                                                 const std::vector<NamedTensor>& inputs,
                                                 const std::vector<std::string>& outputs = {});
  absl::StatusOr<kiln::v1::ExecuteResponse> Execute(const kiln::v1::ExecuteRequest& request);

  // kiln.v1.Training. UNAVAILABLE when kilnd runs without --data-dir.
  absl::StatusOr<kiln::v1::Job> StartJob(const kiln::v1::JobSpec& spec);
  absl::StatusOr<kiln::v1::Job> GetJob(const std::string& id, bool include_losses = false);
  absl::StatusOr<kiln::v1::ListJobsResponse> ListJobs();
  absl::StatusOr<kiln::v1::Job> CancelJob(const std::string& id);
  absl::StatusOr<kiln::v1::Job> ResumeJob(const std::string& id);
  // Streams WatchJob with no deadline, calling `on_event` for each event on the calling thread,
  // until the server ends the stream (the job ended) or `on_event` returns false. Returns the
  // stream's final status (OK when the server ended it normally or the caller stopped).
  absl::Status WatchJob(const std::string& id,
                        const std::function<bool(const kiln::v1::JobEvent&)>& on_event);
  // Streams GetCheckpoint: `on_chunk` gets each piece in order (the first carries step, bytes
  // and sha256) and may return an error to stop. Returns the stream's status, or that error.
  absl::Status GetCheckpoint(
      const std::string& id,
      const std::function<absl::Status(const kiln::v1::CheckpointChunk&)>& on_chunk);

 private:
  std::unique_ptr<grpc::ClientContext> Context() const;

  std::chrono::milliseconds timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> inference_;
  std::unique_ptr<kiln::v1::Engine::Stub> engine_;
  std::unique_ptr<kiln::v1::Training::Stub> training_;
};

}  // namespace kiln::client
