// SPDX-License-Identifier: Apache-2.0
// SHA-256 (FIPS 180-4): the integrity checks of package artifacts (plugins/package) and of the
// OpenCL program cache, whose keys name programs by the hash of their source and options; and
// HMAC-SHA256 (RFC 2104) for the RPC token challenge. A local implementation: nothing else in
// Kiln needs a crypto library.
#ifndef KILN_SDK_SUPPORT_SHA256_HPP_
#define KILN_SDK_SUPPORT_SHA256_HPP_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::sdk {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
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
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace kiln::sdk

#endif  // KILN_SDK_SUPPORT_SHA256_HPP_
