// RPC costs on loopback beside raw TCP, every server in its own process (docs/benchmarks.md
// "RPC"). This program is the client. It starts, once, a `kiln rpc-server` and the raw TCP peer
// (bench/raw_tcp_peer.cc) and stops them when it ends. With --server_cpu=N both are pinned to
// CPU N; pin this process to another CPU (`taskset -c 0`, or interleave.py's --pin 0) so that
// client and server run side by side, as over a network. Cases, named so that
// bench/interleave.py's --versus pairs them with each other and with
// bench/tvm/tvm_rpc_bench.py (BM_Tvm_*):
//  - BM_Kiln_Call: a remote no-op call (rpc.test.nop); BM_Raw_Call: a ping-pong of the same
//    frames' sizes (request 36 bytes: header and CallFunc body; reply 16 bytes: a Return of
//    none).
//  - BM_Kiln_Upload/MiB:N: `Tensor::copy_from` into a remote CPU tensor of N MiB;
//    BM_Raw_Upload/MiB:N: the same bytes one way (header, body and data) and the Return back.
//  - BM_Kiln_Download/MiB:N: `Tensor::copy_to` from it; BM_Raw_Download/MiB:N: the request
//    one way and header plus N MiB back.
// Every case moves its data once before timing: the first touch of fresh pages is not the
// transfer's cost.
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/rpc/session.h"
#include "raw_tcp.h"

namespace {

// The frames of a call with no arguments and its Return of none, and of the copy requests
// (12-byte frame header; CallFunc: handle and argument count; CopyToRemote / CopyFromRemote:
// handle, offset, size).
constexpr size_t kCallRequestBytes = 12 + 12;
constexpr size_t kReturnNoneBytes = 12 + 4;
constexpr size_t kCopyRequestBytes = 12 + 24;
constexpr size_t kDataHeaderBytes = 12;
constexpr size_t kMiB = size_t{1} << 20;

int g_server_cpu = -1;  // --server_cpu; -1: the servers inherit this process's CPUs

// ---- the server processes -------------------------------------------------------------------

struct Child {
  pid_t pid = -1;
  int port = 0;
};
std::vector<pid_t> g_children;

// Starts `argv` with its stdout on a pipe, pinned to --server_cpu, and returns its pid and the
// port from the first line it prints (the number after the last ':' or ' ' of "... on X").
Child spawn(const std::vector<std::string>& argv) {
  int out[2];
  if (::pipe(out) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    // Nothing else of ours: a client socket held open here would never close for its peer.
    ::close_range(3, ~0U, 0);
    if (g_server_cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(g_server_cpu, &set);
      if (::sched_setaffinity(0, sizeof(set), &set) != 0) _exit(126);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    _exit(127);
  }
  ::close(out[1]);
  g_children.push_back(pid);
  FILE* f = ::fdopen(out[0], "r");
  char line[512] = {};
  const bool got = f && std::fgets(line, sizeof(line), f);
  if (f) std::fclose(f);
  const char* on = got ? std::strstr(line, " on ") : nullptr;
  if (!on) throw std::runtime_error(argv[0] + " did not say where it listens");
  std::string where(on + 4);
  where = where.substr(0, where.find_first_of(" \n"));
  const size_t colon = where.rfind(':');
  return {pid, std::atoi(where.c_str() + (colon == std::string::npos ? 0 : colon + 1))};
}

void stop_children() {
  for (const pid_t pid : g_children) ::kill(pid, SIGTERM);
  for (const pid_t pid : g_children) ::waitpid(pid, nullptr, 0);
  g_children.clear();
}

int kiln_server_port() {
  static const int port = spawn({KILN_CLI, "rpc-server", "--port", "0", "--key", "bench",
                                 "--max-sessions", "2", "--enable-test-functions"})
                              .port;
  return port;
}

int raw_peer_port() {
  static const int port = spawn({KILN_RAW_TCP_PEER}).port;
  return port;
}

// ---- raw TCP --------------------------------------------------------------------------------

using kiln::bench::recv_all;
using kiln::bench::send_all;

// A connection to the raw peer that answers each `request`-byte message with `reply` bytes.
// The client's buffers are whole-size too, and written before use.
class RawExchange {
 public:
  RawExchange(size_t request, size_t reply) : out_(request, 3), in_(reply) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(raw_peer_port()));
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      throw std::runtime_error("cannot connect to the raw TCP peer");
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const uint64_t sizes[2] = {request, reply};
    send_all(fd_, sizes, sizeof(sizes));
    run();  // the untimed first exchange
  }
  ~RawExchange() { ::close(fd_); }
  RawExchange(const RawExchange&) = delete;
  RawExchange& operator=(const RawExchange&) = delete;

  void run() {
    if (!send_all(fd_, out_.data(), out_.size()) || !recv_all(fd_, in_.data(), in_.size())) {
      throw std::runtime_error("the raw TCP peer went away");
    }
  }

 private:
  int fd_ = -1;
  std::vector<char> out_;
  std::vector<char> in_;
};

void raw_case(benchmark::State& state, size_t request, size_t reply, size_t bytes) {
  RawExchange exchange(request, reply);
  for (auto _ : state) exchange.run();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

size_t mib(const benchmark::State& state) { return static_cast<size_t>(state.range(0)) * kMiB; }

void BM_Raw_Call(benchmark::State& state) {
  raw_case(state, kCallRequestBytes, kReturnNoneBytes, 0);
}

void BM_Raw_Upload(benchmark::State& state) {
  raw_case(state, kCopyRequestBytes + mib(state), kReturnNoneBytes, mib(state));
}

void BM_Raw_Download(benchmark::State& state) {
  raw_case(state, kCopyRequestBytes, kDataHeaderBytes + mib(state), mib(state));
}

// ---- Kiln RPC -------------------------------------------------------------------------------

kiln::rpc::RPCSession connect() {
  return kiln::rpc::connect("127.0.0.1", kiln_server_port(), "bench");
}

void BM_Kiln_Call(benchmark::State& state) {
  auto session = connect();
  kiln::Function nop = session.get_function("rpc.test.nop");
  nop();
  for (auto _ : state) nop();
}

void BM_Kiln_Upload(benchmark::State& state) {
  auto session = connect();
  const size_t bytes = mib(state);
  kiln::Tensor remote = kiln::Tensor::empty({static_cast<int64_t>(bytes / sizeof(float))},
                                            kiln::DataType::Float(32), session.cpu());
  std::vector<float> host(bytes / sizeof(float), 1.5f);
  remote.copy_from(host.data(), bytes);
  for (auto _ : state) remote.copy_from(host.data(), bytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void BM_Kiln_Download(benchmark::State& state) {
  auto session = connect();
  const size_t bytes = mib(state);
  kiln::Tensor remote = kiln::Tensor::empty({static_cast<int64_t>(bytes / sizeof(float))},
                                            kiln::DataType::Float(32), session.cpu());
  std::vector<float> host(bytes / sizeof(float), 1.5f);
  remote.copy_from(host.data(), bytes);
  remote.copy_to(host.data(), bytes);
  for (auto _ : state) remote.copy_to(host.data(), bytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("MiB")->Arg(1)->Arg(4)->Arg(16)->Arg(64)->Arg(256)->UseRealTime();
}

BENCHMARK(BM_Raw_Call)->UseRealTime();
BENCHMARK(BM_Kiln_Call)->UseRealTime();
BENCHMARK(BM_Raw_Upload)->Apply(sizes);
BENCHMARK(BM_Kiln_Upload)->Apply(sizes);
BENCHMARK(BM_Raw_Download)->Apply(sizes);
BENCHMARK(BM_Kiln_Download)->Apply(sizes);

}  // namespace

int main(int argc, char** argv) {
  // --server_cpu=N is this program's own flag; the rest are Google Benchmark's.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--server_cpu=", 13) == 0) {
      g_server_cpu = std::atoi(argv[i] + 13);
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  int status = 0;
  try {
    benchmark::RunSpecifiedBenchmarks();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_bench_rpc: %s\n", e.what());
    status = 1;
  }
  stop_children();
  benchmark::Shutdown();
  return status;
}
