// TLS material of one listener (issue #23): PEM files named by kilnd's flags. The listeners
// (gRPC through gRPC's own TLS credentials, HTTP through Boost.Asio's OpenSSL streams) re-read the
// files when they change, so a renewed certificate is served to new connections without a restart
// and without dropping the connections already open.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace kiln::server {

struct TlsFiles {
  bool enabled = false;
  std::string cert;       // server certificate chain (PEM)
  std::string key;        // its private key (PEM)
  std::string client_ca;  // mutual TLS: CAs that sign client certificates (PEM); "" = no client auth
  bool mutual() const { return !client_ca.empty(); }
};

// Seconds between checks of the files for changes.
inline constexpr unsigned kTlsRefreshSeconds = 1;

// INVALID_ARGUMENT naming `flag_prefix` ("--grpc", "--http") and the file unless: the cert parses
// as PEM X.509, the key as a PEM private key matching it, and the client CA (when set) as PEM
// certificates.
absl::Status CheckTlsFiles(const TlsFiles& files, const std::string& flag_prefix);

}  // namespace kiln::server
