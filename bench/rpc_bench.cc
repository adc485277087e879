// RPC costs beside raw TCP on loopback, in one run (docs/benchmarks.md "RPC"):
//  - a remote no-op call's round trip beside a raw TCP ping-pong of the same sizes (the
//    call's request and reply frames: 24 and 16 bytes);
//  - upload and download of a 64 MiB float32 tensor beside a raw TCP transfer of 64 MiB.
// The server runs on a thread of this process; pin the whole process to one CPU
// (`taskset -c 1`) so that the server and client share it, as the figures require: waking
// another vCPU costs these VMs about 50 us, which would swamp everything else.
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"

namespace {

constexpr size_t kRequestBytes = 24;  // a CallFunc of a function with no arguments
constexpr size_t kReplyBytes = 16;    // its Return of none
constexpr size_t kTransferBytes = 64u << 20;

// ---- raw TCP --------------------------------------------------------------------------------

int listen_loopback(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 4) != 0) {
    throw std::runtime_error("cannot listen on loopback");
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw std::runtime_error("cannot connect on loopback");
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

bool recv_all(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
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

// A peer thread: for each `request`-byte message answer `reply` bytes, until the client goes.
struct RawPeer {
  RawPeer(size_t request, size_t reply) {
    int port = 0;
    const int listener = listen_loopback(&port);
    thread = std::thread([listener, request, reply] {
      const int fd = ::accept(listener, nullptr, nullptr);
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      // The whole message lands in one buffer, as an upload lands in its tensor: a small
      // reused buffer would stay in cache and measure less than the job.
      std::vector<char> in(request);
      std::vector<char> out(reply, 1);
      while (true) {
        size_t left = request;
        bool ok = true;
        while (left > 0 && ok) {
          const size_t n = std::min(left, in.size());
          ok = recv_all(fd, in.data(), n);
          left -= n;
        }
        if (!ok || !send_all(fd, out.data(), out.size())) break;
      }
      ::close(fd);
      ::close(listener);
    });
    fd = connect_loopback(port);
  }
  ~RawPeer() {
    ::close(fd);
    thread.join();
  }
  int fd = -1;
  std::thread thread;
};

void BM_RawTcpPingPong(benchmark::State& state) {
  RawPeer peer(kRequestBytes, kReplyBytes);
  char request[kRequestBytes] = {};
  char reply[kReplyBytes];
  for (auto _ : state) {
    send_all(peer.fd, request, sizeof(request));
    recv_all(peer.fd, reply, sizeof(reply));
  }
}
BENCHMARK(BM_RawTcpPingPong)->MinTime(2.0)->UseRealTime();

// 64 MiB one way into a 64 MiB buffer, then a one-byte acknowledgement (what an upload's
// reply costs).
void BM_RawTcpTransfer64MiB(benchmark::State& state) {
  RawPeer peer(kTransferBytes, 1);
  std::vector<char> data(kTransferBytes, 3);
  char ack;
  for (auto _ : state) {
    send_all(peer.fd, data.data(), data.size());
    recv_all(peer.fd, &ack, 1);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kTransferBytes));
}
BENCHMARK(BM_RawTcpTransfer64MiB)->MinTime(2.0)->UseRealTime();

// ---- Kiln RPC -------------------------------------------------------------------------------

kiln::rpc::Server& server() {
  static kiln::rpc::Server* s = [] {
    kiln::rpc::ServerOptions o;
    o.port = 0;
    o.key = "bench";
    o.max_sessions = 4;
    o.enable_test_functions = true;  // rpc.test.nop
    return new kiln::rpc::Server(o);
  }();
  return *s;
}

void BM_RpcNoopCall(benchmark::State& state) {
  auto session = kiln::rpc::connect("127.0.0.1", server().port(), "bench");
  kiln::Function nop = session.get_function("rpc.test.nop");
  for (auto _ : state) nop();
}
BENCHMARK(BM_RpcNoopCall)->MinTime(2.0)->UseRealTime();

void BM_RpcUpload64MiB(benchmark::State& state) {
  auto session = kiln::rpc::connect("127.0.0.1", server().port(), "bench");
  const int64_t n = kTransferBytes / sizeof(float);
  kiln::Tensor remote = kiln::Tensor::empty({n}, kiln::DataType::Float(32), session.cpu());
  std::vector<float> host(static_cast<size_t>(n), 1.5f);
  for (auto _ : state) remote.copy_from(host.data(), kTransferBytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kTransferBytes));
}
BENCHMARK(BM_RpcUpload64MiB)->MinTime(2.0)->UseRealTime();

void BM_RpcDownload64MiB(benchmark::State& state) {
  auto session = kiln::rpc::connect("127.0.0.1", server().port(), "bench");
  const int64_t n = kTransferBytes / sizeof(float);
  kiln::Tensor remote = kiln::Tensor::empty({n}, kiln::DataType::Float(32), session.cpu());
  std::vector<float> host(static_cast<size_t>(n), 1.5f);
  remote.copy_from(host.data(), kTransferBytes);
  for (auto _ : state) remote.copy_to(host.data(), kTransferBytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kTransferBytes));
}
BENCHMARK(BM_RpcDownload64MiB)->MinTime(2.0)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
