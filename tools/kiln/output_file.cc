// SPDX-License-Identifier: Apache-2.0
#include "output_file.h"

#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <system_error>

#include "commands.h"
#include "kiln/error.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/atomic_file.hpp"

namespace kiln::tool {

void write_output_file(const std::filesystem::path& path, std::string_view data) {
  if (path == "-") {
    std::cout.write(data.data(), static_cast<std::streamsize>(data.size()));
    std::cout.flush();
    if (!std::cout) throw RuntimeError("cannot write to stdout");
    return;
  }
  std::error_code status_ec;
  const std::filesystem::file_status status = std::filesystem::status(path, status_ec);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    if (std::filesystem::is_directory(status)) {
      throw UsageError(fmt::format("cannot write {}: it is a directory", path.string()));
    }
    std::ofstream out(path, std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.close();
    if (!out) throw RuntimeError(fmt::format("cannot write {}", path.string()));
    return;
  }
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  try {
    sdk::write_file_atomically(path, data);
  } catch (const sdk::Error& e) {
    throw RuntimeError(fmt::format("cannot write {}: {}", path.string(), e.what()));
  }
}

}  // namespace kiln::tool
