// One HTTP/1.1 connection of the REST gateway, served by Boost.Asio/Beast on an event loop: no
// thread belongs to a connection. Its socket lives on one I/O thread's loop (a single-threaded
// io_context, so the connection's handlers never run concurrently); reading and writing never
// block; handlers (which may block in server/core) run on the worker pool and hand the response
// back to the loop; event streams are written as the producer wakes the loop. A slow or idle
// client costs a socket and a few KiB, never a thread.
//
// Per request: the head (HeadScanner + ParseRequestHead, http_parse.h), the route's plan
// (Router::Plan), "100 Continue" when asked, the body (BodyDecoder) into one string or in pieces
// to a BodySink, the handler on a worker, the response. Deadlines (all per connection):
//   idle before a request's first byte   keep_alive_timeout (header_timeout for the first one)
//   whole head, from its first byte      header_timeout
//   whole body, from the end of the head body_timeout
//   no progress reading a request        read_timeout
//   no progress writing a response       write_timeout
// A deadline missed closes the connection without a response. Every complete request gets a
// response, also after the client half-closed its side. After a response that leaves request
// bytes unread (an error before or in the body), or with Connection: close, the server shuts
// down its sending side and discards what still arrives for up to kLingerMs before closing, so
// the client reads the response instead of a reset.
//
// The connection code is a template over the stream (Beast's tcp_stream today), so a TLS stream
// (beast::ssl_stream<tcp_stream>, issue #23) slots in with its handshake and shutdown.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl/context.hpp"
#include "boost/asio/thread_pool.hpp"
#include "server/rest/http_message.h"
#include "server/rest/http_parse.h"

namespace kiln::server {

inline constexpr int kLingerMs = 2000;
inline constexpr int kMaxRefusing = 256;  // connections answered 503 at once; more are dropped

struct HttpLimits {
  HeadLimits head;
  int header_timeout_ms = 10000;
  int body_timeout_ms = 120000;
  int read_timeout_ms = 5000;
  int write_timeout_ms = 5000;
  int keep_alive_timeout_ms = 5000;
  int keep_alive_max_requests = 10000;
  int max_connections = 4096;
  int max_connections_per_client = 512;  // 0 = no per-client cap
};

class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  // Thread-safe. Closes an idle or reading connection; one with a request in a handler or a
  // response being written finishes it (Connection: close); an event stream ends with its stop
  // message.
  virtual void Stop() = 0;
};

// What all connections of one server share: limits, the router, the worker pool and the
// registry of open connections (global and per-client counts). Thread-safe.
class HttpContext {
 public:
  HttpContext(HttpLimits limits, const Router* router, boost::asio::thread_pool* workers)
      : limits_(limits), router_(router), workers_(workers) {}

  const HttpLimits& limits() const { return limits_; }
  const Router& router() const { return *router_; }
  boost::asio::thread_pool& workers() { return *workers_; }
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  // Counts a new connection from `client` in; "" when admitted, else why not (the 503's message).
  std::string Admit(const std::string& client);
  void Register(ConnectionBase* c, std::weak_ptr<ConnectionBase> self);
  void Remove(ConnectionBase* c, const std::string& client);  // undoes Admit and Register
  bool BeginRefusal();  // false: too many 503s in flight, drop the connection instead
  void EndRefusal() { refusing_.fetch_sub(1); }

  // Sets stopping and calls Stop on every open connection.
  void StopAll();
  int open() const;

 private:
  const HttpLimits limits_;
  const Router* const router_;
  boost::asio::thread_pool* const workers_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> refusing_{0};
  mutable std::mutex mu_;
  int open_ = 0;                                                             // guarded by mu_
  std::unordered_map<std::string, int> per_client_;                          // guarded by mu_
  std::unordered_map<ConnectionBase*, std::weak_ptr<ConnectionBase>> live_;  // guarded by mu_
};

// Serves an accepted plain-TCP socket (its executor must be a single-threaded io_context or a
// strand). `client` is the peer's address. `refusal`: when not empty, answers 503 with it and
// closes (over a connection cap).
void ServeConnection(boost::asio::ip::tcp::socket socket, HttpContext* context, std::string client,
                     std::string refusal);
// The same over TLS: the handshake (within the header timeout) comes first; a failed handshake
// closes the connection.
void ServeTlsConnection(boost::asio::ip::tcp::socket socket, std::shared_ptr<boost::asio::ssl::context> tls,
                        HttpContext* context, std::string client, std::string refusal);

}  // namespace kiln::server
