#include "server/rest/rest_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/thread_pool.hpp"
#include "server/rest/http_connection.h"
#include "server/rest/llm_routes.h"
#include "server/rest/rest_routes.h"
#include "server/rest/tls_context.h"
#include "server/rest/training_routes.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr auto kAcceptRetry = std::chrono::milliseconds(100);  // after EMFILE and the like
constexpr auto kWarnEvery = std::chrono::seconds(10);          // accept/refusal warnings
constexpr int64_t kReservedFiles = 256;  // descriptors left to the rest of kilnd

// max_connections within the process's open-file limit (less kReservedFiles), so that a flood
// is answered 503 instead of failing accept() with EMFILE.
int FitToFileLimit(int max_connections) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return max_connections;
  const int64_t room = std::max<int64_t>(16, static_cast<int64_t>(rl.rlim_cur) - kReservedFiles);
  if (max_connections <= room) return max_connections;
  spdlog::warn("http: --http-max-connections {} exceeds the open-file limit {} less {}; using {}",
               max_connections, static_cast<int64_t>(rl.rlim_cur), kReservedFiles, room);
  return static_cast<int>(room);
}

// A body sink that holds an API key's permit until the upload ends (server/core/auth.h).
class PermitSink final : public BodySink {
 public:
  PermitSink(std::unique_ptr<BodySink> inner, Authenticator::Permit permit)
      : inner_(std::move(inner)), permit_(std::move(permit)) {}
  bool Write(std::string_view piece, HttpResponse* res) override { return inner_->Write(piece, res); }
  void Finish(HttpResponse* res) override { inner_->Finish(res); }

 private:
  std::unique_ptr<BodySink> inner_;
  Authenticator::Permit permit_;
};

// The plan with `permit` held by its handler or sink: released when the connection drops the plan
// after answering.
RoutePlan HoldPermit(RoutePlan plan, Authenticator::Permit permit) {
  if (plan.handle) {
    plan.handle = [inner = std::move(plan.handle), permit](const HttpRequest& r, std::string& body,
                                                           HttpResponse* res) { inner(r, body, res); };
  } else if (plan.sink) {
    plan.sink = std::make_unique<PermitSink>(std::move(plan.sink), std::move(permit));
  }
  return plan;
}

// /v1/training/... to the training routes, the text-generation routes (OpenAI's /v1/..., Triton's
// generate) to the LLM routes, everything else to the KServe routes.
class RestRouter : public Router {
 public:
  RestRouter(const KserveRoutes* kserve, const TrainingRoutes* training, const LlmRoutes* llm,
             const Authenticator* auth)
      : kserve_(kserve), training_(training), llm_(llm), auth_(auth) {}
  RoutePlan Route(const HttpRequest& req, bool training, bool llm) const {
    return training ? training_->Plan(req) : llm ? llm_->Plan(req) : kserve_->Plan(req);
  }
  RoutePlan Plan(const HttpRequest& req) const override {
    const bool training = TrainingRoutes::Matches(req.path);
    const bool llm = !training && LlmRoutes::Matches(req.path);
    if (auth_ != nullptr) {
      const std::string_view endpoint = training ? "* /v1/training/..."
                                        : llm    ? LlmRoutes::EndpointName(req.path)
                                                 : KserveRoutes::EndpointName(req.path);
      if (!endpoint.empty()) {
        int retry_after_s = 0;
        absl::StatusOr<Authenticator::Permit> permit =
            auth_->Admit(Transport::kHttp, endpoint, &req,
                         +[](const void* r, std::string_view name) {
                           return static_cast<const HttpRequest*>(r)->Header(name);
                         },
                         &retry_after_s);
        if (!permit.ok()) {
          RoutePlan plan;
          const absl::Status& denied = permit.status();
          const int code = absl::IsUnauthenticated(denied) ? 401 : absl::IsResourceExhausted(denied) ? 429 : 403;
          plan.answer = Answer(code, std::string(denied.message()));
          if (code == 401) plan.answer->headers.emplace_back("WWW-Authenticate", "Bearer");
          if (code == 429) plan.answer->headers.emplace_back("Retry-After", std::to_string(retry_after_s));
          return plan;
        }
        return HoldPermit(Route(req, training, llm), *std::move(permit));
      }
    }
    return Route(req, training, llm);
  }

 private:
  const KserveRoutes* const kserve_;
  const TrainingRoutes* const training_;
  const LlmRoutes* const llm_;
  const Authenticator* const auth_;
};

HttpLimits LimitsOf(const RestServerOptions& o) {
  HttpLimits l;
  l.head.max_header_bytes = o.max_header_bytes;
  l.head.max_header_count = o.max_header_count;
  l.header_timeout_ms = o.header_timeout_ms;
  l.body_timeout_ms = o.body_timeout_ms;
  l.read_timeout_ms = o.read_timeout_ms;
  l.write_timeout_ms = o.write_timeout_ms;
  l.keep_alive_timeout_ms = o.keep_alive_timeout_s * 1000;
  l.keep_alive_max_requests = o.keep_alive_max_requests;
  l.max_connections = o.max_connections;
  l.max_connections_per_client = o.max_connections_per_client;
  return l;
}

}  // namespace

// Members are destroyed in reverse order: the I/O objects (and with them connections still
// queued in handlers) before the worker pool, the context and the routes they use.
struct RestServer::Impl {
  Impl(const RestServerOptions& o, InferenceServer* core, JobManager* jobs)
      : options(o),
        kserve(core, BodyLimits{o.max_body_bytes, o.max_chunks}, o.auth),
        training(jobs, BodyLimits{o.max_body_bytes, o.max_chunks}),
        llm(core, BodyLimits{o.max_body_bytes, o.max_chunks}),
        router(&kserve, &training, &llm, o.auth),
        context(LimitsOf(o), &router, &workers),
        workers(static_cast<size_t>(std::max(1, o.thread_count))),
        loops(static_cast<size_t>(std::max(1, o.io_threads))),
        acceptor(loops[0].context),
        retry(acceptor.get_executor()) {}

  void Accept();
  void Serve(tcp::socket socket, std::string client, std::string refusal);
  void Warn(const std::string& why);

  const RestServerOptions options;
  std::unique_ptr<TlsContextSource> tls;  // null: plain HTTP
  KserveRoutes kserve;
  TrainingRoutes training;
  LlmRoutes llm;
  RestRouter router;
  HttpContext context;
  net::thread_pool workers;
  // One single-threaded io_context per I/O thread (no strand or scheduler lock is shared
  // between I/O threads); connections are dealt to them in turn. The acceptor is on the first.
  struct Loop {
    net::io_context context{1};
    std::optional<net::executor_work_guard<net::io_context::executor_type>> guard;
    std::thread thread;
  };
  std::vector<Loop> loops;
  size_t next_loop = 0;  // on the acceptor's loop
  tcp::acceptor acceptor;
  net::steady_timer retry;
  int port = 0;
  bool stopped = false;
  std::atomic<int64_t> refused{0};
  Clock::time_point last_warning{};  // on the acceptor's loop
};

// At most one warning per kWarnEvery (a flood must not flood the log too).
void RestServer::Impl::Warn(const std::string& why) {
  ++refused;
  const Clock::time_point now = Clock::now();
  if (now - last_warning < kWarnEvery) return;
  last_warning = now;
  spdlog::warn("http: {} ({} connections refused or failed so far)", why, refused.load());
}

void RestServer::Impl::Serve(tcp::socket socket, std::string client, std::string refusal) {
  if (tls != nullptr) {
    ServeTlsConnection(std::move(socket), tls->Current(), &context, std::move(client), std::move(refusal));
  } else {
    ServeConnection(std::move(socket), &context, std::move(client), std::move(refusal));
  }
}

void RestServer::Impl::Accept() {
  acceptor.async_accept(
      loops[next_loop++ % loops.size()].context,
      [this](boost::system::error_code ec, tcp::socket socket) {
        if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
        if (ec) {
          Warn(absl::StrCat("accept: ", ec.message()));
          retry.expires_after(kAcceptRetry);
          retry.async_wait([this](boost::system::error_code e) {
            if (!e) Accept();
          });
          return;
        }
        boost::system::error_code peer_ec;
        const tcp::endpoint peer = socket.remote_endpoint(peer_ec);
        std::string client = peer_ec ? std::string("unknown") : peer.address().to_string();
        std::string refusal = context.Admit(client);
        if (refusal.empty()) {
          Serve(std::move(socket), std::move(client), "");
        } else {
          Warn(absl::StrCat("refusing connections: ", refusal));
          if (context.BeginRefusal()) {
            Serve(std::move(socket), std::move(client), std::move(refusal));
          }  // else dropped: the socket closes here
        }
        Accept();
      });
}

RestServer::RestServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RestServer::~RestServer() { Stop(); }

int RestServer::port() const { return impl_->port; }

absl::StatusOr<std::unique_ptr<RestServer>> RestServer::Start(const RestServerOptions& options,
                                                              InferenceServer* core,
                                                              JobManager* jobs) {
  RestServerOptions fitted = options;
  fitted.max_connections = FitToFileLimit(options.max_connections);
  auto impl = std::make_unique<Impl>(fitted, core, jobs);
  if (options.tls.enabled) {
    absl::StatusOr<std::unique_ptr<TlsContextSource>> tls = TlsContextSource::Create(options.tls);
    if (!tls.ok()) return tls.status();
    impl->tls = *std::move(tls);
  }
  auto fail = [&](const boost::system::error_code& ec) {
    return absl::UnavailableError(
        absl::StrCat("HTTP: cannot bind ", options.address, ":", options.port, ": ", ec.message()));
  };
  boost::system::error_code ec;
  tcp::resolver resolver(impl->loops[0].context);
  const auto endpoints =
      resolver.resolve(options.address, std::to_string(options.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) return fail(ec);
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  tcp::acceptor& acceptor = impl->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return fail(ec);
  impl->port = acceptor.local_endpoint(ec).port();
  if (ec) return fail(ec);

  Impl* raw = impl.get();
  net::post(acceptor.get_executor(), [raw] { raw->Accept(); });
  for (Impl::Loop& loop : impl->loops) {
    loop.guard.emplace(net::make_work_guard(loop.context));
    loop.thread = std::thread([&context = loop.context] {
      for (;;) {
        try {
          context.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("http: exception on an I/O thread (continuing): {}", e.what());
        }
      }
    });
  }
  return std::unique_ptr<RestServer>(new RestServer(std::move(impl)));
}

void RestServer::Stop() {
  Impl& s = *impl_;
  if (s.stopped) return;
  s.stopped = true;
  net::post(s.acceptor.get_executor(), [&s] {
    boost::system::error_code ec;
    s.acceptor.close(ec);
    s.retry.cancel();
  });
  s.context.StopAll();
  // Idle and reading connections close at once; handlers in flight finish and write their
  // response, then linger (at most kLingerMs).
  const Clock::time_point deadline = Clock::now() +
                                     std::chrono::milliseconds(s.options.write_timeout_ms) +
                                     std::chrono::milliseconds(kLingerMs + 3000);
  while (s.context.open() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  s.workers.join();
  for (Impl::Loop& loop : s.loops) {
    loop.guard.reset();
    loop.context.stop();
  }
  for (Impl::Loop& loop : s.loops) loop.thread.join();
}

}  // namespace kiln::server
