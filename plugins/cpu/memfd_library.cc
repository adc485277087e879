#include "memfd_library.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::cpu {
namespace {

// Closes the descriptor on every path out of dlopen_bytes.
// Closes a descriptor when it goes out of scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  ~FdCloser() { ::close(fd_); }

 private:
  int fd_;
};

// How many descriptor numbers dlopen_bytes tries before giving up on finding an unused name.
constexpr int kMaxNameProbes = 64;

// Throws KILN_ERROR_RUNTIME with `what` and strerror(error).
[[noreturn]] void throw_errno(const std::string& what, int error) {
  throw sdk::Error(KILN_ERROR_RUNTIME, what + ": " + std::strerror(error));
}

// Writes all `size` bytes to `fd`, retrying short writes; throws KILN_ERROR_RUNTIME.
void write_all(int fd, const void* data, size_t size, const std::string& label) {
  const auto* p = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("writing " + label + " to a memory file", errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

void* dlopen_bytes(const void* data, size_t size, const std::string& label) {
  if (data == nullptr || size == 0) {
    throw sdk::Error(KILN_ERROR_VALUE, "cannot load " + label + ": no bytes given");
  }
  const int fd = ::memfd_create(label.c_str(), MFD_CLOEXEC);
  if (fd < 0) throw_errno("memfd_create for " + label, errno);
  FdCloser closer(fd);
  write_all(fd, data, size, label);

  // The dynamic linker identifies a library by the name it was opened under before it looks
  // at the file, so "/proc/self/fd/<n>" must not be the name of a library still loaded: a
  // descriptor number is reused once closed, and an earlier in-memory library may still be
  // mapped (unloading is deferred while it is in use, or never happens for NODELETE ones).
  // Probe with RTLD_NOLOAD and move to a higher descriptor until the name is free. The lock
  // covers the process-wide link map, shared by every instance of this plugin.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<std::unique_ptr<FdCloser>> probed;
  int load_fd = fd;
  for (int attempt = 0;; ++attempt) {
    const std::string path = "/proc/self/fd/" + std::to_string(load_fd);
    void* existing = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (existing == nullptr) {
      // The loader opens the path again, so MFD_CLOEXEC on our descriptors does not matter
      // here; it only keeps them from leaking into a child that execs in the meantime.
      dlerror();
      void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* why = dlerror();
        throw sdk::Error(KILN_ERROR_VALUE, "cannot load " + label + " from memory: " +
                                               (why != nullptr ? why : "dlopen failed"));
      }
      return handle;
    }
    ::dlclose(existing);
    if (attempt == kMaxNameProbes) {
      throw sdk::Error(KILN_ERROR_RUNTIME, "cannot load " + label +
                                               ": no free /proc/self/fd name after " +
                                               std::to_string(kMaxNameProbes) + " tries");
    }
    const int next = ::fcntl(fd, F_DUPFD_CLOEXEC, load_fd + 1);
    if (next < 0) throw_errno("duplicating the memory file of " + label, errno);
    probed.push_back(std::make_unique<FdCloser>(next));
    load_fd = next;
  }
}

}  // namespace kiln::cpu
