#include "kiln/temp_dir.h"

#include "kiln/error.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/temp_dir.hpp"

namespace kiln {

TemporaryDirectory::TemporaryDirectory(const std::string& prefix) {
  try {
    dir_ = std::make_unique<sdk::TempDir>(prefix);
  } catch (const sdk::Error& e) {
    if (e.code() == KILN_ERROR_VALUE) throw ValueError(e.what());
    throw RuntimeError(e.what());
  }
}

TemporaryDirectory::~TemporaryDirectory() = default;

const std::filesystem::path& TemporaryDirectory::path() const { return dir_->path(); }

}  // namespace kiln
