// The one mapping from absl::Status (the core's error type) to grpc::Status. Codes carry over
// one to one (both follow google.rpc.Code); the message passes through unchanged, so it must
// already be safe to show a client (names the field and limit, no internal paths).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/api/engine.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/status.h"
#include "server/core/guard.h"
#include "spdlog/spdlog.h"

namespace kiln::server {

grpc::StatusCode ToGrpcCode(absl::StatusCode code);
grpc::Status ToGrpcStatus(const absl::Status& status);

// The client's deadline of a call (InfiniteFuture when it set none).
absl::Time CallDeadline(const grpc::ServerContextBase& ctx);
// A token that reports the call cancelled (the client went away or its deadline passed). The
// token may only be polled while the call is unfinished.
std::shared_ptr<const api::CancellationToken> CallCancellation(grpc::CallbackServerContext* ctx);

// RESOURCE_EXHAUSTED when `response` cannot be serialized (protobuf's 2 GiB limit, or more than
// `limit` bytes); gRPC would assert on it. The engine refuses such outputs before running; this is
// the last line.
absl::Status CheckResponseSize(const google::protobuf::Message& response, int64_t limit);

// Runs `fn` (returning absl::Status) and finishes a unary callback RPC with its mapped status. An
// exception escaping `fn` answers INTERNAL with a request id (server/core/guard.h).
template <typename Fn>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const char* rpc, Fn&& fn) {
  absl::Status status = Guard(rpc, [&]() -> absl::Status { return fn(); });
  if (!status.ok()) {
    spdlog::debug("{} failed: {} {}", rpc, absl::StatusCodeToString(status.code()),
                  std::string(status.message()));
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace kiln::server
