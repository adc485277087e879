// SPDX-License-Identifier: Apache-2.0
#include "kiln/sdk/support/sha256.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <stdexcept>
#include <utility>

namespace kiln::sdk {
namespace {

EVP_MD_CTX* native(void* context) { return static_cast<EVP_MD_CTX*>(context); }

[[noreturn]] void fail(const char* what) {
  throw std::runtime_error(std::string("SHA-256: libcrypto's ") + what + " failed");
}

}  // namespace

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  if (context_ == nullptr) fail("EVP_MD_CTX_new");
  if (EVP_DigestInit_ex(native(context_), EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(native(context_));
    fail("EVP_DigestInit_ex");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(native(context_)); }

Sha256::Sha256(Sha256&& other) noexcept : context_(std::exchange(other.context_, nullptr)) {}

Sha256& Sha256::operator=(Sha256&& other) noexcept {
  if (this != &other) {
    EVP_MD_CTX_free(native(context_));
    context_ = std::exchange(other.context_, nullptr);
  }
  return *this;
}

void Sha256::update(const void* data, size_t size) {
  if (size == 0) return;
  if (context_ == nullptr || EVP_DigestUpdate(native(context_), data, size) != 1) {
    fail("EVP_DigestUpdate");
  }
}

Sha256::Digest Sha256::finish() {
  Digest out{};
  unsigned int length = 0;
  if (context_ == nullptr || EVP_DigestFinal_ex(native(context_), out.data(), &length) != 1 ||
      length != out.size()) {
    fail("EVP_DigestFinal_ex");
  }
  return out;
}

Sha256::Digest Sha256::of(const void* data, size_t size) {
  Digest out{};
  unsigned int length = 0;
  if (EVP_Digest(data, size, out.data(), &length, EVP_sha256(), nullptr) != 1 ||
      length != out.size()) {
    fail("EVP_Digest");
  }
  return out;
}

Sha256::Digest Sha256::hmac(std::string_view key, const void* data, size_t size) {
  Digest out{};
  unsigned int length = 0;
  // A zero-length key is legal HMAC; libcrypto wants a non-null pointer for it.
  static const unsigned char kEmpty = 0;
  const void* key_bytes = key.empty() ? static_cast<const void*>(&kEmpty) : key.data();
  if (HMAC(EVP_sha256(), key_bytes, static_cast<int>(key.size()),
           static_cast<const unsigned char*>(data), size, out.data(), &length) == nullptr ||
      length != out.size()) {
    fail("HMAC");
  }
  return out;
}

std::string Sha256::hex(const Digest& digest) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t byte : digest) {
    out += kDigits[byte >> 4];
    out += kDigits[byte & 15];
  }
  return out;
}

}  // namespace kiln::sdk
