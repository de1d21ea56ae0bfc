// RestServer: kilnd's HTTP/1.1 front end — KServe v2 REST (kserve-v2-protocol.md §9), kiln's
// graph API as protobuf JSON (POST /v1/graphs:execute) and the training API (/v1/training/...,
// training_routes.h) — calling server/core directly (routes in rest_routes.h).
//
// HTTP library: Boost.Beast + Boost.Asio (Debian libboost-dev 1.74, header-only). Event-driven:
// `io_threads` event loops (one single-threaded io_context each; connections dealt to them in
// turn) run every connection's I/O (http_connection.h), so an idle, slow or streaming client
// holds a socket, never a thread; handlers run on a pool of `thread_count` worker threads (they
// may block in server/core while a model runs) and hand their response back to the connection;
// liveness/readiness are answered on the loop. Chosen over libevent's evhtp (Triton's choice,
// Debian libevhtp-dev 1.2.18, upstream's last release): Boost is maintained and packaged
// in step, its parser and timers are a library's rather than ours, and asio::ssl gives TLS
// through OpenSSL for the same connection code (issue #23).
//
// Parsing is strict RFC 9112 (http_parse.h): conflicting or duplicate Content-Length,
// Content-Length with Transfer-Encoding, a Transfer-Encoding other than chunked, HTTP/1.1
// without Host, bare LF or CR, obs-fold and bad chunk framing are 400 and close the connection.
//
// Limits (each answered with a 4xx and {"error": "..."} naming the limit; the connection is
// closed when a body was left unread):
//   request line > 8 KiB        414                one header line > 8 KiB   400
//   all headers > max_header_bytes or > max_header_count lines             431
//   Content-Length > max_body_bytes                  413 before reading the body
//   chunked body > max_body_bytes, or > max_chunks pieces                  413 while reading
//   POST without Content-Length or chunked: an empty body (RFC 9112 §6.3)
//   JSON deeper than kMaxJsonDepth                   400 (iterative parser, json_parse.h)
//   more than max_connections open, or max_connections_per_client from one address: 503 with
//   Retry-After, then close
// Deadlines (http_connection.h): header_timeout_ms for the whole head, body_timeout_ms for the
// whole body, read/write_timeout_ms without progress, keep_alive_timeout_s idle between
// requests; a missed deadline closes the connection without a response. Every complete request
// is answered, also when the client half-closes right after sending it.
//
// Stop() stops accepting, ends event streams with their error event, closes idle and reading
// connections, lets handlers in flight finish and write their response (Connection: close),
// then joins the threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/auth.h"
#include "server/core/tls_files.h"
#include "server/core/inference_server.h"
#include "server/core/job_manager.h"

namespace kiln::server {

struct RestServerOptions {
  std::string address = "0.0.0.0";
  int port = 8000;                       // 0 = pick a free port
  int64_t max_body_bytes = 64LL << 20;   // whole request body
  int64_t max_header_bytes = 16 << 10;   // all header lines together
  int max_header_count = 64;             // header lines
  int64_t max_chunks = 32768;            // pieces of one chunked body
  int io_threads = 2;                    // event-loop threads (all connections' I/O)
  int thread_count = 64;                 // handler threads (requests handled at once)
  int max_connections = 4096;            // open connections in all
  int max_connections_per_client = 512;  // open connections per client address; 0 = no cap
  int header_timeout_ms = 10000;         // whole request head, from its first byte
  int body_timeout_ms = 120000;          // whole request body, from the end of the head
  int read_timeout_ms = 5000;            // no byte received mid-request
  int write_timeout_ms = 5000;           // no byte sent mid-response
  int keep_alive_timeout_s = 5;          // idle between requests
  int keep_alive_max_requests = 10000;   // requests per connection
  const Authenticator* auth = nullptr;   // gates every route (401/403); null = all allowed
  TlsFiles tls;                          // enabled: HTTPS (TLS 1.2+; mutual with tls.client_ca)
};

class RestServer {
 public:
  // Binds address:port and starts serving. UNAVAILABLE if the port cannot be bound. `jobs` (may
  // be null: no --data-dir) serves /v1/training/... (training_routes.h); it must outlive Stop().
  static absl::StatusOr<std::unique_ptr<RestServer>> Start(const RestServerOptions& options,
                                                           InferenceServer* core,
                                                           JobManager* jobs = nullptr);
  ~RestServer();
  RestServer(const RestServer&) = delete;
  RestServer& operator=(const RestServer&) = delete;

  int port() const;
  // Stops as described above. Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit RestServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::server
