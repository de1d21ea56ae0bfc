// CallGate: the auth check every kilnd gRPC handler runs first (server/core/auth.h). A service
// holds one with its full name ("/inference.GRPCInferenceService/"); Check looks the method up in
// the endpoint table and reads "authorization" and the restricted-protocol headers from the
// call's metadata. The Refused* reactors finish a streaming call that failed the check.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "server/core/auth.h"
#include "server/grpc/status_map.h"

namespace kiln::server {

struct CallGate {
  const Authenticator* auth = nullptr;  // null: every call allowed (tests, embedders)
  std::string_view service;             // "/package.Service/"

  // The auth check and the key's limits; the permit counts the call in flight until dropped.
  absl::StatusOr<Authenticator::Permit> Admit(const grpc::ServerContextBase& ctx, std::string_view rpc) const {
    if (auth == nullptr) return Authenticator::Permit();
    const std::string method = std::string(service) + std::string(rpc);
    return auth->Admit(Transport::kGrpc, method, &ctx, &Metadata);
  }
  // A request parameter's own row, `rpc` + " parameters.<name>" (auth.h), for a call already
  // admitted: PERMISSION_DENIED naming the row when the caller's key lacks its role.
  absl::Status Authorize(const grpc::ServerContextBase& ctx, std::string_view rpc_parameter) const {
    if (auth == nullptr) return absl::OkStatus();
    const std::string row = std::string(service) + std::string(rpc_parameter);
    return auth->Authorize(Transport::kGrpc, row, &ctx, &Metadata);
  }
  static std::string_view Metadata(const void* c, std::string_view name) {
    const auto& md = static_cast<const grpc::ServerContextBase*>(c)->client_metadata();
    auto it = md.find(grpc::string_ref(name.data(), name.size()));
    return it == md.end() ? std::string_view()
                          : std::string_view(it->second.data(), it->second.size());
  }
  // Admit for calls that do not hold a permit (streams: counted against the rate when opened).
  absl::Status Check(const grpc::ServerContextBase& ctx, std::string_view rpc) const {
    return Admit(ctx, rpc).status();
  }
};

template <typename Fn>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const CallGate& gate, const char* rpc,
                                Fn&& fn) {
  absl::StatusOr<Authenticator::Permit> permit = gate.Admit(*ctx, rpc);
  if (!permit.ok()) {
    spdlog::debug("{} refused: {}", rpc, std::string(permit.status().message()));
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(permit.status()));
    return reactor;
  }
  return Unary(ctx, rpc, std::forward<Fn>(fn));  // `permit` held until the answer is sent
}

template <typename Req, typename Resp>
class RefusedBidi final : public grpc::ServerBidiReactor<Req, Resp> {
 public:
  explicit RefusedBidi(const absl::Status& s) { this->Finish(ToGrpcStatus(s)); }
  void OnDone() override { delete this; }
};

template <typename Resp>
class RefusedWriter final : public grpc::ServerWriteReactor<Resp> {
 public:
  explicit RefusedWriter(const absl::Status& s) { this->Finish(ToGrpcStatus(s)); }
  void OnDone() override { delete this; }
};

template <typename Req>
class RefusedReader final : public grpc::ServerReadReactor<Req> {
 public:
  explicit RefusedReader(const absl::Status& s) { this->Finish(ToGrpcStatus(s)); }
  void OnDone() override { delete this; }
};

}  // namespace kiln::server
