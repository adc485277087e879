// A private scratch directory that is removed with its contents when it goes out of scope.
#ifndef KILN_PLUGINS_PACKAGE_TEMP_DIR_H_
#define KILN_PLUGINS_PACKAGE_TEMP_DIR_H_

#include <string>

namespace kiln::package {

// A fresh directory made with mkdtemp() under the system temporary directory ($TMPDIR, else
// /tmp), readable only by this user. Not copyable: the destructor owns the removal.
class TempDir {
 public:
  // Creates `<tmp>/<prefix>XXXXXX`. Throws kiln::sdk::Error(KILN_ERROR_RUNTIME) naming the
  // directory and the reason when it cannot be created.
  explicit TempDir(const std::string& prefix);
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Removes the directory and everything in it; failures are ignored (nothing useful can be
  // done about them on a cleanup path).
  ~TempDir();

  // The absolute path of the directory.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kiln::package

#endif  // KILN_PLUGINS_PACKAGE_TEMP_DIR_H_
