// The one mapping from absl::Status (the core's error type) to grpc::Status. Codes carry over
// one to one (both follow google.rpc.Code); the message passes through unchanged, so it must
// already be safe to show a client (names the field and limit, no internal paths).
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace kiln::server {

grpc::StatusCode ToGrpcCode(absl::StatusCode code);
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace kiln::server
