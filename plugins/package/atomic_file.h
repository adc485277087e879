// Replacing a file so that readers see either the old file or the complete new one.
#ifndef KILN_PLUGINS_PACKAGE_ATOMIC_FILE_H_
#define KILN_PLUGINS_PACKAGE_ATOMIC_FILE_H_

#include <string>

namespace kiln::package {

// A temporary file `<path>.tmp.<pid>` beside `path` (so that the final rename stays within one
// file system) that replaces `path` on commit(). Until then `path` is untouched, whatever
// happened to the temporary file; an AtomicFile destroyed without a successful commit()
// removes the temporary file, whoever wrote it (this process or a compiler it ran). Two
// concurrent exports to the same `path` from one process would share the temporary name:
// callers must not do that. Not copyable.
class AtomicFile {
 public:
  // Names the temporary file; creates nothing yet. Throws kiln::sdk::Error(KILN_ERROR_VALUE)
  // for an empty `path`.
  explicit AtomicFile(std::string path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  // Closes the descriptor of open() if still open and, unless committed, removes the
  // temporary file.
  ~AtomicFile();

  // The final path and the temporary one.
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

  // Creates (or truncates a stale) temporary file, mode 0666 minus the umask, and returns its
  // descriptor, owned by this object (closed by commit() or the destructor). Throws
  // kiln::sdk::Error: KILN_ERROR_NOT_FOUND when the folder of `path` does not exist,
  // KILN_ERROR_RUNTIME for other failures, naming the file and the reason.
  int open();
  // Flushes the temporary file to disk (it must exist: written through open() or by another
  // program) and renames it over `path`. Throws kiln::sdk::Error(KILN_ERROR_RUNTIME) naming the
  // file and the reason; the temporary file is then removed by the destructor and `path` is
  // unchanged.
  void commit();

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace kiln::package

#endif  // KILN_PLUGINS_PACKAGE_ATOMIC_FILE_H_
