// kiln.v1.Engine on the gRPC callback API (proto/kiln/v1/engine.proto): decodes each call into
// core structs (api::GraphSpec, GraphTensorIn), calls InferenceServer::graphs(), encodes the
// outputs and per-kernel timings, maps errors with ToGrpcStatus. The request's `device` is honoured
// (INVALID_ARGUMENT naming `device` when it cannot run graphs); the client's deadline and
// cancellation reach the engine; a response protobuf could not serialize is RESOURCE_EXHAUSTED.
// Thread safety: handlers run concurrently on gRPC's callback threads; `server` is shared.
#pragma once

#include "kiln/v1/engine.grpc.pb.h"
#include "server/core/inference_server.h"
#include "server/grpc/call_gate.h"

namespace kiln::server {

class EngineService final : public kiln::v1::Engine::CallbackService {
 public:
  explicit EngineService(InferenceServer* server, const Authenticator* auth = nullptr)
      : server_(server), gate_{auth, "/kiln.v1.Engine/"} {}

  grpc::ServerUnaryReactor* Execute(grpc::CallbackServerContext* ctx,
                                    const kiln::v1::ExecuteRequest* request,
                                    kiln::v1::ExecuteResponse* response) override;
  grpc::ServerUnaryReactor* RegisterGraph(grpc::CallbackServerContext* ctx,
                                          const kiln::v1::RegisterGraphRequest* request,
                                          kiln::v1::RegisterGraphResponse* response) override;
  grpc::ServerUnaryReactor* ExecuteRegistered(grpc::CallbackServerContext* ctx,
                                              const kiln::v1::ExecuteRegisteredRequest* request,
                                              kiln::v1::ExecuteResponse* response) override;
  grpc::ServerUnaryReactor* ListKernels(grpc::CallbackServerContext* ctx,
                                        const kiln::v1::ListKernelsRequest* request,
                                        kiln::v1::ListKernelsResponse* response) override;

 private:
  InferenceServer* const server_;
  const CallGate gate_;
};

}  // namespace kiln::server
