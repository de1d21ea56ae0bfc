// KServe v2 GRPCInferenceService on the gRPC callback API: decodes each call into core structs
// (codec.h), calls InferenceServer, encodes the answer, maps errors with ToGrpcStatus.
// Implemented: ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelInfer,
// ModelStreamInfer, ModelConfig, ModelStatistics, RepositoryIndex, RepositoryModelLoad,
// RepositoryModelUnload. The rest (shared memory, trace, log settings) answer UNIMPLEMENTED.
// ModelInfer and ModelStreamInfer never block a gRPC thread on execution: the request is queued
// in the core (InferAsync) and the answer is sent from the core's executor. On a stream every
// request gets one ModelStreamInferResponse (in completion order; the id correlates): a failed
// request carries error_message (plus the id) and the stream stays open.
// Thread safety: handlers run concurrently on gRPC's callback threads; `server` is shared.
#pragma once

#include "inference/grpc_service.grpc.pb.h"
#include "server/core/inference_server.h"

namespace kiln::server {

class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  explicit InferenceService(InferenceServer* server) : server_(server) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* ctx,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* ctx,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* ctx,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelLoad(
      grpc::CallbackServerContext* ctx, const inference::RepositoryModelLoadRequest* request,
      inference::RepositoryModelLoadResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* ctx, const inference::RepositoryModelUnloadRequest* request,
      inference::RepositoryModelUnloadResponse* response) override;

 private:
  InferenceServer* const server_;
};

}  // namespace kiln::server
