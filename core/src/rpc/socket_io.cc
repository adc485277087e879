// SPDX-License-Identifier: Apache-2.0
#include "rpc/socket_io.h"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <climits>

#include "kiln/detail/cancellation.h"

namespace kiln::rpc {

namespace {

using Clock = std::chrono::steady_clock;

// Waits (with `wait`: poll_until or poll_until_interruptible) for a connect() in progress on
// `fd` and returns its result (0 or an errno value).
template <typename Wait>
int finish_connect(int fd, Clock::time_point deadline, Wait wait) {
  const int ready = wait(fd, POLLOUT, deadline);
  if (ready < 0) return errno;
  if (ready == 0) return ETIMEDOUT;
  int error = 0;
  socklen_t size = sizeof(error);
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) return errno;
  return error;
}

// connect_until, waiting with `wait`; what `wait` throws passes through (the socket's blocking
// mode is restored first).
template <typename Wait>
int connect_with(int fd, const sockaddr* address, socklen_t length, Clock::time_point deadline,
                 Wait wait) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return errno;
  const bool blocking = (flags & O_NONBLOCK) == 0;
  if (blocking && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return errno;
  struct RestoreBlocking {
    int fd;
    int flags;
    bool blocking;
    ~RestoreBlocking() {
      if (blocking) ::fcntl(fd, F_SETFL, flags);
    }
  } restore{fd, flags, blocking};
  if (::connect(fd, address, length) == 0) return 0;
  const int result = errno;
  // EINTR (a blocking connect a signal interrupted) is EINPROGRESS: the handshake goes on
  // in the kernel. EALREADY: a connect() the caller started earlier (and a signal
  // interrupted) is still going on. Either way it is waited for, not started again.
  if (result == EINPROGRESS || result == EINTR || result == EALREADY) {
    return finish_connect(fd, deadline, wait);
  }
  if (result == EISCONN) return 0;  // that earlier connect() has completed meanwhile
  return result;
}

}  // namespace

int connect_until(int fd, const sockaddr* address, socklen_t length,
                  Clock::time_point deadline) noexcept {
  return connect_with(fd, address, length, deadline, poll_until);
}

int connect_until_interruptible(int fd, const sockaddr* address, socklen_t length,
                                Clock::time_point deadline) {
  return connect_with(fd, address, length, deadline, poll_until_interruptible);
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

int poll_until_interruptible(int fd, short events, Clock::time_point deadline) {
  if (!kiln::detail::interrupt_poll_installed()) return poll_until(fd, events, deadline);
  while (true) {
    kiln::detail::poll_interrupt();
    const auto now = Clock::now();
    if (now >= deadline) return 0;
    const int ready =
        poll_until(fd, events, std::min(deadline, now + kiln::detail::kInterruptPollPeriod));
    if (ready != 0) return ready;
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
