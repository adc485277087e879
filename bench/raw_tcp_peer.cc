// SPDX-License-Identifier: Apache-2.0
// The raw TCP peer of kiln_bench_rpc (docs/benchmarks.md "RPC"): the floor of every RPC figure,
// in its own process as the Kiln and TVM servers are. It listens on a loopback port, prints
// "raw-tcp-peer listening on PORT" and serves one connection after another until killed. A
// connection starts with two u64 (little-endian): `request` and `reply`. Then, until the
// client closes: receive `request` bytes into a buffer of that size, send `reply` bytes from a
// buffer of that size. Whole-size buffers, because an upload lands in its tensor and a
// download leaves from it: a small reused buffer would stay in cache and measure less than
// the job.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "raw_tcp.h"

namespace {

using kiln::bench::recv_all;
using kiln::bench::send_all;

void serve(int fd) {
  uint64_t sizes[2];
  if (!recv_all(fd, sizes, sizeof(sizes))) return;
  std::vector<char> in(sizes[0]);
  std::vector<char> out(sizes[1], 1);  // written, so its pages exist before the first send
  while (recv_all(fd, in.data(), in.size()) && send_all(fd, out.data(), out.size())) {
  }
}

}  // namespace

int main() {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener, 4) != 0) {
    std::perror("raw-tcp-peer: cannot listen on loopback");
    return 1;
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::printf("raw-tcp-peer listening on %d\n", ntohs(addr.sin_port));
  std::fflush(stdout);
  while (true) {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) continue;
    const int one = 1;  // as Kiln's connections
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    serve(fd);
    ::close(fd);
  }
}
