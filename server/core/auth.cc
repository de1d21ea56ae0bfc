#include "server/core/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

constexpr Transport G = Transport::kGrpc;
constexpr Transport H = Transport::kHttp;
constexpr Role kInfer = Role::kInfer;
constexpr Role kAdmin = Role::kAdmin;

// THE table: every gRPC method and REST route kilnd serves, with its one role and group.
constexpr Endpoint kEndpoints[] = {
    // KServe v2 over gRPC (inference.GRPCInferenceService).
    {G, "/inference.GRPCInferenceService/ServerLive", kInfer, "health"},
    {G, "/inference.GRPCInferenceService/ServerReady", kInfer, "health"},
    {G, "/inference.GRPCInferenceService/ModelReady", kInfer, "health"},
    {G, "/inference.GRPCInferenceService/ServerMetadata", kInfer, "metadata"},
    {G, "/inference.GRPCInferenceService/ModelMetadata", kInfer, "metadata"},
    {G, "/inference.GRPCInferenceService/ModelInfer", kInfer, "inference"},
    {G, "/inference.GRPCInferenceService/ModelStreamInfer", kInfer, "inference"},
    // Request parameters that need more than their call's role (Authorize, checked once decoded).
    {G, "/inference.GRPCInferenceService/ModelInfer parameters.kiln_viz", kAdmin, "kiln-viz"},
    {G, "/inference.GRPCInferenceService/ModelStreamInfer parameters.kiln_viz", kAdmin, "kiln-viz"},
    {G, "/inference.GRPCInferenceService/ModelConfig", kInfer, "model-config"},
    {G, "/inference.GRPCInferenceService/ModelStatistics", kInfer, "statistics"},
    {G, "/inference.GRPCInferenceService/RepositoryIndex", kAdmin, "model-repository"},
    {G, "/inference.GRPCInferenceService/RepositoryModelLoad", kAdmin, "model-repository"},
    {G, "/inference.GRPCInferenceService/RepositoryModelUnload", kAdmin, "model-repository"},
    {G, "/inference.GRPCInferenceService/SystemSharedMemoryStatus", kInfer, "shared-memory"},
    {G, "/inference.GRPCInferenceService/SystemSharedMemoryRegister", kInfer, "shared-memory"},
    {G, "/inference.GRPCInferenceService/SystemSharedMemoryUnregister", kInfer, "shared-memory"},
    {G, "/inference.GRPCInferenceService/CudaSharedMemoryStatus", kInfer, "shared-memory"},
    {G, "/inference.GRPCInferenceService/CudaSharedMemoryRegister", kInfer, "shared-memory"},
    {G, "/inference.GRPCInferenceService/CudaSharedMemoryUnregister", kInfer, "shared-memory"},
    {G, "/inference.GRPCInferenceService/TraceSetting", kAdmin, "trace"},
    {G, "/inference.GRPCInferenceService/LogSettings", kAdmin, "logging"},
    // kiln.v1 raw graphs and training.
    {G, "/kiln.v1.Engine/Execute", kAdmin, "kiln-graph"},
    {G, "/kiln.v1.Engine/RegisterGraph", kAdmin, "kiln-graph"},
    {G, "/kiln.v1.Engine/ExecuteRegistered", kAdmin, "kiln-graph"},
    {G, "/kiln.v1.Engine/ListKernels", kAdmin, "kiln-graph"},
    {G, "/kiln.v1.Training/StartJob", kAdmin, "kiln-training"},
    {G, "/kiln.v1.Training/GetJob", kAdmin, "kiln-training"},
    {G, "/kiln.v1.Training/ListJobs", kAdmin, "kiln-training"},
    {G, "/kiln.v1.Training/CancelJob", kAdmin, "kiln-training"},
    {G, "/kiln.v1.Training/ResumeJob", kAdmin, "kiln-training"},
    {G, "/kiln.v1.Training/WatchJob", kAdmin, "kiln-training"},
    {G, "/kiln.v1.Training/UploadDataset", kAdmin, "kiln-training"},
    {G, "/kiln.v1.Training/GetCheckpoint", kAdmin, "kiln-training"},
    // gRPC's own health service: SERVING or not, for probes.
    {G, "/grpc.health.v1.Health/Check", Role::kPublic, "health"},
    {G, "/grpc.health.v1.Health/Watch", Role::kPublic, "health"},
    // KServe v2 over HTTP (HEAD is GET).
    {H, "GET /v2", kInfer, "metadata"},
    {H, "GET /v2/health/live", kInfer, "health"},
    {H, "GET /v2/health/ready", kInfer, "health"},
    {H, "GET /v2/models/{m}", kInfer, "metadata"},
    {H, "GET /v2/models/{m}/ready", kInfer, "health"},
    {H, "GET /v2/models/{m}/config", kInfer, "model-config"},
    {H, "GET /v2/models/{m}/stats", kInfer, "statistics"},
    {H, "GET /v2/models/stats", kInfer, "statistics"},
    {H, "POST /v2/models/{m}/infer", kInfer, "inference"},
    {H, "POST /v2/models/{m}/infer parameters.kiln_viz", kAdmin, "kiln-viz"},
    {H, "POST /v2/repository/index", kAdmin, "model-repository"},
    {H, "POST /v2/repository/models/{m}/load", kAdmin, "model-repository"},
    {H, "POST /v2/repository/models/{m}/unload", kAdmin, "model-repository"},
    {H, "GET /v2/systemsharedmemory/status", kInfer, "shared-memory"},
    {H, "GET /v2/systemsharedmemory/region/{r}/status", kInfer, "shared-memory"},
    {H, "POST /v2/systemsharedmemory/region/{r}/register", kInfer, "shared-memory"},
    {H, "POST /v2/systemsharedmemory/unregister", kInfer, "shared-memory"},
    {H, "POST /v2/systemsharedmemory/region/{r}/unregister", kInfer, "shared-memory"},
    {H, "* /v2/logging", kAdmin, "logging"},
    {H, "* /v2/trace/setting", kAdmin, "trace"},
    {H, "* /v2/models/{m}/trace/setting", kAdmin, "trace"},
    {H, "POST /v1/graphs:execute", kAdmin, "kiln-graph"},
    // Text generation of kiln_llm models (server/rest/llm_routes.h).
    {H, "GET /v1/models", kInfer, "metadata"},
    {H, "POST /v1/completions", kInfer, "inference"},
    {H, "POST /v1/chat/completions", kInfer, "inference"},
    {H, "POST /v2/models/{m}/generate", kInfer, "inference"},
    {H, "POST /v2/models/{m}/generate_stream", kInfer, "inference"},
    {H, "GET /v2/profile", kAdmin, "kiln-viz"},
    {H, "GET /viz", kAdmin, "kiln-viz"},
    {H, "GET /viz/highlight.js", kAdmin, "kiln-viz"},
    {H, "GET /viz/api/{doc}", kAdmin, "kiln-viz"},
    {H, "* /v1/training/...", kAdmin, "kiln-training"},
    {H, "GET /metrics", Role::kMetrics, "metrics"},
};

constexpr std::string_view kGroups[] = {"health",        "metadata",         "inference",
                                        "model-config",  "statistics",       "model-repository",
                                        "shared-memory", "trace",            "logging",
                                        "kiln-graph",    "kiln-training",    "metrics",
                                        "kiln-viz"};

// Splits on any of `seps`; `skip_empty` drops empty pieces. (absl's StrSplit takes absl's
// string_view, which the packaged Abseil does not alias to std::string_view.)
std::vector<std::string_view> Split(std::string_view text, std::string_view seps, bool skip_empty) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || seps.find(text[i]) != std::string_view::npos) {
      if (!skip_empty || i > start) out.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

std::string_view Strip(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

bool KnownGroup(std::string_view g) {
  for (std::string_view k : kGroups) {
    if (k == g) return true;
  }
  return false;
}

absl::StatusOr<uint8_t> ParseRoles(std::string_view text) {
  uint8_t roles = 0;
  for (std::string_view r : Split(text, ",", false)) {
    if (r == "infer") roles |= static_cast<uint8_t>(Role::kInfer);
    else if (r == "admin") roles |= static_cast<uint8_t>(Role::kAdmin);
    else if (r == "metrics") roles |= static_cast<uint8_t>(Role::kMetrics);
    else return absl::InvalidArgumentError(absl::StrCat("unknown role '", std::string(r.substr(0, 32)), "' (infer, admin, metrics)"));
  }
  return roles;
}

}  // namespace

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kPublic: return "public";
    case Role::kInfer: return "infer";
    case Role::kAdmin: return "admin";
    case Role::kMetrics: return "metrics";
  }
  return "?";
}

absl::Span<const Endpoint> Endpoints() { return kEndpoints; }

const Endpoint* FindEndpoint(Transport transport, std::string_view name) {
  for (const Endpoint& e : kEndpoints) {
    if (e.transport == transport && e.name == name) return &e;
  }
  return nullptr;
}

std::string HashApiKey(std::string_view key) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * SHA256_DIGEST_LENGTH);
  for (unsigned char b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

absl::StatusOr<RestrictedProtocol> ParseRestrictedProtocol(std::string_view text) {
  const size_t colon = text.find(':');
  const size_t eq = colon == std::string_view::npos ? std::string_view::npos : text.find('=', colon);
  if (colon == std::string_view::npos || eq == std::string_view::npos || colon == 0 || eq == colon + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "restricted protocol '", std::string(text.substr(0, 128)), "': expected <group>[,<group>...]:<header>=<value>"));
  }
  RestrictedProtocol r;
  for (std::string_view g : Split(text.substr(0, colon), ",", false)) {
    if (!KnownGroup(g)) {
      return absl::InvalidArgumentError(absl::StrCat("restricted protocol: unknown group '", std::string(g.substr(0, 64)),
                                                     "' (health, metadata, inference, model-config, statistics, "
                                                     "model-repository, shared-memory, trace, logging, kiln-graph, "
                                                     "kiln-training)"));
    }
    r.groups.emplace_back(g);
  }
  r.header = absl::AsciiStrToLower(std::string(text.substr(colon + 1, eq - colon - 1)));
  r.value = std::string(text.substr(eq + 1));
  return r;
}

absl::StatusOr<std::map<std::string, Authenticator::KeyEntry>> Authenticator::ReadKeys(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--api-keys-file ", path, ": cannot be read"));
  std::map<std::string, KeyEntry> keys;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string_view l = Strip(line);
    if (l.empty() || l[0] == '#') continue;
    std::vector<std::string_view> f = Split(l, " \t", true);
    auto where = [&] { return absl::StrCat("--api-keys-file ", path, " line ", n, ": "); };
    if (f.size() < 2) return absl::InvalidArgumentError(absl::StrCat(where(), "expected <roles> <sha256-hex> [label]"));
    absl::StatusOr<uint8_t> roles = ParseRoles(f[0]);
    if (!roles.ok()) return absl::InvalidArgumentError(absl::StrCat(where(), std::string(roles.status().message())));
    const std::string hash = absl::AsciiStrToLower(std::string(f[1]));
    bool hex = hash.size() == 64;
    for (char c : hash) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    if (!hex) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), "the key must be stored as its SHA-256 (64 hex digits: printf %s KEY | sha256sum)"));
    }
    KeyEntry& e = keys[hash];
    e.roles |= *roles;
    e.label = f.size() > 2 ? std::string(f[2].substr(0, 64)) : hash.substr(0, 8);
  }
  return keys;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(AuthOptions options) {
  std::unique_ptr<Authenticator> a(new Authenticator(std::move(options)));
  if (!a->options_.api_keys_file.empty()) {
    absl::StatusOr<std::map<std::string, KeyEntry>> keys = ReadKeys(a->options_.api_keys_file);
    if (!keys.ok()) return keys.status();
    absl::MutexLock l(&a->mu_);
    a->keys_ = *std::move(keys);
  }
  return a;
}

bool Authenticator::keys_enabled() const { return !options_.api_keys_file.empty(); }

size_t Authenticator::key_count() const {
  absl::MutexLock l(&mu_);
  return keys_.size();
}

absl::Status Authenticator::Reload() {
  if (options_.api_keys_file.empty()) return absl::OkStatus();
  absl::StatusOr<std::map<std::string, KeyEntry>> keys = ReadKeys(options_.api_keys_file);
  if (!keys.ok()) return keys.status();
  absl::MutexLock l(&mu_);
  keys_ = *std::move(keys);
  return absl::OkStatus();
}

std::string Authenticator::MatchKey(std::string_view key, KeyEntry* entry) const {
  const std::string hash = HashApiKey(key);
  std::string found;
  absl::MutexLock l(&mu_);
  for (const auto& [stored, e] : keys_) {  // every entry, compared in constant time
    if (CRYPTO_memcmp(stored.data(), hash.data(), hash.size()) == 0) {
      found = stored;
      *entry = e;
    }
  }
  return found;
}

uint8_t Authenticator::RolesOf(std::string_view key) const {
  KeyEntry e;
  return MatchKey(key, &e).empty() ? 0 : e.roles;
}

Authenticator::Refusals Authenticator::refusals() const {
  absl::MutexLock l(&mu_);
  return refusals_;
}

absl::Status Authenticator::Check(Transport transport, std::string_view endpoint, const void* request,
                                  HeaderLookup header) const {
  absl::StatusOr<Permit> p = Admit(transport, endpoint, request, header);
  return p.status();
}

absl::Status Authenticator::Authorize(Transport transport, std::string_view endpoint,
                                      const void* request, HeaderLookup header) const {
  std::string hash;
  KeyEntry entry;
  return CheckAccess(transport, endpoint, request, header, &hash, &entry);
}

absl::Status Authenticator::CheckAccess(Transport transport, std::string_view endpoint,
                                        const void* request, HeaderLookup header, std::string* hash,
                                        KeyEntry* entry) const {
  const Endpoint* e = FindEndpoint(transport, endpoint);
  auto refuse = [&](uint64_t Refusals::*counter, absl::Status s) {
    absl::MutexLock l(&mu_);
    ++(refusals_.*counter);
    return s;
  };
  if (e == nullptr) {
    return refuse(&Refusals::permission, absl::PermissionDeniedError(absl::StrCat(
        "'", std::string(endpoint.substr(0, 128)), "' is not in kilnd's endpoint table")));
  }
  for (const RestrictedProtocol& r : transport == Transport::kGrpc ? options_.grpc_restricted : options_.http_restricted) {
    bool applies = false;
    for (const std::string& g : r.groups) applies = applies || g == e->group;
    if (!applies) continue;
    const std::string_view got = header(request, r.header);
    if (got.size() != r.value.size() || CRYPTO_memcmp(got.data(), r.value.data(), got.size()) != 0) {
      return refuse(&Refusals::permission, absl::PermissionDeniedError(absl::StrCat(
          "'", std::string(e->name), "' is in the restricted protocol group '", std::string(e->group),
          "': it needs the header '", r.header, "'")));
    }
  }
  if (!keys_enabled() || e->role == Role::kPublic) return absl::OkStatus();
  if (absl::Status s = CheckKey(*e, header(request, "authorization"), hash, entry); !s.ok()) {
    return refuse(absl::IsUnauthenticated(s) ? &Refusals::unauthenticated : &Refusals::permission, s);
  }
  return absl::OkStatus();
}

absl::Status Authenticator::CheckKey(const Endpoint& e, std::string_view auth, std::string* hash,
                                     KeyEntry* entry) const {
  constexpr std::string_view kBearer = "bearer ";
  if (auth.size() <= kBearer.size() || absl::AsciiStrToLower(std::string(auth.substr(0, kBearer.size()))) != kBearer) {
    return absl::UnauthenticatedError(absl::StrCat("'", std::string(e.name), "' needs an API key with role '",
                                                   std::string(RoleName(e.role)), "': send 'authorization: Bearer <key>'"));
  }
  *hash = MatchKey(Strip(auth.substr(kBearer.size())), entry);
  if (hash->empty()) {
    return absl::UnauthenticatedError(absl::StrCat("'", std::string(e.name), "': the API key is not known"));
  }
  if ((entry->roles & static_cast<uint8_t>(e.role)) == 0) {
    return absl::PermissionDeniedError(absl::StrCat("'", std::string(e.name), "' needs role '",
                                                    std::string(RoleName(e.role)), "', which API key '", entry->label,
                                                    "' does not have"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Authenticator::Permit> Authenticator::Admit(Transport transport, std::string_view endpoint,
                                                           const void* request, HeaderLookup header,
                                                           int* retry_after_s) const {
  std::string hash;
  KeyEntry entry;
  absl::Status access = CheckAccess(transport, endpoint, request, header, &hash, &entry);
  if (!access.ok()) return access;
  if (!keys_enabled() || hash.empty()) return Permit();  // no keys, or a public endpoint
  if (options_.key_rate_limit <= 0 && options_.key_max_concurrent <= 0) return Permit();
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  absl::MutexLock l(&mu_);
  Usage& u = usage_[hash];
  if (options_.key_rate_limit > 0) {
    const double burst = std::max(1.0, options_.key_rate_limit);
    u.tokens = u.last_ns == 0 ? burst
                              : std::min(burst, u.tokens + options_.key_rate_limit * 1e-9 * static_cast<double>(now - u.last_ns));
    u.last_ns = now;
    if (u.tokens < 1) {
      ++refusals_.rate;
      const double wait_s = (1 - u.tokens) / options_.key_rate_limit;
      if (retry_after_s != nullptr) *retry_after_s = std::max(1, static_cast<int>(std::ceil(wait_s)));
      return absl::ResourceExhaustedError(absl::StrCat("API key '", entry.label, "' is over its rate limit of ",
                                                       options_.key_rate_limit, " requests/s (--api-key-rate-limit); retry in ",
                                                       static_cast<int64_t>(std::ceil(wait_s * 1000)), " ms"));
    }
  }
  if (options_.key_max_concurrent > 0 && u.in_flight >= options_.key_max_concurrent) {
    ++refusals_.concurrency;
    if (retry_after_s != nullptr) *retry_after_s = 1;
    return absl::ResourceExhaustedError(absl::StrCat("API key '", entry.label, "' has ", u.in_flight,
                                                     " calls in flight, its limit (--api-key-max-concurrent ",
                                                     options_.key_max_concurrent, "); retry when one finishes"));
  }
  if (options_.key_rate_limit > 0) u.tokens -= 1;
  ++u.in_flight;
  // The permit gives the call back when the last holder drops it.
  return Permit(static_cast<void*>(nullptr), [this, hash](void*) {
    absl::MutexLock l(&mu_);
    auto it = usage_.find(hash);
    if (it != usage_.end() && it->second.in_flight > 0) --it->second.in_flight;
  });
}

}  // namespace kiln::server
