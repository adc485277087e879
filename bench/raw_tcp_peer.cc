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

namespace {

// Receives a message as Kiln's connection does (a first recv of at most 64 KiB, then the rest
// straight into place). One recv of the whole message is slower on these VMs (1 MiB: ~260 us
// instead of ~180 us), and a floor is the fastest way raw TCP does the job.
bool recv_all(int fd, void* buf, size_t n) {
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

bool send_all(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent <= 0) return false;
    p += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

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
