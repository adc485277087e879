// SPDX-License-Identifier: Apache-2.0
// Reading a flat archive (a module package) into memory, refusing anything that is not a plain
// file at the top level.
#ifndef KILN_PLUGINS_PACKAGE_ARCHIVE_READER_H_
#define KILN_PLUGINS_PACKAGE_ARCHIVE_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::package {

// One file of an archive, read into memory.
struct ArchiveFile {
  std::string name;  // as in the archive, minus a leading "./"
  std::vector<uint8_t> data;
};

// The most a package may hold, all files together, uncompressed: far above any real module
// but low enough that a small hostile archive ("zip bomb") cannot make the loader exhaust
// memory before it is refused.
inline constexpr uint64_t kMaxArchiveBytes = uint64_t{4} << 30;
// The most files a package may hold (a module has a handful).
inline constexpr size_t kMaxArchiveFiles = 4096;

// Reads every file of the tar archive at `path` (gzip, bzip2, xz, zstd, ... or uncompressed:
// whatever compression libarchive recognises) into memory, in archive order. Nothing is
// written to disk. Accepted entries are regular files with a plain name, optionally prefixed
// "./"; a "." directory entry (as `tar -C dir .` writes) is skipped. Throws kiln::sdk::Error:
//   KILN_ERROR_NOT_FOUND  the file does not exist;
//   KILN_ERROR_VALUE      "<path>: not a readable tar archive: <libarchive's reason>", or
//                         "<path>: entry '<name>' <problem>" for an absolute path, a '..'
//                         component, a hard or symbolic link, a device file, FIFO or socket,
//                         a directory or a file inside one, a name that appears twice, more
//                         than kMaxArchiveBytes in all, more than kMaxArchiveFiles files, or
//                         data that cannot be read (truncated or corrupt archive);
//   KILN_ERROR_RUNTIME    the file cannot be opened for another reason.
std::vector<ArchiveFile> read_flat_archive(const std::string& path);

}  // namespace kiln::package

#endif  // KILN_PLUGINS_PACKAGE_ARCHIVE_READER_H_
