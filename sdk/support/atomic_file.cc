// SPDX-License-Identifier: Apache-2.0
#include "kiln/sdk/support/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::sdk {
namespace {

// Throws kiln::sdk::Error(code) with "<what> <file>: <strerror(error)>".
[[noreturn]] void throw_errno(int32_t code, const std::string& what,
                              const std::filesystem::path& file, int error) {
  throw Error(code, what + " " + file.string() + ": " + std::strerror(error));
}

}  // namespace

AtomicFile::AtomicFile(std::filesystem::path path) : path_(std::move(path)) {
  if (path_.empty()) throw Error(KILN_ERROR_VALUE, "the output path is empty");
  static std::atomic<uint64_t> sequence{0};
  temp_path_ = path_.string() + ".tmp." + std::to_string(::getpid()) + "." +
               std::to_string(sequence.fetch_add(1, std::memory_order_relaxed));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

int AtomicFile::open() {
  if (fd_ >= 0) return fd_;
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    const int error = errno;
    throw_errno(error == ENOENT ? KILN_ERROR_NOT_FOUND : KILN_ERROR_RUNTIME, "cannot create",
                temp_path_, error);
  }
  return fd_;
}

void AtomicFile::write(const void* data, size_t size) {
  const int fd = open();
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    // write() returning 0 for a regular file means no progress is possible.
    if (n <= 0) throw_errno(KILN_ERROR_RUNTIME, "cannot write", temp_path_, n < 0 ? errno : EIO);
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  // Without the fsync a crash soon after the rename could leave `path` empty or partial on
  // some file systems, which is what the temporary file is there to prevent.
  int fd = std::exchange(fd_, -1);
  if (fd < 0) fd = ::open(temp_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno(KILN_ERROR_RUNTIME, "cannot open", temp_path_, errno);
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    throw_errno(KILN_ERROR_RUNTIME, "cannot flush", temp_path_, error);
  }
  // close() reports write-back errors of some file systems (NFS) only here.
  if (::close(fd) != 0) throw_errno(KILN_ERROR_RUNTIME, "cannot close", temp_path_, errno);
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    throw Error(KILN_ERROR_RUNTIME, "cannot rename " + temp_path_.string() + " to " +
                                        path_.string() + ": " + std::strerror(error));
  }
  committed_ = true;
}

void write_file_atomically(const std::filesystem::path& path, std::string_view data) {
  AtomicFile file(path);
  file.write(data);
  file.commit();
}

}  // namespace kiln::sdk
