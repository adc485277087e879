// SPDX-License-Identifier: Apache-2.0
#include "tvm/private_copy.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kiln/error.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/library_claims.hpp"
#include "kiln/sdk/support/memfd_load.h"
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

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw RuntimeError(fmt::format("cannot load the TVM library {}: {}", where, what));
}

// Claims `handle` for this copy alone (kiln/sdk/support/library_claims.hpp), or fails naming
// `where` after closing it.
void* claimed(void* handle, const std::string& where) {
  try {
    sdk::claim_library_or_close(handle, where);
  } catch (const sdk::Error& e) {
    throw RuntimeError(e.what());
  }
  return handle;
}

// How many names the temporary-file copy tries before giving up.
constexpr int kMaxTemporaryNames = 16;

// The copy as a temporary file, removed once loaded (a system without memfd_create or /proc,
// or one whose policy refuses them). The dynamic loader knows a library by the name it was
// opened under, and a removed file's name may come back from mkstemps while an earlier copy
// is still loaded under it: a name some loaded object has is never used.
void* load_from_temporary_file(std::span<const uint8_t> bytes, const std::string& where) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = tmp != nullptr && *tmp != '\0' ? std::string(tmp) : "/tmp";
  for (int attempt = 0; attempt < kMaxTemporaryNames; ++attempt) {
    std::string pattern = dir + "/kiln_tvm_XXXXXX.so";
    const int fd = mkstemps(pattern.data(), 3);
    if (fd < 0) fail(where, fmt::format("cannot create {}: {}", pattern, std::strerror(errno)));
    if (void* existing = dlopen(pattern.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
      dlclose(existing);  // an earlier copy still has this name: another one
      ::close(fd);
      ::unlink(pattern.c_str());
      continue;
    }
    const bool written = kiln_memfd_write_all(fd, bytes.data(), bytes.size()) == 0;
    const int write_errno = errno;
    ::close(fd);
    if (!written) {
      ::unlink(pattern.c_str());
      fail(where, fmt::format("cannot write {}: {}", pattern, std::strerror(write_errno)));
    }
    dlerror();
    void* handle = dlopen(pattern.c_str(), RTLD_NOW | RTLD_LOCAL);
    const char* why = handle == nullptr ? dlerror() : nullptr;
    ::unlink(pattern.c_str());  // the mapping stays
    if (handle == nullptr) fail(where, why != nullptr ? why : "unknown dlopen error");
    return claimed(handle, where);
  }
  fail(where,
       fmt::format("no free temporary file name in {} after {} tries", dir, kMaxTemporaryNames));
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
  // The memory file is loaded under a /proc/self/fd name that no loaded object has (the one
  // in-memory loader, kiln/sdk/support/memfd_load.h, probes for it); without /proc there is no
  // such name.
  if (::access("/proc/self/fd", F_OK) != 0) return load_from_temporary_file(bytes, where);
  char why[512];
  void* handle = nullptr;
  const std::string label = "kiln:" + name;
  switch (kiln_memfd_dlopen(bytes.data(), bytes.size(), label.c_str(), &handle, why, sizeof(why))) {
    case KILN_MEMFD_OK:
      return claimed(handle, where);
    case KILN_MEMFD_SYSTEM_ERROR:  // no memfd_create, or a policy that refuses it
      return load_from_temporary_file(bytes, where);
    default:
      fail(where, why);
  }
}

}  // namespace kiln::tvm_interop
