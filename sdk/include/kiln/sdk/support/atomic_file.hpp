// SPDX-License-Identifier: Apache-2.0
// The one atomic file writer of Kiln: replacing a file so that readers see either the old file
// or the complete new one, never a partial write. Used by the package exporters, the OpenCL
// program cache, the kiln tool's output files and libkiln's .npy writer.
#ifndef KILN_SDK_SUPPORT_ATOMIC_FILE_HPP_
#define KILN_SDK_SUPPORT_ATOMIC_FILE_HPP_

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace kiln::sdk {

// A temporary file `<path>.tmp.<pid>.<n>` beside `path` (so that the final rename stays within
// one file system; <n> counts AtomicFiles in this process, so concurrent writers never share a
// temporary name) that replaces `path` on commit(). Until then `path` is untouched, whatever
// happened to the temporary file; an AtomicFile destroyed without a successful commit() removes
// the temporary file, whoever wrote it (this process, or a program it ran that was given
// temp_path()). Not copyable or movable.
class AtomicFile {
 public:
  // Names the temporary file; creates nothing yet. Throws kiln::sdk::Error(KILN_ERROR_VALUE)
  // for an empty `path`.
  explicit AtomicFile(std::filesystem::path path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  // Closes the descriptor of open() if still open and, unless committed, removes the temporary
  // file. Never throws.
  ~AtomicFile();

  // The final path and the temporary one.
  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temp_path() const { return temp_path_; }

  // Creates (or truncates a stale) temporary file, mode 0666 minus the umask, and returns its
  // descriptor, owned by this object (closed by commit() or the destructor); later calls return
  // the same descriptor. Throws kiln::sdk::Error naming the file and the reason:
  // KILN_ERROR_NOT_FOUND when the folder of `path` does not exist, else KILN_ERROR_RUNTIME.
  int open();
  // Appends `size` bytes at `data` (borrowed) to the temporary file, opening it first if
  // needed; retries short and interrupted writes. Throws kiln::sdk::Error as open() does, and
  // KILN_ERROR_RUNTIME naming the file and the reason (ENOSPC, EFBIG, EIO...) when a write
  // fails; `path` is then unchanged and the partial temporary file goes with this object.
  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Flushes the temporary file to disk (it must exist: written through open()/write() or by
  // another program) and renames it over `path`. Throws kiln::sdk::Error(KILN_ERROR_RUNTIME)
  // naming the file and the reason; the temporary file is then removed by the destructor and
  // `path` is unchanged. Call at most once.
  void commit();

 private:
  std::filesystem::path path_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Replaces `path` with `data` through an AtomicFile: readers see the old file or all of `data`.
// Throws kiln::sdk::Error as AtomicFile::open, write and commit do.
void write_file_atomically(const std::filesystem::path& path, std::string_view data);

}  // namespace kiln::sdk

#endif  // KILN_SDK_SUPPORT_ATOMIC_FILE_HPP_
