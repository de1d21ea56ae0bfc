// SHA-256 digests (OpenSSL underneath). Used for structural keys of UOps and every cache key.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

using Digest = std::array<uint8_t, 32>;

// Incremental hasher. Not thread-safe; cheap to create.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t n);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  // The string's length (8 bytes), then the string: fields hashed one after another cannot run into each other.
  void UpdateField(std::string_view s) {
    const uint64_t n = s.size();
    Update(&n, sizeof(n));
    Update(s);
  }
  Digest Final();

 private:
  void* ctx_;
};

Digest Sha256Of(std::string_view data);
std::string DigestHex(const Digest& d);

}  // namespace kiln
