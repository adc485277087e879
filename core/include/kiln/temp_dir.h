// TemporaryDirectory: a private directory under $TMPDIR (else /tmp), removed with everything
// in it when the object goes away, also when the scope is left by an exception. A thin wrapper
// over the SDK's one temporary directory, kiln::sdk::TempDir (kiln/sdk/support/temp_dir.hpp),
// that keeps libkiln's error types; the SDK type stays out of this public header because the
// support library is linked into libkiln privately.
#ifndef KILN_TEMP_DIR_H_
#define KILN_TEMP_DIR_H_

#include <filesystem>
#include <memory>
#include <string>

namespace kiln {
namespace sdk {
class TempDir;
}  // namespace sdk

class TemporaryDirectory {
 public:
  // Creates <$TMPDIR or /tmp>/<prefix>XXXXXX with mode 0700. Throws RuntimeError naming the
  // pattern and the system's reason when it cannot (ValueError for a prefix with '/').
  explicit TemporaryDirectory(const std::string& prefix);
  // Removes the directory and its contents; failures are ignored.
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  // The absolute path of the directory.
  const std::filesystem::path& path() const;

 private:
  std::unique_ptr<sdk::TempDir> dir_;
};

}  // namespace kiln

#endif  // KILN_TEMP_DIR_H_
