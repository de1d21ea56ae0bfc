// RestServer: kilnd's HTTP/1.1 front end — KServe v2 REST (kserve-v2-protocol.md §9), kiln's
// graph API as protobuf JSON (POST /v1/graphs:execute) and the training API (/v1/training/...,
// training_routes.h) — calling server/core directly.
//
// HTTP library: cpp-httplib (Debian libcpp-httplib-dev 0.11): small, maintained, packaged as a
// shared library, thread-pool server with keep-alive, read/write timeouts and a streaming body
// reader, which is what lets the gateway enforce its own limits while the body arrives.
//
// Limits (each answered with a 4xx and {"error": "..."} naming the limit; the connection is
// closed when a body was left unread):
//   request line > 8 KiB        414 (library)      one header line > 8 KiB   400 (library)
//   all headers > max_header_bytes or > max_header_count lines             431
//   Content-Length > max_body_bytes                  413 before reading the body
//   chunked body > max_body_bytes, or > max_chunks pieces                  413 while reading
//   POST without Content-Length or chunked: an empty body (RFC 9112 §6.3)
//   JSON deeper than kMaxJsonDepth                   400 (iterative parser, json_parse.h)
//   no bytes for read_timeout_ms / write_timeout_ms: the connection is closed
// Threads: cpp-httplib serves each connection on one pool thread for its whole life (idle
// keep-alive included, up to keep_alive_timeout_s), so thread_count bounds open connections
// served at once; more wait in the accept queue. Handlers run on those threads; the core is
// thread-safe. Stop() stops accepting, lets requests in flight finish, and joins the threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/core/inference_server.h"
#include "server/core/job_manager.h"

namespace httplib {
class Server;
}

namespace kiln::server {

class TrainingRoutes;

struct RestServerOptions {
  std::string address = "0.0.0.0";
  int port = 8000;                      // 0 = pick a free port
  int64_t max_body_bytes = 64LL << 20;  // whole request body
  int64_t max_header_bytes = 16 << 10;  // all header lines together
  int max_header_count = 64;            // header lines
  int64_t max_chunks = 32768;           // pieces of one chunked body
  int thread_count = 64;                // connections served at once
  int read_timeout_ms = 5000;
  int write_timeout_ms = 5000;
  int keep_alive_timeout_s = 5;
  int keep_alive_max_requests = 10000;  // requests per connection
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

  int port() const { return port_; }
  // Ends open event streams (within 250 ms), then stops as described above. Idempotent.
  void Stop();

 private:
  RestServer(const RestServerOptions& options, InferenceServer* core, JobManager* jobs);
  void Install();

  const RestServerOptions options_;
  InferenceServer* const core_;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<TrainingRoutes> training_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace kiln::server
