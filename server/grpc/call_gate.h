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

  absl::Status Check(const grpc::ServerContextBase& ctx, std::string_view rpc) const {
    if (auth == nullptr) return absl::OkStatus();
    const std::string method = std::string(service) + std::string(rpc);
    return auth->Check(Transport::kGrpc, method, &ctx,
                       +[](const void* c, std::string_view name) -> std::string_view {
                         const auto& md = static_cast<const grpc::ServerContextBase*>(c)->client_metadata();
                         auto it = md.find(grpc::string_ref(name.data(), name.size()));
                         return it == md.end() ? std::string_view()
                                               : std::string_view(it->second.data(), it->second.size());
                       });
  }
};

template <typename Fn>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const CallGate& gate, const char* rpc,
                                Fn&& fn) {
  if (absl::Status denied = gate.Check(*ctx, rpc); !denied.ok()) {
    spdlog::debug("{} refused: {}", rpc, std::string(denied.message()));
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(denied));
    return reactor;
  }
  return Unary(ctx, rpc, std::forward<Fn>(fn));
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
