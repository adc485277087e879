// SPDX-License-Identifier: Apache-2.0
#include "kiln/sdk/support/temp_dir.hpp"

#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::sdk {

TempDir::TempDir(std::string_view prefix) {
  if (prefix.find('/') != std::string_view::npos) {
    throw Error(KILN_ERROR_VALUE,
                "a temporary directory prefix must not contain '/': " + std::string(prefix));
  }
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" +
                        std::string(prefix) + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw Error(KILN_ERROR_RUNTIME, "cannot create a temporary directory from " + pattern + ": " +
                                        std::strerror(errno));
  }
  path_ = std::move(pattern);
}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    remove();
    path_ = std::exchange(other.path_, {});
  }
  return *this;
}

TempDir::~TempDir() { remove(); }

void TempDir::remove() noexcept {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  path_.clear();
}

}  // namespace kiln::sdk
