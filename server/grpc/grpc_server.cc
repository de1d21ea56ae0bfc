#include "server/grpc/grpc_server.h"

#include <algorithm>
#include <climits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "grpcpp/server_builder.h"

namespace kiln::server {
namespace {

// Linking grpc++_reflection registers its plugin for every server at static initialization, so
// reflection is on unless a builder option takes the plugin out again.
class NoReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                                    return p->name() == "proto_server_reflection";
                                  }),
                   plugins->end());
  }
};

// gRPC's TLS credentials over a file watcher: the certificate, key and client CA are re-read when
// they change (new handshakes use them; open connections keep theirs). gRPC core's TLS
// credentials negotiate TLS 1.2 or 1.3 only (its default minimum, tested in test_kilnd_tls.py).
std::shared_ptr<grpc::ServerCredentials> TlsCredentials(const TlsFiles& tls) {
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      tls.key, tls.cert, tls.mutual() ? tls.client_ca : std::string(), kTlsRefreshSeconds);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (tls.mutual()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const GrpcServerOptions& options,
                                                           InferenceServer* server, JobManager* jobs) {
  grpc::EnableDefaultHealthCheckService(true);
  if (options.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  std::unique_ptr<GrpcServer> self(new GrpcServer(server, jobs, options.stream_limits, options.auth));
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.address, ":", options.port);
  if (absl::Status s = CheckTlsFiles(options.tls, "--grpc"); !s.ok()) return s;
  builder.AddListeningPort(address, options.tls.enabled ? TlsCredentials(options.tls) : grpc::InsecureServerCredentials(),
                           &self->port_);
  const int64_t max_bytes = std::clamp<int64_t>(options.max_message_bytes, 0, INT_MAX);
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_bytes));
  builder.SetMaxSendMessageSize(INT_MAX);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             std::max(1, options.handshake_timeout_ms));
  if (!options.reflection) builder.SetOption(std::make_unique<NoReflection>());
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
