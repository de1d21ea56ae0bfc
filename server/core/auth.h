// Who may call what (issue #23): API keys with roles, and Triton's restricted protocols.
//
// The endpoint table (Endpoints()) is the one place that gives every gRPC method and REST route
// of kilnd exactly one role and one Triton protocol group; the transports look a call up by its
// name and ask the Authenticator. Roles:
//   infer    inference, metadata, health, model config and statistics
//   admin    repository load/unload, training jobs, kiln.v1 raw graphs (everything that makes
//            kilnd compile or run caller-supplied work or change what it serves)
//   metrics  the Prometheus endpoint
//   public   only grpc.health.v1 (gRPC's own health service, for load-balancer probes; it says
//            SERVING or not and nothing else)
// A few request parameters need more than their call's role; they have rows of their own, named
// "<call> parameters.<name>" (the KServe infer calls' "... parameters.kiln_viz", admin: recording
// the request for /viz), which the transport checks with Authorize once it has decoded the request.
// Keys: a file (--api-keys-file) of lines "<roles> <sha256-hex of the key> [label]", roles a
// comma list of infer/admin/metrics, '#' comments; only hashes are stored, compared in constant
// time. Clients send "authorization: Bearer <key>" (gRPC metadata or HTTP header). Reload()
// re-reads the file (kilnd: SIGHUP); a file that fails to parse keeps the previous keys.
// Restricted protocols (Triton's --grpc-restricted-protocol / --http-restricted-api,
// "<group>[,<group>...]:<header>=<value>"): calls in those groups also need that header.
// With no key file, every call is allowed (kilnd then listens on loopback only unless
// --allow-unauthenticated). Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace kiln::server {

enum class Role : uint8_t { kPublic = 0, kInfer = 1, kAdmin = 2, kMetrics = 4 };
std::string_view RoleName(Role role);

enum class Transport : uint8_t { kGrpc, kHttp };

struct Endpoint {
  Transport transport;
  std::string_view name;   // gRPC: "/package.Service/Method"; HTTP: "METHOD /path/{pattern}"
  Role role;
  std::string_view group;  // Triton protocol group: health, metadata, inference, model-config,
                           // statistics, model-repository, shared-memory, trace, logging,
                           // kiln-graph, kiln-training, metrics, kiln-viz (profiles, /viz)
};

absl::Span<const Endpoint> Endpoints();
// The table row of `name` on `transport`; null when there is none.
const Endpoint* FindEndpoint(Transport transport, std::string_view name);

struct RestrictedProtocol {
  std::vector<std::string> groups;
  std::string header;  // lower case
  std::string value;
};
// Parses Triton's "<group>[,<group>...]:<key>=<value>"; INVALID_ARGUMENT naming the flag text.
absl::StatusOr<RestrictedProtocol> ParseRestrictedProtocol(std::string_view text);

struct AuthOptions {
  std::string api_keys_file;  // "" = no keys: every call allowed
  // Per API key (0 = no limit): requests per second (a token bucket holding one second's worth)
  // and calls in flight at once. Over either: RESOURCE_EXHAUSTED / HTTP 429 with Retry-After.
  double key_rate_limit = 0;
  int64_t key_max_concurrent = 0;
  std::vector<RestrictedProtocol> grpc_restricted;
  std::vector<RestrictedProtocol> http_restricted;
};

// Looks up a request header / metadata value by lower-case name; "" when absent.
using HeaderLookup = std::string_view (*)(const void* request, std::string_view name);

class Authenticator {
 public:
  // INVALID_ARGUMENT when the key file cannot be read or parsed (the message names the line).
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(AuthOptions options);

  bool keys_enabled() const;
  size_t key_count() const;
  // Re-reads the key file; on error the previous keys stay and the error is returned.
  absl::Status Reload();

  // OK, UNAUTHENTICATED (no or unknown key, for an endpoint that needs one) or PERMISSION_DENIED
  // (the key lacks the endpoint's role, or a restricted-protocol header is missing or wrong);
  // the message names the endpoint and the role or header. `header(request, name)` reads the
  // request's headers. A name not in the table is refused (PERMISSION_DENIED).
  absl::Status Check(Transport transport, std::string_view endpoint, const void* request,
                     HeaderLookup header) const;
  // Check's role and restricted-protocol tests alone, not counted against the key's limits: for a
  // parameter row ("... parameters.kiln_viz") of a call already admitted.
  absl::Status Authorize(Transport transport, std::string_view endpoint, const void* request,
                         HeaderLookup header) const;

  // Check, then the key's limits: a permit the caller holds while the call runs (it counts against
  // key_max_concurrent until released; null when no key limit applies), or RESOURCE_EXHAUSTED
  // naming the key's label and the limit. `retry_after_s` (may be null) gets the seconds a client
  // should wait (HTTP Retry-After).
  using Permit = std::shared_ptr<void>;
  absl::StatusOr<Permit> Admit(Transport transport, std::string_view endpoint, const void* request,
                               HeaderLookup header, int* retry_after_s = nullptr) const;

  // Calls refused so far, by reason: unauthenticated, permission, rate, concurrency.
  struct Refusals {
    uint64_t unauthenticated = 0, permission = 0, rate = 0, concurrency = 0;
  };
  Refusals refusals() const;

  // The roles of `key` (a bitmask of Role), 0 when unknown. For the metrics port's basic auth.
  uint8_t RolesOf(std::string_view key) const;

 private:
  explicit Authenticator(AuthOptions options) : options_(std::move(options)) {}
  struct KeyEntry {
    uint8_t roles = 0;
    std::string label;  // third column of the file (never the key); "" = the hash's first 8 digits
  };
  struct Usage {
    double tokens = 0;
    int64_t last_ns = 0;  // steady clock
    int64_t in_flight = 0;
  };
  static absl::StatusOr<std::map<std::string, KeyEntry>> ReadKeys(const std::string& path);
  // The stored hash `key` matches (compared in constant time with every entry); "" when none.
  std::string MatchKey(std::string_view key, KeyEntry* entry) const;
  absl::Status CheckKey(const Endpoint& e, std::string_view authorization, std::string* hash, KeyEntry* entry) const;
  // The endpoint's restricted-protocol headers and role; `hash` gets the caller's key hash ("" when
  // no key was needed). Counts refusals.
  absl::Status CheckAccess(Transport transport, std::string_view endpoint, const void* request,
                           HeaderLookup header, std::string* hash, KeyEntry* entry) const;

  const AuthOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, KeyEntry> keys_ ABSL_GUARDED_BY(mu_);  // sha256 hex -> roles, label
  mutable std::map<std::string, Usage> usage_ ABSL_GUARDED_BY(mu_);
  mutable Refusals refusals_ ABSL_GUARDED_BY(mu_);
};

// Lower-case hex SHA-256 of `key` (what the key file stores).
std::string HashApiKey(std::string_view key);

}  // namespace kiln::server
