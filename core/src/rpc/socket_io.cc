#include "rpc/socket_io.h"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <climits>

namespace kiln::rpc {

namespace {

using Clock = std::chrono::steady_clock;

// Waits for a connect() in progress on `fd` and returns its result (0 or an errno value).
int finish_connect(int fd, Clock::time_point deadline) noexcept {
  const int ready = poll_until(fd, POLLOUT, deadline);
  if (ready < 0) return errno;
  if (ready == 0) return ETIMEDOUT;
  int error = 0;
  socklen_t size = sizeof(error);
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) return errno;
  return error;
}

}  // namespace

int connect_until(int fd, const sockaddr* address, socklen_t length,
                  Clock::time_point deadline) noexcept {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return errno;
  const bool blocking = (flags & O_NONBLOCK) == 0;
  if (blocking && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return errno;
  int result = 0;
  if (::connect(fd, address, length) != 0) {
    result = errno;
    // EINTR (a blocking connect a signal interrupted) is EINPROGRESS: the handshake goes on
    // in the kernel. EALREADY: a connect() the caller started earlier (and a signal
    // interrupted) is still going on. Either way it is waited for, not started again.
    if (result == EINPROGRESS || result == EINTR || result == EALREADY) {
      result = finish_connect(fd, deadline);
    } else if (result == EISCONN) {
      result = 0;  // that earlier connect() has completed meanwhile
    }
  }
  if (blocking) ::fcntl(fd, F_SETFL, flags);
  return result;
}

int poll_until(int fd, short events, Clock::time_point deadline) noexcept {
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return 0;
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), INT_MAX)));
    if (ready > 0) return p.revents;
    if (ready < 0 && errno != EINTR) return -1;
    // Interrupted, or timed out (maybe a little early): wait for what is left, if anything.
  }
}

bool send_all(int fd, const void* data, size_t n) noexcept {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t sent = retry_on_signal([&] { return ::send(fd, p, n, MSG_NOSIGNAL); });
    if (sent <= 0) return false;
    p += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

}  // namespace kiln::rpc
