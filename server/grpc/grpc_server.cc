#include "server/grpc/grpc_server.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace kiln::server {

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const GrpcServerOptions& options,
                                                           InferenceServer* server, JobManager* jobs) {
  grpc::EnableDefaultHealthCheckService(true);
  // Process-wide: the plugin applies to every server built afterwards, so it is only installed
  // when asked for (and stays for later servers of this process).
  if (options.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  std::unique_ptr<GrpcServer> self(new GrpcServer(server, jobs, options.stream_limits));
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.address, ":", options.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &self->port_);
  const int64_t max_bytes = std::clamp<int64_t>(options.max_message_bytes, 0, INT_MAX);
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_bytes));
  builder.SetMaxSendMessageSize(INT_MAX);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  builder.RegisterService(&self->service_);
  builder.RegisterService(&self->engine_service_);
  builder.RegisterService(&self->training_service_);
  self->server_ = builder.BuildAndStart();
  if (self->server_ == nullptr || self->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("gRPC: cannot listen on ", address));
  }
  if (auto* health = self->server_->GetHealthCheckService()) {
    health->SetServingStatus(true);
    health->SetServingStatus("inference.GRPCInferenceService", true);
    health->SetServingStatus("kiln.v1.Engine", true);
  }
  return self;
}

GrpcServer::~GrpcServer() { Shutdown(std::chrono::system_clock::now()); }

void GrpcServer::SetNotServing() {
  if (server_ == nullptr) return;
  if (auto* health = server_->GetHealthCheckService()) health->Shutdown();
}

void GrpcServer::Shutdown(std::chrono::system_clock::time_point deadline) {
  if (server_ == nullptr || shut_down_) return;
  shut_down_ = true;
  SetNotServing();
  server_->Shutdown(deadline);
  server_->Wait();
}

}  // namespace kiln::server
