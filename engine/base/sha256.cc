#include "engine/base/sha256.h"

#include <openssl/evp.h>

#include "engine/base/check.h"

namespace kiln {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  KILN_CHECK(ctx_ != nullptr);
  KILN_CHECK(EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) == 1);
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::Update(const void* data, size_t n) {
  KILN_CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n) == 1);
}

Digest Sha256::Final() {
  Digest d{};
  unsigned int len = 0;
  KILN_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), d.data(), &len) == 1);
  return d;
}

Digest Sha256Of(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.Final();
}

std::string DigestHex(const Digest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(64, '0');
  for (size_t i = 0; i < d.size(); ++i) {
    s[2 * i] = kHex[d[i] >> 4];
    s[2 * i + 1] = kHex[d[i] & 15];
  }
  return s;
}

}  // namespace kiln
