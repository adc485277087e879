// SPDX-License-Identifier: Apache-2.0
// Socket system calls that survive signals. A signal handler installed without SA_RESTART
// (libFuzzer's SIGALRM, a profiler's SIGPROF, an application's own) makes a blocking call fail
// with EINTR, and even SA_RESTART does not restart poll() or a call bounded by SO_RCVTIMEO /
// SO_SNDTIMEO. Such calls are retried with what is left of their time limit (never the whole
// limit again). An interrupted connect() is different: the connection goes on in the
// background, so it is waited for, never started again (EALREADY) nor taken for a failure.
// Used by the RPC client and tracker connections (Connection::connect) and by the tests and
// fuzz harnesses that drive raw sockets. The *_interruptible variants also let the thread's
// interrupt poll (kiln/detail/cancellation.h: Ctrl-C in Python) end the wait.
#ifndef KILN_SRC_RPC_SOCKET_IO_H_
#define KILN_SRC_RPC_SOCKET_IO_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <cstddef>

namespace kiln::rpc {

// Connects the TCP socket `fd` to `address` by `deadline`, whatever signals arrive meanwhile:
// a connect() that was interrupted or is in progress (this one, or one the caller started and
// a signal interrupted: EALREADY) is waited for (poll for POLLOUT, retried with the time left)
// and its result read from SO_ERROR. A blocking socket is switched to
// non-blocking for the attempt (so the deadline holds) and back. Returns 0 once connected, or
// an errno value: ETIMEDOUT when the deadline passed first (the socket is then unusable; close
// it), ECONNREFUSED, ENETUNREACH, ...
int connect_until(int fd, const sockaddr* address, socklen_t length,
                  std::chrono::steady_clock::time_point deadline) noexcept;

// As connect_until, waiting like poll_until_interruptible: throws InterruptedError when the
// thread's interrupt poll does (the socket is then left mid-connect: close it).
int connect_until_interruptible(int fd, const sockaddr* address, socklen_t length,
                                std::chrono::steady_clock::time_point deadline);

// Waits until `fd` has one of `events` (or an error or hang-up) or `deadline` passes, retrying
// poll() on EINTR with the time left. Returns the revents; 0 once the deadline has passed (then
// without looking, so a loop "while (poll_until(...) > 0) read" ends on time even when data
// keeps coming); -1 with errno set on failure.
int poll_until(int fd, short events, std::chrono::steady_clock::time_point deadline) noexcept;

// As poll_until, in slices of at most kInterruptPollPeriod with the thread's interrupt poll
// (kiln/detail/cancellation.h) run before each: throws InterruptedError when it does. Without a
// poll installed on the thread it is poll_until.
int poll_until_interruptible(int fd, short events, std::chrono::steady_clock::time_point deadline);

// Runs `call` (a send, recv, accept, ... returning a negative value with errno on failure) again
// for as long as a signal interrupts it, and returns its result.
template <typename Call>
auto retry_on_signal(Call call) noexcept(noexcept(call())) -> decltype(call()) {
  auto result = call();
  while (result < 0 && errno == EINTR) result = call();
  return result;
}

// Sends all `n` bytes (MSG_NOSIGNAL; partial sends and signals continue where they stopped).
// False, errno set, when the peer closed or the socket failed.
bool send_all(int fd, const void* data, size_t n) noexcept;

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_SOCKET_IO_H_
