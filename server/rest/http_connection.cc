#include "server/rest/http_connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/beast/core/error.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/ssl/ssl_stream.hpp"
#include "server/rest/http_util.h"
#include "spdlog/spdlog.h"

namespace kiln::server {

namespace net = boost::asio;
namespace beast = boost::beast;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kReadBytes = 16 << 10;
constexpr size_t kDirectReadBytes = 256 << 10;  // reads straight into a large body
constexpr size_t kMaxPipelined = 64 << 10;      // bytes kept from a client while streaming to it
constexpr size_t kKeepCapacity = 1 << 20;       // buffers larger than this are freed after use
constexpr size_t kMaxReserve = 4 << 20;         // body bytes reserved from Content-Length up front

std::string ChunkFrame(std::string_view data, bool last) {
  std::string out;
  if (!data.empty()) {
    out = absl::StrCat(absl::Hex(data.size()), "\r\n");
    out.append(data);
    out += "\r\n";
  }
  if (last) out += "0\r\n\r\n";
  return out;
}

void Release(std::string& s) {
  if (s.capacity() > kKeepCapacity) {
    std::string().swap(s);
  } else {
    s.clear();
  }
}

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// The stream-specific steps (ShutdownSend, SendNow below). A TLS stream adds its handshake
// before the first read (HttpConnection::Start) and sends nothing in SendNow (its records are
// written from the loop). Its ShutdownSend ends the TCP sending side without a close_notify
// alert: every response is delimited by Content-Length or chunked framing, so a client can tell
// a complete response from a truncated one without it.
void ShutdownSend(beast::tcp_stream& s) {
  beast::error_code ec;
  s.socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
}
void ShutdownSend(TlsStream& s) { ShutdownSend(beast::get_lowest_layer(s)); }
size_t SendNow(TlsStream&, const std::string&, const std::string&) { return 0; }

// Sends what the socket takes at once, without blocking (a worker thread's speculative write of
// a response while no other operation is pending on the socket); the bytes sent.
size_t SendNow(beast::tcp_stream& s, const std::string& head, const std::string& body) {
  iovec iov[2] = {{const_cast<char*>(head.data()), head.size()},
                  {const_cast<char*>(body.data()), body.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  const ssize_t n = ::sendmsg(s.socket().native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  return n < 0 ? 0 : static_cast<size_t>(n);
}

template <class Stream>
class HttpConnection : public ConnectionBase,
                       public std::enable_shared_from_this<HttpConnection<Stream>> {
 public:
  HttpConnection(Stream stream, HttpContext* ctx, std::string client, bool refused)
      : stream_(std::move(stream)),
        timer_(stream_.get_executor()),
        ctx_(ctx),
        limits_(ctx->limits()),
        client_(std::move(client)),
        refused_(refused),
        rbuf_(new char[kReadBytes]),
        scanner_(limits_.head) {}

  ~HttpConnection() override {
    if (source_ != nullptr) source_->Close();
    DropSink();
    if (refused_) {
      ctx_->EndRefusal();
    } else {
      ctx_->Remove(this, client_);
    }
  }

  void Start(std::string refusal) {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      beast::get_lowest_layer(stream_).expires_after(Ms(limits_.header_timeout_ms));
      stream_.async_handshake(net::ssl::stream_base::server,
                              [self = this->shared_from_this(), refusal = std::move(refusal)](
                                  beast::error_code ec) mutable {
                                if (ec) return self->Close();  // no HTTP without a handshake
                                self->Begin(std::move(refusal));
                              });
    } else {
      Begin(std::move(refusal));
    }
  }

  void Begin(std::string refusal) {
    if (!refusal.empty()) {
      HttpResponse res = Answer(503, refusal);
      res.headers.emplace_back("Retry-After", "1");
      res.close = true;
      return Respond(std::move(res));
    }
    idle_deadline_ = Clock::now() + Ms(limits_.header_timeout_ms);
    OnHeadBytes();
  }

  void Stop() override {
    net::post(stream_.get_executor(), [self = this->shared_from_this()] { self->OnStop(); });
  }

  auto Executor() { return stream_.get_executor(); }
  void Keep(std::shared_ptr<void> p) { keep_ = std::move(p); }

 private:
  enum class Phase { kHead, kBody, kHandling, kWriting, kStreaming, kClosing };
  using Step = void (HttpConnection::*)();

  static std::chrono::milliseconds Ms(int ms) { return std::chrono::milliseconds(ms); }
  std::string_view Buffered() const {
    return std::string_view(in_.data() + in_begin_, in_.size() - in_begin_);
  }
  Clock::time_point ReadDeadline(Clock::time_point phase_deadline) const {
    return std::min(phase_deadline, Clock::now() + Ms(limits_.read_timeout_ms));
  }

  // ** reading **

  void ReadSome(Clock::time_point deadline, Step next) {
    if (in_begin_ > 0) {
      in_.erase(0, in_begin_);
      in_begin_ = 0;
    }
    beast::get_lowest_layer(stream_).expires_at(deadline);
    stream_.async_read_some(
        net::buffer(rbuf_.get(), kReadBytes),
        [self = this->shared_from_this(), next](beast::error_code ec, size_t n) {
          if (self->phase_ == Phase::kClosing) return;
          if (ec) return self->OnReadError(ec);
          self->in_.append(self->rbuf_.get(), n);
          ((*self).*next)();
        });
  }

  // EOF, a reset or a missed deadline: the client is gone or too slow; no response.
  void OnReadError(const beast::error_code& ec) {
    if (ec == beast::error::timeout) {
      spdlog::debug("http: {} missed a read deadline ({} phase), closing", client_,
                    phase_ == Phase::kBody ? "body" : "head");
    }
    Close();
  }

  void OnHeadBytes() {
    phase_ = Phase::kHead;
    const std::string_view buf = Buffered();
    if (buf.empty()) return ReadSome(idle_deadline_, &HttpConnection::OnHeadBytes);
    if (!head_started_) {
      head_started_ = true;
      head_deadline_ = Clock::now() + Ms(limits_.header_timeout_ms);
    }
    switch (scanner_.Scan(buf)) {
      case HeadScanner::Result::kError:
        return RespondError(scanner_.error());
      case HeadScanner::Result::kNeedMore:
        return ReadSome(ReadDeadline(head_deadline_), &HttpConnection::OnHeadBytes);
      case HeadScanner::Result::kComplete:
        return OnHead();
    }
  }

  void OnHead() {
    const std::string_view buf = Buffered();
    ParsedHead parsed;
    HttpError error;
    const bool ok = ParseRequestHead(
        buf.substr(scanner_.begin(), scanner_.end() - scanner_.begin()), &parsed, &error);
    in_begin_ += scanner_.end();
    scanner_.Reset();
    head_started_ = false;
    if (!ok) return RespondError(error);
    ++requests_;
    req_ = std::move(parsed.request);
    head_request_ = req_.method == "HEAD";
    keep_alive_ = parsed.keep_alive && requests_ < limits_.keep_alive_max_requests;
    plan_ = ctx_->router().Plan(req_);
    if (plan_.answer.has_value()) {
      HttpResponse res = *std::move(plan_.answer);
      if (req_.has_body()) res.close = true;  // the body is not read
      return Respond(std::move(res));
    }
    if (req_.content_length.has_value() &&
        *req_.content_length > static_cast<uint64_t>(plan_.max_body_bytes)) {
      return RespondError(
          {413, absl::StrCat("request body: Content-Length ", *req_.content_length,
                             " exceeds the limit of ", plan_.max_body_bytes, " bytes")});
    }
    if (req_.chunked) {
      decoder_ = BodyDecoder::Chunked({plan_.max_body_bytes, plan_.max_chunks, limits_.head});
    } else {
      decoder_ = BodyDecoder::Fixed(req_.content_length.value_or(0));
      if (plan_.sink == nullptr) {
        body_.reserve(
            static_cast<size_t>(std::min<uint64_t>(req_.content_length.value_or(0), kMaxReserve)));
      }
    }
    body_deadline_ = Clock::now() + Ms(limits_.body_timeout_ms);
    phase_ = Phase::kBody;
    if (parsed.expect_continue && req_.has_body()) {
      out_head_ = "HTTP/1.1 100 Continue\r\n\r\n";
      return WriteOut(&HttpConnection::BodyStep);
    }
    BodyStep();
  }

  void BodyStep() {
    phase_ = Phase::kBody;
    std::string* out = plan_.sink != nullptr ? &piece_ : &body_;
    in_begin_ += decoder_.Feed(Buffered(), out);
    if (decoder_.failed()) return RespondError(decoder_.error());
    if (plan_.sink != nullptr &&
        (piece_.size() >= kBodyPieceBytes || (decoder_.done() && !piece_.empty()))) {
      return RunSink();
    }
    if (decoder_.done()) return plan_.sink != nullptr ? FinishSink() : RunHandler();
    if (plan_.sink == nullptr && decoder_.remaining() >= kDirectReadBytes) return ReadIntoBody();
    ReadSome(ReadDeadline(body_deadline_), &HttpConnection::BodyStep);
  }

  // A large Content-Length body is read straight into body_, kDirectReadBytes at a time (the
  // string grows only by what arrives).
  void ReadIntoBody() {
    const size_t old = body_.size();
    const size_t want =
        static_cast<size_t>(std::min<uint64_t>(decoder_.remaining(), kDirectReadBytes));
    body_.resize(old + want);
    beast::get_lowest_layer(stream_).expires_at(ReadDeadline(body_deadline_));
    stream_.async_read_some(net::buffer(body_.data() + old, want),
                            [self = this->shared_from_this(), old](beast::error_code ec, size_t n) {
                              if (self->phase_ == Phase::kClosing) return;
                              if (ec) return self->OnReadError(ec);
                              self->body_.resize(old + n);
                              self->decoder_.Consumed(n);
                              self->BodyStep();
                            });
  }

  // ** handlers (on the worker pool) **

  // Runs fn(res) on a worker; an exception becomes a 500. Returns fn's result.
  template <typename Fn>
  bool Guarded(Fn& fn, HttpResponse* res) {
    try {
      return fn(res);
    } catch (const std::exception& e) {
      spdlog::error("http: {} {}: exception in a handler: {}", req_.method,
                    req_.path.substr(0, 256), e.what());
    } catch (...) {
      spdlog::error("http: {} {}: unknown exception in a handler", req_.method,
                    req_.path.substr(0, 256));
    }
    *res = Answer(500, "internal error while handling the request");
    return false;
  }

  // Runs fn(res) on a worker and answers with res. The worker prepares the response and sends
  // what the socket takes at once (SendNow), so the answer leaves without waiting for an I/O
  // thread; the rest is written from the loop. While a worker holds the connection the loop
  // runs nothing of it but OnStop, which only reads phase_ (atomic) there.
  template <typename Fn>
  void AnswerOnWorker(Fn fn) {
    phase_ = Phase::kHandling;
    net::post(ctx_->workers(), [self = this->shared_from_this(), fn = std::move(fn)]() mutable {
      HttpResponse res;
      self->Guarded(fn, &res);
      self->Prepare(std::move(res));
      const size_t sent = SendNow(self->stream_, self->out_head_, self->out_body_);
      net::post(self->stream_.get_executor(), [self, sent] {
        self->out_pos_ = sent;
        self->WriteMore(&HttpConnection::AfterWrite);
      });
    });
  }

  void RunHandler() {
    auto fn = [this](HttpResponse* res) {
      plan_.handle(req_, body_, res);
      return true;
    };
    if (!plan_.nonblocking) return AnswerOnWorker(std::move(fn));
    HttpResponse res;
    Guarded(fn, &res);
    Respond(std::move(res));
  }

  void RunSink() {
    phase_ = Phase::kHandling;
    auto piece = std::make_shared<std::string>(std::move(piece_));
    piece_.clear();
    net::post(ctx_->workers(), [self = this->shared_from_this(), piece] {
      HttpResponse res;
      auto fn = [&](HttpResponse* r) { return self->plan_.sink->Write(*piece, r); };
      const bool ok = self->Guarded(fn, &res);
      net::post(self->stream_.get_executor(), [self, ok, res = std::move(res)]() mutable {
        if (ok) return self->BodyStep();
        if (!self->decoder_.done()) res.close = true;
        self->Respond(std::move(res));
      });
    });
  }

  void FinishSink() {
    AnswerOnWorker([this](HttpResponse* res) {
      plan_.sink->Finish(res);
      return true;
    });
  }

  // The sink (an upload: it may remove a staging folder) is destroyed on a worker.
  void DropSink() {
    if (plan_.sink == nullptr) return;
    net::post(ctx_->workers(), [sink = std::shared_ptr<BodySink>(std::move(plan_.sink))] {});
  }

  // ** responses **

  void RespondError(const HttpError& error) {
    HttpResponse res = Answer(error.status, error.message);
    res.close = true;
    Respond(std::move(res));
  }

  void Respond(HttpResponse res) {
    Prepare(std::move(res));
    WriteOut(&HttpConnection::AfterWrite);
  }

  // The response's bytes into out_head_/out_body_, and the request's state released.
  void Prepare(HttpResponse res) {
    phase_ = Phase::kWriting;
    if (res.close || refused_ || ctx_->stopping()) keep_alive_ = false;
    // An event stream is the connection's last response; HTTP/1.0 gets it unframed.
    chunked_ = res.stream != nullptr && req_.version == 11;
    if (res.stream != nullptr) keep_alive_ = false;
    out_head_ = SerializeHead(res, res.body.size(), keep_alive_, req_.version, chunked_);
    if (head_request_) {
      if (res.stream != nullptr) res.stream->Close();
    } else {
      out_body_ = std::move(res.body);
      source_ = std::move(res.stream);
    }
    // Only this response answers a HEAD: an error for a next request whose head does not parse
    // (so OnHead never sets the flag again) carries its body (found by tests/fuzz/net).
    head_request_ = false;
    Release(body_);
    DropSink();
    plan_ = RoutePlan();
  }

  void WriteOut(Step next) {
    out_pos_ = 0;
    WriteMore(next);
  }

  void WriteMore(Step next) {
    const size_t head = out_head_.size();
    const size_t total = head + out_body_.size();
    if (out_pos_ >= total) return ((*this).*next)();
    std::array<net::const_buffer, 2> buffers;
    if (out_pos_ < head) buffers[0] = net::buffer(out_head_.data() + out_pos_, head - out_pos_);
    const size_t body_pos = out_pos_ > head ? out_pos_ - head : 0;
    buffers[1] = net::buffer(out_body_.data() + body_pos, out_body_.size() - body_pos);
    beast::get_lowest_layer(stream_).expires_after(Ms(limits_.write_timeout_ms));
    stream_.async_write_some(
        buffers, [self = this->shared_from_this(), next](beast::error_code ec, size_t n) {
          if (self->closed_) return;
          if (ec) {
            if (ec == beast::error::timeout) {
              spdlog::debug("http: {} missed a write deadline, closing", self->client_);
            }
            return self->Close();
          }
          self->out_pos_ += n;
          self->WriteMore(next);
        });
  }

  void AfterWrite() {
    out_head_.clear();
    Release(out_body_);
    if (source_ != nullptr) return StartStreaming();
    if (!keep_alive_ || ctx_->stopping()) return Linger();
    idle_deadline_ = Clock::now() + Ms(limits_.keep_alive_timeout_ms);
    OnHeadBytes();  // a pipelined request may be buffered already
  }

  // ** event streams **

  void StartStreaming() {
    phase_ = Phase::kStreaming;
    std::weak_ptr<HttpConnection> weak = this->shared_from_this();
    source_->SetWake([weak, ex = stream_.get_executor()] {
      if (auto self = weak.lock()) net::post(ex, [self] { self->PumpStream(false); });
    });
    beast::get_lowest_layer(stream_).expires_never();
    DrainRead();  // notices the client closing while nothing is written
    ArmKeepAlive();
    PumpStream(false);
  }

  void ArmKeepAlive() {
    timer_.expires_after(source_->KeepAliveInterval());
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (!ec && self->phase_ == Phase::kStreaming) self->PumpStream(true);
    });
  }

  void PumpStream(bool keep_alive_due) {
    if (phase_ != Phase::kStreaming || writing_) return;
    bool end = false;
    std::string data = source_->Take(&end);
    if (!end && (ctx_->stopping() || stopped_)) {
      data += source_->StopMessage();
      end = true;
    }
    if (data.empty() && !end) {
      if (!keep_alive_due) return;
      data = source_->KeepAlive();
    }
    stream_end_ = end;
    out_head_ = chunked_ ? ChunkFrame(data, end) : std::move(data);
    writing_ = true;
    WriteOut(&HttpConnection::AfterStreamWrite);
  }

  void AfterStreamWrite() {
    writing_ = false;
    out_head_.clear();
    if (stream_end_) {
      source_->Close();
      source_ = nullptr;
      return Linger();
    }
    ArmKeepAlive();  // restarts the interval from this write
    PumpStream(false);
  }

  // A read that only watches for the client closing (during a stream, and while lingering).
  void DrainRead() {
    if (read_pending_) return;
    read_pending_ = true;
    stream_.async_read_some(net::buffer(rbuf_.get(), kReadBytes),
                            [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                              self->read_pending_ = false;
                              if (self->closed_) return;
                              if (ec) return self->Close();
                              if (self->phase_ == Phase::kStreaming) {
                                // Bytes sent during a stream (a pipelined request) are not served: the connection
                                // closes after the stream. Stop reading once enough arrived.
                                if (self->in_.size() >= kMaxPipelined) return;
                                self->in_.append(self->rbuf_.get(), n);
                              }
                              self->DrainRead();
                            });
  }

  // ** closing **

  void OnStop() {
    stopped_ = true;
    switch (phase_) {
      case Phase::kHead:
      case Phase::kBody:
        return Close();
      case Phase::kStreaming:
        return PumpStream(false);
      default:
        return;  // the response in progress is written with Connection: close
    }
  }

  void Linger() {
    phase_ = Phase::kClosing;
    if (source_ != nullptr) {
      source_->Close();
      source_ = nullptr;
    }
    ShutdownSend(stream_);
    timer_.expires_after(Ms(kLingerMs));
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (!ec) self->Close();
    });
    if (!read_pending_) beast::get_lowest_layer(stream_).expires_never();
    DrainRead();
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    phase_ = Phase::kClosing;
    timer_.cancel();
    beast::get_lowest_layer(stream_).close();
    if (source_ != nullptr) {
      source_->Close();
      source_ = nullptr;
    }
  }

  Stream stream_;
  net::steady_timer timer_;  // event-stream keep-alives, then the linger deadline
  HttpContext* const ctx_;
  const HttpLimits& limits_;
  const std::string client_;
  const bool refused_;
  std::unique_ptr<char[]> rbuf_;

  std::atomic<Phase> phase_{Phase::kHead};
  bool closed_ = false;
  std::atomic<bool> stopped_{false};
  bool read_pending_ = false;  // a DrainRead is outstanding
  std::string in_;             // bytes read and not consumed from in_begin_ on
  size_t in_begin_ = 0;
  HeadScanner scanner_;
  bool head_started_ = false;
  Clock::time_point idle_deadline_, head_deadline_, body_deadline_;

  int requests_ = 0;
  HttpRequest req_;
  bool head_request_ = false;
  bool keep_alive_ = true;
  RoutePlan plan_;
  BodyDecoder decoder_ = BodyDecoder::Fixed(0);
  std::string body_;   // the whole body (buffered routes)
  std::string piece_;  // the next piece for a sink

  std::string out_head_, out_body_;
  size_t out_pos_ = 0;
  bool chunked_ = false;
  std::shared_ptr<ResponseStream> source_;
  bool writing_ = false, stream_end_ = false;
  std::shared_ptr<void> keep_;  // what the stream refers to (a TLS connection's context)
};

}  // namespace

void ServeTlsConnection(net::ip::tcp::socket socket, std::shared_ptr<net::ssl::context> tls,
                        HttpContext* context, std::string client, std::string refusal) {
  beast::error_code ec;
  socket.set_option(net::ip::tcp::no_delay(true), ec);
  auto conn = std::make_shared<HttpConnection<TlsStream>>(TlsStream(std::move(socket), *tls), context,
                                                          std::move(client), !refusal.empty());
  conn->Keep(std::move(tls));  // the context may be replaced meanwhile (a renewed certificate)
  if (refusal.empty()) context->Register(conn.get(), conn);
  auto executor = conn->Executor();
  net::post(executor, [conn, refusal = std::move(refusal)]() mutable { conn->Start(std::move(refusal)); });
}

void ServeConnection(net::ip::tcp::socket socket, HttpContext* context, std::string client,
                     std::string refusal) {
  beast::error_code ec;
  socket.set_option(net::ip::tcp::no_delay(true), ec);
  auto conn = std::make_shared<HttpConnection<beast::tcp_stream>>(
      beast::tcp_stream(std::move(socket)), context, std::move(client), !refusal.empty());
  if (refusal.empty()) context->Register(conn.get(), conn);
  auto executor = conn->Executor();
  net::post(executor,
            [conn, refusal = std::move(refusal)]() mutable { conn->Start(std::move(refusal)); });
}

}  // namespace kiln::server
