// SPDX-License-Identifier: Apache-2.0
// The one scratch directory of Kiln: a private directory removed with its contents when it goes
// out of scope. Used by the package plugin's exporters and, through kiln::TemporaryDirectory,
// by libkiln and the kiln tool.
#ifndef KILN_SDK_SUPPORT_TEMP_DIR_HPP_
#define KILN_SDK_SUPPORT_TEMP_DIR_HPP_

#include <filesystem>
#include <string_view>

namespace kiln::sdk {

// A fresh directory made with mkdtemp() (mode 0700) under $TMPDIR, else /tmp. Owns the
// directory: the destructor removes it and everything in it, also when the scope is left by an
// exception. Not copyable; movable (the moved-from object owns nothing).
class TempDir {
 public:
  // Creates `<$TMPDIR or /tmp>/<prefix>XXXXXX`. `prefix` must not contain '/'. Throws
  // kiln::sdk::Error: KILN_ERROR_VALUE for a prefix with '/', KILN_ERROR_RUNTIME naming the
  // pattern and the system's reason when the directory cannot be created.
  explicit TempDir(std::string_view prefix);
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Removes the directory with its contents; failures are ignored (nothing useful can be done
  // about them on a cleanup path).
  ~TempDir();

  // The absolute path of the directory; empty after a move.
  const std::filesystem::path& path() const { return path_; }

 private:
  // Removes path_ (if any) with its contents and clears it.
  void remove() noexcept;

  std::filesystem::path path_;
};

}  // namespace kiln::sdk

#endif  // KILN_SDK_SUPPORT_TEMP_DIR_HPP_
