// SPDX-License-Identifier: Apache-2.0
#include "archive_reader.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string_view>

#include "kiln/sdk/plugin.hpp"

namespace kiln::package {
namespace {

// How much archive_read_data() is asked for at a time, and how much is reserved up front for
// an entry: a declared size is not trusted for a large allocation before the data arrives.
constexpr size_t kReadChunk = size_t{1} << 20;
constexpr size_t kMaxReserve = size_t{64} << 20;

// Frees a libarchive reader (which also closes the file).
struct ReaderDeleter {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
using Reader = std::unique_ptr<struct archive, ReaderDeleter>;

// Throws kiln::sdk::Error(KILN_ERROR_VALUE, message).

// libarchive's description of its last error, or a fallback.
std::string reason(struct archive* a) {
  const char* text = archive_error_string(a);
  return text != nullptr ? text : "unknown libarchive error";
}

// True when one of the '/'-separated components of `name` is "..".
bool has_parent_component(std::string_view name) {
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    if (name.substr(start, end - start) == "..") return true;
    start = end + 1;
  }
  return false;
}

// `name` without leading "./" prefixes (tar's way of naming the files of the current folder).
std::string strip_current_dir(std::string name) {
  while (name.size() >= 2 && name[0] == '.' && name[1] == '/') {
    size_t skip = 2;
    while (skip < name.size() && name[skip] == '/') ++skip;
    name.erase(0, skip);
  }
  return name;
}

// Checks the type of `entry` (named `where` in messages); returns false for a directory entry
// that stands for the archive's own folder ("." or "./"), which is skipped.
bool check_type(struct archive_entry* entry, const std::string& name, const std::string& where) {
  if (const char* target = archive_entry_hardlink(entry)) {
    sdk::throw_value_error(where + " is a hard link (to '" + target +
                           "'); packages hold regular files only");
  }
  switch (archive_entry_filetype(entry)) {
    case AE_IFREG:
      return true;
    case AE_IFDIR: {
      const std::string stripped = strip_current_dir(name);
      if (name == "." || stripped.empty() || stripped == ".") return false;
      sdk::throw_value_error(where + " is a directory; packages are flat");
    }
    case AE_IFLNK: {
      const char* target = archive_entry_symlink(entry);
      sdk::throw_value_error(where + " is a symbolic link (to '" +
                             (target != nullptr ? target : "?") +
                             "'); packages hold regular files only");
    }
    case AE_IFCHR:
    case AE_IFBLK:
      sdk::throw_value_error(where + " is a device file; packages hold regular files only");
    case AE_IFIFO:
      sdk::throw_value_error(where + " is a FIFO; packages hold regular files only");
    case AE_IFSOCK:
      sdk::throw_value_error(where + " is a socket; packages hold regular files only");
    default:
      sdk::throw_value_error(where + " is not a regular file");
  }
}

// Reads the data of the current entry of `a`, named `where` in messages. `declared` is the size
// its header gives (reserved up to kMaxReserve); more than `budget` bytes is an error, checked
// as the data arrives, so that a header that lies about the size cannot get past the limit.
std::vector<uint8_t> read_data(struct archive* a, uint64_t declared, uint64_t budget,
                               const std::string& where) {
  std::vector<uint8_t> data;
  data.reserve(static_cast<size_t>(std::min<uint64_t>(declared, kMaxReserve)));
  for (;;) {
    const size_t old_size = data.size();
    // One byte past the budget is enough to tell that the entry is too big.
    const uint64_t room = budget + 1 - old_size;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kReadChunk, room));
    data.resize(old_size + want);
    const la_ssize_t n = archive_read_data(a, data.data() + old_size, want);
    if (n < 0) sdk::throw_value_error(where + ": cannot read its data: " + reason(a));
    data.resize(old_size + static_cast<size_t>(n));
    if (n == 0) break;
    if (data.size() > budget) {
      sdk::throw_value_error(where + " makes the package larger than " +
                             std::to_string(kMaxArchiveBytes >> 30) +
                             " GiB uncompressed, the most a package may hold");
    }
  }
  return data;
}

}  // namespace

std::vector<ArchiveFile> read_flat_archive(const std::string& path) {
  Reader reader(archive_read_new());
  if (!reader) throw sdk::Error(KILN_ERROR_OUT_OF_MEMORY, "cannot create an archive reader");
  struct archive* a = reader.get();
  // Any compression (ARCHIVE_WARN means "through an external program"; fine), tar only.
  archive_read_support_filter_all(a);
  archive_read_support_format_tar(a);
  // Opening already reads the start of the file to recognise its compression and format.
  // libarchive reports a format it does not recognise with EILSEQ (its
  // ARCHIVE_ERRNO_FILE_FORMAT) and its own problems with -1; other codes are system errors.
  if (archive_read_open_filename(a, path.c_str(), 64 * 1024) != ARCHIVE_OK) {
    const int error = archive_errno(a);
    if (error > 0 && error != EILSEQ) {
      throw sdk::Error(error == ENOENT ? KILN_ERROR_NOT_FOUND : KILN_ERROR_RUNTIME,
                       "cannot open " + path + ": " + std::strerror(error));
    }
    sdk::throw_value_error(path + ": not a readable tar archive: " + reason(a));
  }

  std::vector<ArchiveFile> files;
  std::set<std::string> names;
  uint64_t total = 0;
  std::string previous;  // the last entry's name, to place errors between entries
  for (size_t index = 0;; ++index) {
    struct archive_entry* entry = nullptr;
    const int status = archive_read_next_header(a, &entry);
    if (status == ARCHIVE_EOF) break;
    if (status < ARCHIVE_WARN) {
      if (index == 0) sdk::throw_value_error(path + ": not a readable tar archive: " + reason(a));
      sdk::throw_value_error(path, ": cannot read the entry after '", previous, "': ", reason(a));
    }
    if (status == ARCHIVE_WARN) {
      sdk::log(KILN_LOG_WARN, "%s: %s", path.c_str(), reason(a).c_str());
    }
    const char* raw = archive_entry_pathname(entry);
    if (raw == nullptr) raw = archive_entry_pathname_utf8(entry);
    if (raw == nullptr || *raw == '\0') {
      sdk::throw_value_error(path + ": entry #" + std::to_string(index) + " has no name");
    }
    const std::string name = raw;
    previous = name;
    const std::string where = path + ": entry '" + name + "'";
    // Path checks first: they are what an extracting tool would get wrong.
    if (name[0] == '/')
      sdk::throw_value_error(where + " has an absolute path; packages hold relative names only");
    if (has_parent_component(name)) sdk::throw_value_error(where + " has a '..' component");
    if (!check_type(entry, name, where)) continue;
    const std::string flat = strip_current_dir(name);
    if (flat.empty() || flat.find('/') != std::string::npos) {
      sdk::throw_value_error(where + " is inside a folder; packages are flat");
    }
    if (!names.insert(flat).second) sdk::throw_value_error(where + " appears more than once");
    if (files.size() == kMaxArchiveFiles) {
      sdk::throw_value_error(path + ": more than " + std::to_string(kMaxArchiveFiles) +
                             " files, the most a package may hold");
    }
    const uint64_t budget = kMaxArchiveBytes - total;
    uint64_t declared = 0;
    if (archive_entry_size_is_set(entry)) {
      const la_int64_t size = archive_entry_size(entry);
      if (size < 0) sdk::throw_value_error(where + " has a negative size");
      declared = static_cast<uint64_t>(size);
      if (declared > budget) {
        sdk::throw_value_error(where + " is " + std::to_string(declared) +
                               " bytes, which makes the package larger " + "than " +
                               std::to_string(kMaxArchiveBytes >> 30) +
                               " GiB uncompressed, the most a package may hold");
      }
    }
    std::vector<uint8_t> data = read_data(a, declared, budget, where);
    if (archive_entry_size_is_set(entry) && data.size() != declared) {
      sdk::throw_value_error(where + " is truncated: " + std::to_string(data.size()) + " of " +
                             std::to_string(declared) + " bytes");
    }
    total += data.size();
    files.push_back(ArchiveFile{flat, std::move(data)});
  }
  return files;
}

}  // namespace kiln::package
