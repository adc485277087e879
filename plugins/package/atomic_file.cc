#include "atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::package {
namespace {

// Throws kiln::sdk::Error(code) with "<what> <file>: <strerror(error)>".
[[noreturn]] void throw_errno(int32_t code, const std::string& what, const std::string& file,
                              int error) {
  throw sdk::Error(code, what + " " + file + ": " + std::strerror(error));
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw sdk::Error(KILN_ERROR_VALUE, "the output path is empty");
  temp_path_ = path_ + ".tmp." + std::to_string(::getpid());
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

void AtomicFile::commit() {
  // Without the fsync a crash soon after the rename could leave `path` empty or partial on
  // some file systems, which is what the temporary file is there to prevent.
  int fd = fd_;
  fd_ = -1;
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
    throw sdk::Error(KILN_ERROR_RUNTIME,
                     "cannot rename " + temp_path_ + " to " + path_ + ": " + std::strerror(error));
  }
  committed_ = true;
}

}  // namespace kiln::package
