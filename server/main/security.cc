#include "server/main/security.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, api_keys_file, "",
          "file of API keys with roles, one per line: '<infer|admin|metrics>[,...] <sha256-hex of the key> "
          "[label]' (store `printf %s KEY | sha256sum`); clients send 'authorization: Bearer KEY'; "
          "re-read on SIGHUP. Without it every call is allowed and kilnd listens on loopback only "
          "(see --allow-unauthenticated)");
ABSL_FLAG(double, api_key_rate_limit, 0,
          "requests per second one API key may make (a bucket of one second's worth); over it: "
          "RESOURCE_EXHAUSTED / HTTP 429 with Retry-After; 0 = no limit");
ABSL_FLAG(int64_t, api_key_max_concurrent, 0,
          "calls one API key may have in flight at once (unary gRPC and HTTP requests); over it: "
          "RESOURCE_EXHAUSTED / HTTP 429; 0 = no limit");
ABSL_FLAG(bool, allow_unauthenticated, false,
          "with no --api-keys-file, listen on the address flags anyway (default: loopback only)");
ABSL_FLAG(std::string, grpc_restricted_protocol, "",
          "Triton's flag: '<group>[,<group>...]:<header>=<value>': gRPC calls in those protocol groups "
          "(health, metadata, inference, model-config, statistics, model-repository, shared-memory, "
          "trace, logging, kiln-graph, kiln-training) also need that metadata header");
ABSL_FLAG(std::string, http_restricted_api, "",
          "Triton's flag: '<group>[,<group>...]:<header>=<value>': HTTP requests in those groups also "
          "need that header");

ABSL_FLAG(bool, list_endpoints, false,
          "print every gRPC method and REST route with its role and protocol group, and exit");

ABSL_FLAG(bool, grpc_use_ssl, false, "Triton's flag: serve gRPC over TLS (1.2+) with --grpc-server-cert/-key");
ABSL_FLAG(bool, grpc_use_ssl_mutual, false,
          "Triton's flag: gRPC over mutual TLS: clients must present a certificate signed by --grpc-root-cert");
ABSL_FLAG(std::string, grpc_server_cert, "", "PEM certificate chain of the gRPC listener (re-read when it changes)");
ABSL_FLAG(std::string, grpc_server_key, "", "PEM private key of the gRPC listener (re-read when it changes)");
ABSL_FLAG(std::string, grpc_root_cert, "", "PEM CA certificates that sign client certificates (mutual TLS)");

ABSL_FLAG(bool, http_use_ssl, false, "serve the REST gateway over TLS (1.2+) with --http-server-cert/-key");
ABSL_FLAG(bool, http_use_ssl_mutual, false,
          "REST over mutual TLS: clients must present a certificate signed by --http-root-cert");
ABSL_FLAG(std::string, http_server_cert, "", "PEM certificate chain of the HTTP listener (re-read when it changes)");
ABSL_FLAG(std::string, http_server_key, "", "PEM private key of the HTTP listener (re-read when it changes)");
ABSL_FLAG(std::string, http_root_cert, "", "PEM CA certificates that sign HTTP client certificates (mutual TLS)");

namespace kiln::server {

absl::StatusOr<TlsFiles> HttpTlsFromFlags() {
  TlsFiles t;
  const bool mutual = absl::GetFlag(FLAGS_http_use_ssl_mutual);
  t.enabled = absl::GetFlag(FLAGS_http_use_ssl) || mutual;
  if (!t.enabled) return t;
  t.cert = absl::GetFlag(FLAGS_http_server_cert);
  t.key = absl::GetFlag(FLAGS_http_server_key);
  if (mutual) {
    t.client_ca = absl::GetFlag(FLAGS_http_root_cert);
    if (t.client_ca.empty()) return absl::InvalidArgumentError("--http-use-ssl-mutual needs --http-root-cert");
  }
  if (absl::Status s = CheckTlsFiles(t, "--http"); !s.ok()) return s;
  return t;
}

absl::StatusOr<TlsFiles> GrpcTlsFromFlags() {
  TlsFiles t;
  const bool mutual = absl::GetFlag(FLAGS_grpc_use_ssl_mutual);
  t.enabled = absl::GetFlag(FLAGS_grpc_use_ssl) || mutual;
  if (!t.enabled) return t;
  t.cert = absl::GetFlag(FLAGS_grpc_server_cert);
  t.key = absl::GetFlag(FLAGS_grpc_server_key);
  if (mutual) {
    t.client_ca = absl::GetFlag(FLAGS_grpc_root_cert);
    if (t.client_ca.empty()) return absl::InvalidArgumentError("--grpc-use-ssl-mutual needs --grpc-root-cert");
  }
  if (absl::Status s = CheckTlsFiles(t, "--grpc"); !s.ok()) return s;
  return t;
}

bool ListEndpointsIfAsked() {
  if (!absl::GetFlag(FLAGS_list_endpoints)) return false;
  for (const Endpoint& e : Endpoints()) {
    std::printf("%s\t%s\t%s\t%s\n", e.transport == Transport::kGrpc ? "grpc" : "http", std::string(e.name).c_str(),
                std::string(RoleName(e.role)).c_str(), std::string(e.group).c_str());
  }
  return true;
}

absl::StatusOr<Security> SecurityFromFlags() {
  AuthOptions options;
  options.api_keys_file = absl::GetFlag(FLAGS_api_keys_file);
  options.key_rate_limit = std::max(0.0, absl::GetFlag(FLAGS_api_key_rate_limit));
  options.key_max_concurrent = std::max<int64_t>(0, absl::GetFlag(FLAGS_api_key_max_concurrent));
  if (const std::string g = absl::GetFlag(FLAGS_grpc_restricted_protocol); !g.empty()) {
    absl::StatusOr<RestrictedProtocol> r = ParseRestrictedProtocol(g);
    if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat("--grpc-restricted-protocol: ", r.status().message()));
    options.grpc_restricted.push_back(*std::move(r));
  }
  if (const std::string h = absl::GetFlag(FLAGS_http_restricted_api); !h.empty()) {
    absl::StatusOr<RestrictedProtocol> r = ParseRestrictedProtocol(h);
    if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat("--http-restricted-api: ", r.status().message()));
    options.http_restricted.push_back(*std::move(r));
  }
  absl::StatusOr<std::unique_ptr<Authenticator>> auth = Authenticator::Create(std::move(options));
  if (!auth.ok()) return auth.status();
  Security s;
  s.auth = *std::move(auth);
  if (s.auth->keys_enabled()) {
    spdlog::info("kilnd: API keys from --api-keys-file ({} keys); every call needs a key with its role",
                 s.auth->key_count());
  } else if (absl::GetFlag(FLAGS_allow_unauthenticated)) {
    spdlog::warn("kilnd: no --api-keys-file and --allow-unauthenticated: anyone who reaches a port may "
                 "load models, run graphs and start training jobs");
  } else {
    s.forced_address = "127.0.0.1";
    spdlog::warn("kilnd: no --api-keys-file: listening on loopback (127.0.0.1) only; give --api-keys-file, "
                 "or --allow-unauthenticated to listen on the address flags without keys");
  }
  return s;
}

std::string ListenAddress(const Security& security, const std::string& flag_value, const char* listener) {
  const bool loopback = flag_value == "localhost" || flag_value == "::1" || flag_value.rfind("127.", 0) == 0;
  if (security.forced_address.empty() || loopback) {
    return flag_value;
  }
  spdlog::info("kilnd: {} listens on {} instead of {} (no API keys)", listener, security.forced_address, flag_value);
  return security.forced_address;
}

}  // namespace kiln::server
