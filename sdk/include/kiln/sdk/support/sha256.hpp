// SPDX-License-Identifier: Apache-2.0
// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) through OpenSSL's libcrypto: the integrity
// checks of package artifacts (plugins/package), the keys of the OpenCL program cache (programs
// named by the hash of their source and options), and module identities (`kiln ab`,
// kiln-conformance reports). libcrypto is a dependency of Kiln already (TLS for RPC), and a
// maintained implementation is both the rule for crypto and much faster than a local one
// (SHA extensions where the CPU has them).
#ifndef KILN_SDK_SUPPORT_SHA256_HPP_
#define KILN_SDK_SUPPORT_SHA256_HPP_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::sdk {

// An incremental SHA-256. Move-only: it owns a libcrypto digest context. Every call throws
// std::runtime_error if libcrypto fails (out of memory), never returns a wrong digest.
class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  ~Sha256();
  Sha256(Sha256&& other) noexcept;
  Sha256& operator=(Sha256&& other) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  // Hashes `size` more bytes at `data`.
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  // The digest of everything hashed; the object must not be updated afterwards.
  Digest finish();

  // One-shot helpers.
  static Digest of(const void* data, size_t size);
  static std::string hex(const Digest& digest);  // 64 lowercase hex digits
  // HMAC-SHA256 of `size` bytes at `data` under `key` (any length; RFC 2104 / RFC 4231).
  static Digest hmac(std::string_view key, const void* data, size_t size);

 private:
  void* context_ = nullptr;  // EVP_MD_CTX*, owned (kept out of this header: no OpenSSL types)
};

}  // namespace kiln::sdk

#endif  // KILN_SDK_SUPPORT_SHA256_HPP_
