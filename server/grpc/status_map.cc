#include "server/grpc/status_map.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace kiln::server {

grpc::StatusCode ToGrpcCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return grpc::StatusCode::OK;
    case absl::StatusCode::kCancelled:
      return grpc::StatusCode::CANCELLED;
    case absl::StatusCode::kUnknown:
      return grpc::StatusCode::UNKNOWN;
    case absl::StatusCode::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case absl::StatusCode::kDeadlineExceeded:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case absl::StatusCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case absl::StatusCode::kAlreadyExists:
      return grpc::StatusCode::ALREADY_EXISTS;
    case absl::StatusCode::kPermissionDenied:
      return grpc::StatusCode::PERMISSION_DENIED;
    case absl::StatusCode::kResourceExhausted:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case absl::StatusCode::kFailedPrecondition:
      return grpc::StatusCode::FAILED_PRECONDITION;
    case absl::StatusCode::kAborted:
      return grpc::StatusCode::ABORTED;
    case absl::StatusCode::kOutOfRange:
      return grpc::StatusCode::OUT_OF_RANGE;
    case absl::StatusCode::kUnimplemented:
      return grpc::StatusCode::UNIMPLEMENTED;
    case absl::StatusCode::kInternal:
      return grpc::StatusCode::INTERNAL;
    case absl::StatusCode::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case absl::StatusCode::kDataLoss:
      return grpc::StatusCode::DATA_LOSS;
    case absl::StatusCode::kUnauthenticated:
      return grpc::StatusCode::UNAUTHENTICATED;
    default:
      return grpc::StatusCode::UNKNOWN;
  }
}

absl::Time CallDeadline(const grpc::ServerContextBase& ctx) {
  const std::chrono::system_clock::time_point deadline = ctx.deadline();
  // gRPC reports "no deadline" as a time far in the future.
  if (deadline >= std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 10)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

std::shared_ptr<const api::CancellationToken> CallCancellation(grpc::CallbackServerContext* ctx) {
  return std::make_shared<const api::CancellationToken>([ctx] { return ctx->IsCancelled(); });
}

absl::Status CheckResponseSize(const google::protobuf::Message& response, int64_t limit) {
  const size_t bytes = response.ByteSizeLong();
  const int64_t cap = std::min<int64_t>(limit > 0 ? limit : INT32_MAX, INT32_MAX);
  if (bytes > static_cast<size_t>(cap)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the response would take ", bytes, " bytes, over the limit of ", cap,
        " bytes per gRPC message (--max-response-bytes; protobuf's hard limit is 2 GiB)"));
  }
  return absl::OkStatus();
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(ToGrpcCode(status.code()), std::string(status.message()));
}

}  // namespace kiln::server
