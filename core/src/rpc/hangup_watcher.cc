// SPDX-License-Identifier: Apache-2.0
#include "rpc/hangup_watcher.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "kiln/error.h"

namespace kiln::rpc {

HangupWatcher::HangupWatcher(int fd, std::atomic<bool>& cancelled)
    : fd_(fd), cancelled_(cancelled) {
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) {
    throw RuntimeError(
        fmt::format("cannot watch the session's connection: eventfd: {}", std::strerror(errno)));
  }
  thread_ = std::thread([this] { watch(); });
}

HangupWatcher::~HangupWatcher() {
  const uint64_t one = 1;
  while (::write(stop_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  thread_.join();
  ::close(stop_fd_);
}

void HangupWatcher::watch() {
  while (true) {
    // Only POLLRDHUP is asked for: readable data does not wake the thread (POLLHUP and
    // POLLERR are reported whatever is asked).
    pollfd fds[2] = {{fd_, POLLRDHUP, 0}, {stop_fd_, POLLIN, 0}};
    const int ready = ::poll(fds, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return;  // cannot watch; calls then run to their end as before
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) {
      hung_up_ = true;
      cancelled_ = true;
      return;
    }
  }
}

}  // namespace kiln::rpc
