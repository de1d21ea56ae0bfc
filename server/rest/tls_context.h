// TlsContextSource: the OpenSSL context of the HTTP listener over TLS (issue #23), built from the
// --http-server-cert/-key (and --http-root-cert for mutual TLS) files: TLS 1.2 and 1.3 only. The
// files are checked for changes at most once per kTlsRefreshSeconds when a connection arrives; a
// change builds a new context for the connections that follow (open ones keep theirs), and a
// change that does not load keeps the previous context (logged). Thread-safe.
#pragma once

#include <chrono>
#include <ctime>
#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "boost/asio/ssl/context.hpp"
#include "server/core/tls_files.h"

namespace kiln::server {

class TlsContextSource {
 public:
  // INVALID_ARGUMENT naming the --http-* flag when the files do not load.
  static absl::StatusOr<std::unique_ptr<TlsContextSource>> Create(const TlsFiles& files);
  std::shared_ptr<boost::asio::ssl::context> Current();

 private:
  explicit TlsContextSource(TlsFiles files) : files_(std::move(files)) {}
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> Build() const;
  struct Stamp {
    std::time_t cert = 0, key = 0, ca = 0;
    long cert_ns = 0, key_ns = 0, ca_ns = 0;
    bool operator==(const Stamp&) const = default;
  };
  Stamp Read() const;

  const TlsFiles files_;
  std::mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> current_;  // guarded by mu_
  Stamp stamp_;                                         // guarded by mu_
  std::chrono::steady_clock::time_point checked_;       // guarded by mu_
};

}  // namespace kiln::server
