#include "server/rest/tls_context.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kiln::server {

namespace ssl = boost::asio::ssl;

absl::StatusOr<std::unique_ptr<TlsContextSource>> TlsContextSource::Create(const TlsFiles& files) {
  if (absl::Status s = CheckTlsFiles(files, "--http"); !s.ok()) return s;
  std::unique_ptr<TlsContextSource> source(new TlsContextSource(files));
  absl::StatusOr<std::shared_ptr<ssl::context>> ctx = source->Build();
  if (!ctx.ok()) return ctx.status();
  source->current_ = *std::move(ctx);
  source->stamp_ = source->Read();
  source->checked_ = std::chrono::steady_clock::now();
  return source;
}

absl::StatusOr<std::shared_ptr<ssl::context>> TlsContextSource::Build() const {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                   ec);
  if (!ec) ctx->use_certificate_chain_file(files_.cert, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--http-server-cert=", files_.cert, ": ", ec.message()));
  ctx->use_private_key_file(files_.key, ssl::context::pem, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--http-server-key=", files_.key, ": ", ec.message()));
  if (files_.mutual()) {
    ctx->load_verify_file(files_.client_ca, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--http-root-cert=", files_.client_ca, ": ", ec.message()));
    ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec);
  } else {
    ctx->set_verify_mode(ssl::verify_none, ec);
  }
  if (ec) return absl::InternalError(absl::StrCat("TLS: ", ec.message()));
  return ctx;
}

TlsContextSource::Stamp TlsContextSource::Read() const {
  Stamp s;
  struct stat st;
  if (::stat(files_.cert.c_str(), &st) == 0) s.cert = st.st_mtim.tv_sec, s.cert_ns = st.st_mtim.tv_nsec;
  if (::stat(files_.key.c_str(), &st) == 0) s.key = st.st_mtim.tv_sec, s.key_ns = st.st_mtim.tv_nsec;
  if (files_.mutual() && ::stat(files_.client_ca.c_str(), &st) == 0) {
    s.ca = st.st_mtim.tv_sec, s.ca_ns = st.st_mtim.tv_nsec;
  }
  return s;
}

std::shared_ptr<ssl::context> TlsContextSource::Current() {
  std::lock_guard<std::mutex> l(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - checked_ < std::chrono::seconds(kTlsRefreshSeconds)) return current_;
  checked_ = now;
  const Stamp stamp = Read();
  if (stamp == stamp_) return current_;
  if (absl::Status s = CheckTlsFiles(files_, "--http"); !s.ok()) {
    spdlog::error("http: TLS files changed but do not load ({}); serving the previous certificate",
                  std::string(s.message()));
    return current_;  // stamp_ kept: tried again at the next check
  }
  absl::StatusOr<std::shared_ptr<ssl::context>> ctx = Build();
  if (!ctx.ok()) {
    spdlog::error("http: {}; serving the previous certificate", std::string(ctx.status().message()));
    return current_;
  }
  current_ = *std::move(ctx);
  stamp_ = stamp;
  spdlog::info("http: TLS certificate reloaded");
  return current_;
}

}  // namespace kiln::server
