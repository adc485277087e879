// TemporaryDirectory: a private directory under $TMPDIR (else /tmp), removed with everything
// in it when the object goes away, also when the scope is left by an exception.
#ifndef KILN_TEMP_DIR_H_
#define KILN_TEMP_DIR_H_

#include <filesystem>
#include <string>

namespace kiln {

class TemporaryDirectory {
 public:
  // Creates <$TMPDIR or /tmp>/<prefix>XXXXXX with mode 0700. Throws RuntimeError naming the
  // pattern and the system's reason when it cannot.
  explicit TemporaryDirectory(const std::string& prefix);
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace kiln

#endif  // KILN_TEMP_DIR_H_
