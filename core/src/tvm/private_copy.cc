// SPDX-License-Identifier: Apache-2.0
#include "tvm/private_copy.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "kiln/error.h"
#include "tvm/tvm_ffi_abi.h"

namespace kiln::tvm_interop {

namespace {

bool is_ffi_import(const ElfSymbol& s) {
  if (s.defined) return false;
  for (const char* name : kFfiImports) {
    if (s.name == name) return true;
  }
  return false;
}

// Writes all of `bytes` to `fd`; false with errno set on failure.
bool write_all(int fd, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw RuntimeError(fmt::format("cannot load the TVM library {}: {}", where, what));
}

void* dlopen_path(const std::string& path, const std::string& where) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    fail(where, why != nullptr ? why : "unknown dlopen error");
  }
  return handle;
}

// The copy as a temporary file, removed once loaded (a system without memfd_create, or one
// whose policy refuses it).
void* load_from_temporary_file(std::span<const uint8_t> bytes, const std::string& where) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = (tmp != nullptr && *tmp != '\0' ? std::string(tmp) : "/tmp");
  pattern += "/kiln_tvm_XXXXXX.so";
  const int fd = mkstemps(pattern.data(), 3);
  if (fd < 0) fail(where, fmt::format("cannot create {}: {}", pattern, std::strerror(errno)));
  const bool written = write_all(fd, bytes);
  const int write_errno = errno;
  ::close(fd);
  if (!written) {
    ::unlink(pattern.c_str());
    fail(where, fmt::format("cannot write {}: {}", pattern, std::strerror(write_errno)));
  }
  void* handle = nullptr;
  try {
    handle = dlopen_path(pattern, where);
  } catch (...) {
    ::unlink(pattern.c_str());
    throw;
  }
  ::unlink(pattern.c_str());  // the mapping stays
  return handle;
}

}  // namespace

void rename_ffi_imports(std::vector<uint8_t>& file, const std::vector<ElfSymbol>& symbols,
                        const std::string& where) {
  constexpr size_t kPrefix = sizeof(kFfiPrefix) - 1;
  for (const ElfSymbol& s : symbols) {
    if (!is_ffi_import(s)) continue;
    // A symbol that keeps its name must not share these bytes (the linker may point a name at
    // the tail of a longer one).
    const uint64_t begin = s.name_at;
    const uint64_t end = s.name_at + s.name.size();
    for (const ElfSymbol& other : symbols) {
      if (is_ffi_import(other)) continue;
      const uint64_t o_begin = other.name_at;
      const uint64_t o_end = other.name_at + other.name.size();
      if (o_begin < end && begin < o_end) {
        throw ValueError(
            fmt::format("{}: the name of the import {} shares its bytes with the symbol {}; "
                        "Kiln cannot rename the import in its private copy",
                        where, s.name, other.name));
      }
    }
    if (end > file.size() || std::string_view(reinterpret_cast<const char*>(file.data() + begin),
                                              kPrefix) != std::string_view(kFfiPrefix, kPrefix)) {
      throw ValueError(
          fmt::format("{}: the name of the import {} is not at byte {}", where, s.name, begin));
    }
    std::memcpy(file.data() + begin, kPrivateFfiPrefix, kPrefix);
  }
}

void* load_private_copy(std::span<const uint8_t> bytes, const std::string& name,
                        const std::string& where) {
  const int fd = memfd_create(("kiln:" + name).c_str(), MFD_CLOEXEC);
  if (fd < 0) return load_from_temporary_file(bytes, where);
  if (!write_all(fd, bytes)) {
    const int write_errno = errno;
    ::close(fd);
    fail(where, fmt::format("cannot write its private copy ({} bytes): {}", bytes.size(),
                            std::strerror(write_errno)));
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (::access(path.c_str(), F_OK) != 0) {  // no /proc (a bare chroot)
    ::close(fd);
    return load_from_temporary_file(bytes, where);
  }
  void* handle = nullptr;
  try {
    handle = dlopen_path(path, where);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);  // the mapping stays
  return handle;
}

}  // namespace kiln::tvm_interop
