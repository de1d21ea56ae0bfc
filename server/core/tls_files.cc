#include "server/core/tls_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioFree> Open(const std::string& path) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_file(path.c_str(), "r"));
}

}  // namespace

absl::Status CheckTlsFiles(const TlsFiles& files, const std::string& flag_prefix) {
  if (!files.enabled) return absl::OkStatus();
  auto bad = [&](const std::string& flag, const std::string& path, const char* why) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(flag_prefix, flag, "=", path, ": ", why));
  };
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag_prefix, "-use-ssl needs ", flag_prefix, "-server-cert and ",
                                                   flag_prefix, "-server-key"));
  }
  auto cert_bio = Open(files.cert);
  if (!cert_bio) return bad("-server-cert", files.cert, "cannot be read");
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return bad("-server-cert", files.cert, "is not a PEM certificate");
  auto key_bio = Open(files.key);
  if (!key_bio) return bad("-server-key", files.key, "cannot be read");
  std::unique_ptr<EVP_PKEY, KeyFree> key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!key) return bad("-server-key", files.key, "is not a PEM private key (or it is encrypted)");
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return bad("-server-key", files.key, "does not match the certificate");
  }
  if (files.mutual()) {
    auto ca_bio = Open(files.client_ca);
    if (!ca_bio) return bad("-root-cert", files.client_ca, "cannot be read");
    std::unique_ptr<X509, X509Free> ca(PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr));
    if (!ca) return bad("-root-cert", files.client_ca, "is not a PEM certificate");
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
