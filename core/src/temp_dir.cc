#include "kiln/temp_dir.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>

#include "kiln/error.h"

namespace kiln {

TemporaryDirectory::TemporaryDirectory(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" + prefix + "XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw RuntimeError(fmt::format("cannot create a temporary directory from {}: {}", pattern,
                                   std::strerror(errno)));
  }
  path_ = pattern;
}

TemporaryDirectory::~TemporaryDirectory() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace kiln
