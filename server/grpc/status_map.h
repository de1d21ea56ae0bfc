// The one mapping from absl::Status (the core's error type) to grpc::Status. Codes carry over
// one to one (both follow google.rpc.Code); the message passes through unchanged, so it must
// already be safe to show a client (names the field and limit, no internal paths).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/status.h"
#include "spdlog/spdlog.h"

namespace kiln::server {

grpc::StatusCode ToGrpcCode(absl::StatusCode code);
grpc::Status ToGrpcStatus(const absl::Status& status);

// Runs `fn` (returning absl::Status) and finishes a unary callback RPC with its mapped status.
template <typename Fn>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const char* rpc, Fn&& fn) {
  absl::Status status = fn();
  if (!status.ok()) {
    spdlog::debug("{} failed: {} {}", rpc, absl::StatusCodeToString(status.code()),
                  std::string(status.message()));
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace kiln::server
