// GrpcServer: builds and owns the grpc::Server for kilnd: the KServe v2 service, kiln.v1.Engine, kiln.v1.Training, the standard
// health service (grpc.health.v1, SERVING while live) and, only when GrpcServerOptions::reflection
// (kilnd --grpc-reflection), server reflection: off by default, it would list every service to
// anyone who connects.
//
// Lifecycle: Start() binds and serves; SetNotServing() flips health to NOT_SERVING at once (for
// SIGTERM); Shutdown(deadline) stops accepting calls, lets calls in flight finish until the
// deadline, then cancels the rest. Shutdown is idempotent; the destructor calls it with "now".
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"
#include "server/core/inference_server.h"
#include "server/core/tls_files.h"
#include "server/grpc/engine_service.h"
#include "server/grpc/inference_service.h"
#include "server/grpc/training_service.h"

namespace kiln::server {

struct GrpcServerOptions {
  std::string address = "0.0.0.0";  // host part of the listening address
  int port = 8001;                  // 0 = pick a free port (see GrpcServer::port())
  int64_t max_message_bytes = kDefaultMaxRequestBytes;  // receive limit, clamped to INT32_MAX
  int max_concurrent_streams = 1024;                    // per connection
  // A connection that has not sent its preface and first SETTINGS (and, with TLS, finished the
  // TLS handshake) by then is closed; gRPC's own default, 120 s, let idle sockets pile up.
  int handshake_timeout_ms = 10000;
  bool reflection = false;                              // grpc.reflection.v1alpha
  StreamLimits stream_limits;                           // per ModelStreamInfer stream
  const Authenticator* auth = nullptr;                  // gates every call; null = all allowed
  TlsFiles tls;  // enabled: TLS 1.2+ only (mutual when tls.client_ca is set); files re-read on change
};

class GrpcServer {
 public:
  // UNAVAILABLE if the address cannot be bound; INVALID_ARGUMENT for bad TLS files.
  // `jobs` (may be null: kiln.v1.Training answers UNAVAILABLE) serves kiln.v1.Training.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const GrpcServerOptions& options,
                                                           InferenceServer* server,
                                                           JobManager* jobs = nullptr);
  ~GrpcServer();

  int port() const { return port_; }
  void SetNotServing();
  void Shutdown(std::chrono::system_clock::time_point deadline);

 private:
  GrpcServer(InferenceServer* server, JobManager* jobs, StreamLimits stream_limits, const Authenticator* auth)
      : service_(server, stream_limits, auth), engine_service_(server, auth), training_service_(jobs, auth) {}

  InferenceService service_;
  EngineService engine_service_;
  TrainingService training_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace kiln::server
