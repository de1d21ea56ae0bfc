// kilnd's security flags (issue #23): API keys and roles, Triton's restricted protocols, and the
// rule that an unauthenticated kilnd listens on loopback only. Read once at start-up by main.cc.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/auth.h"
#include "server/core/tls_files.h"

namespace kiln::server {

struct Security {
  std::unique_ptr<Authenticator> auth;
  // Set when kilnd has no API keys and no --allow-unauthenticated: every listener binds here
  // (loopback) instead of its address flag.
  std::string forced_address;
  TlsFiles http_tls;  // HttpTlsFromFlags
};

// --list-endpoints: prints the endpoint table (transport, name, role, group; tab-separated) to
// stdout and returns true (kilnd then exits 0).
bool ListEndpointsIfAsked();
// Triton's --grpc-use-ssl[-mutual], --grpc-server-cert/-key, --grpc-root-cert; INVALID_ARGUMENT
// naming the flag when a file is missing, unreadable or does not match.
absl::StatusOr<TlsFiles> GrpcTlsFromFlags();
// The --http-* twins (--http-use-ssl[-mutual], --http-server-cert/-key, --http-root-cert).
absl::StatusOr<TlsFiles> HttpTlsFromFlags();
// INVALID_ARGUMENT for an unreadable key file or a malformed restricted-protocol flag.
absl::StatusOr<Security> SecurityFromFlags();
// The address a listener binds: `flag_value`, or loopback when forced (logged once per call).
std::string ListenAddress(const Security& security, const std::string& flag_value, const char* listener);

}  // namespace kiln::server
