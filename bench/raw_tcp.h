// SPDX-License-Identifier: Apache-2.0
// The raw TCP floor's send and receive loops, shared by kiln_bench_rpc (client side) and
// kiln_bench_raw_tcp_peer (server side) so that both directions move bytes the same way.
#ifndef KILN_BENCH_RAW_TCP_H_
#define KILN_BENCH_RAW_TCP_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <cstddef>

namespace kiln::bench {

// Receives a message as Kiln's connection does (a first recv of at most 64 KiB, then the rest
// straight into place). One recv of the whole message is slower on these VMs (1 MiB: ~260 us
// instead of ~180 us), and a floor is the fastest way raw TCP does the job.
inline bool recv_all(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  if (n > 0) {
    const ssize_t got = ::recv(fd, p, std::min<size_t>(n, 65536), 0);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  while (n > 0) {
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

inline bool send_all(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent <= 0) return false;
    p += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

}  // namespace kiln::bench

#endif  // KILN_BENCH_RAW_TCP_H_
