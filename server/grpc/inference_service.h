// KServe v2 GRPCInferenceService on the gRPC callback API: decodes each call into core structs
// (codec.h), calls InferenceServer, encodes the answer, maps errors with ToGrpcStatus.
// Implemented: ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelInfer,
// ModelStreamInfer, ModelConfig, ModelStatistics, RepositoryIndex, RepositoryModelLoad,
// RepositoryModelUnload, SystemSharedMemory{Status,Register,Unregister}, LogSettings,
// TraceSetting. CUDA shared memory answers UNIMPLEMENTED.
// ModelInfer and ModelStreamInfer never block a gRPC thread on execution: the request is queued
// in the core (InferAsync) and the answer is sent from the core's executor. The client's deadline
// and cancellation reach the engine (a run stops between kernels). On a stream every request gets
// one ModelStreamInferResponse (in request order; the id correlates): a failed request carries
// error_message (plus the id) and the stream stays open. A kiln_llm request is decoupled, as in
// Triton's vLLM backend (InferenceServer::InferStreamAsync): with stream=true it gets one response
// per text delta and an empty final one (parameter triton_final_response), written as they come,
// interleaved with the others'; the end of the call cancels every generation it started. A stream whose client does not read is
// finished with RESOURCE_EXHAUSTED once more answers wait than StreamLimits allow (their memory is
// freed, its running requests cancelled). No exception escapes a handler (server/core/guard.h).
// Thread safety: handlers run concurrently on gRPC's callback threads; `server` is shared.
#pragma once

#include "inference/grpc_service.grpc.pb.h"
#include "server/core/inference_server.h"
#include "server/grpc/call_gate.h"

namespace kiln::server {

// Bounds of one ModelStreamInfer stream's answers waiting to be written.
struct StreamLimits {
  int64_t max_pending_responses = 256;
  int64_t max_pending_bytes = int64_t{64} << 20;
};

class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // `auth` (may be null: every call allowed) gates each call (call_gate.h).
  explicit InferenceService(InferenceServer* server, StreamLimits stream_limits = {},
                            const Authenticator* auth = nullptr)
      : server_(server), stream_limits_(stream_limits), gate_{auth, "/inference.GRPCInferenceService/"} {}

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
  // Triton's system_shared_memory extension (server/core/shared_memory.h).
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;
  // Triton's trace extension (server/core/trace.h).
  grpc::ServerUnaryReactor* TraceSetting(grpc::CallbackServerContext* ctx,
                                         const inference::TraceSettingRequest* request,
                                         inference::TraceSettingResponse* response) override;
  // Triton's logging extension (server/core/log_settings.h).
  grpc::ServerUnaryReactor* LogSettings(grpc::CallbackServerContext* ctx,
                                        const inference::LogSettingsRequest* request,
                                        inference::LogSettingsResponse* response) override;

 private:
  InferenceServer* const server_;
  const StreamLimits stream_limits_;
  const CallGate gate_;
};

}  // namespace kiln::server
