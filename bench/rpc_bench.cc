// SPDX-License-Identifier: Apache-2.0
// RPC costs on loopback beside raw TCP, every server in its own process (docs/benchmarks.md
// "RPC" and "What isolation and TLS cost"). This program is the client. It starts, once each
// and only when a case needs it, four `kiln rpc-server`s (a process per session, one started
// ahead: `--prestarted-sessions 1`; the same with none started ahead; one with
// `--session-isolation thread`; one with `--token-file`, so TLS 1.3, one started ahead) and the
// raw TCP peer (bench/raw_tcp_peer.cc), and stops them when it ends. With --server_cpu=N all
// are pinned to CPU N; pin this process to another CPU (`taskset -c 0`, or interleave.py's
// --pin 0) so that client and server run side by side, as over a network. Cases, named so that
// bench/interleave.py's --versus pairs them with each other and with
// bench/tvm/tvm_rpc_bench.py (BM_Tvm_*):
//  - BM_Kiln_Call: a remote no-op call (rpc.test.nop); BM_Raw_Call: a ping-pong of the same
//    frames' sizes (request 36 bytes: header and CallFunc body; reply 16 bytes: a Return of
//    none).
//  - BM_Kiln_Upload/MiB:N: `Tensor::copy_from` into a remote CPU tensor of N MiB;
//    BM_Raw_Upload/MiB:N: the same bytes one way (header, body and data) and the Return back.
//  - BM_Kiln_Download/MiB:N: `Tensor::copy_to` from it; BM_Raw_Download/MiB:N: the request
//    one way and header plus N MiB back.
//  - BM_Kiln_Session: a whole session per iteration (connect and handshake, get_function, one
//    no-op call, close: Shutdown and wait until the server has ended the session), against the
//    default server, so a session worker is exec'd and reaped each time; BM_KilnThread_Session:
//    the same against the `--session-isolation thread` server; BM_Raw_Session: a TCP connect,
//    one ping-pong of the call's sizes, and a close that waits for the peer's.
//    BM_Kiln_SessionOpen, BM_KilnThread_SessionOpen: the same sessions with the clock stopped
//    for the close and for 100 ms after it (connect to the call's return: what a client waits
//    for before its work, when sessions are not back to back: the process and TLS servers run
//    with `--prestarted-sessions 1` and have started the next session process by then).
//  - BM_KilnCold_Session, BM_KilnCold_SessionOpen: the same against a server with
//    `--prestarted-sessions 0` (each session process started when its session begins).
//  - BM_KilnTls_*: BM_Kiln_Call, _Session, _SessionOpen, _Upload and _Download on a session
//    with the token, against the `--token-file` server (its session processes hold the TLS
//    connections themselves since issue 37, item 9; before, the server relayed plaintext to
//    them over a socket pair); `--versus tls:^BM_KilnTls_=>BM_Kiln_` pairs
//    them with the plaintext cases.
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
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
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
  static const int port =
      spawn({KILN_CLI, "rpc-server", "--port", "0", "--key", "bench", "--max-sessions", "2",
             "--enable-test-functions", "--prestarted-sessions", "1"})
          .port;
  return port;
}

int kiln_cold_server_port() {
  static const int port =
      spawn({KILN_CLI, "rpc-server", "--port", "0", "--key", "bench", "--max-sessions", "2",
             "--enable-test-functions", "--prestarted-sessions", "0"})
          .port;
  return port;
}

int kiln_thread_server_port() {
  static const int port =
      spawn({KILN_CLI, "rpc-server", "--port", "0", "--key", "bench", "--max-sessions", "2",
             "--enable-test-functions", "--session-isolation", "thread"})
          .port;
  return port;
}

// The TLS server's token: random, in a file of this process's (mode 0600, removed at the end).
std::string g_token;
std::string g_token_file;

int kiln_tls_server_port() {
  static const int port = [] {
    std::random_device random;
    const char* hex = "0123456789abcdef";
    for (int i = 0; i < 64; ++i) g_token += hex[random() % 16];
    char path[] = "/tmp/kiln_bench_rpc_token_XXXXXX";
    const int fd = ::mkstemp(path);
    const std::string line = g_token + "\n";
    if (fd < 0 || ::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      throw std::runtime_error("cannot write the token file");
    }
    ::close(fd);
    g_token_file = path;
    return spawn({KILN_CLI, "rpc-server", "--port", "0", "--key", "bench", "--max-sessions", "2",
                  "--enable-test-functions", "--prestarted-sessions", "1", "--token-file",
                  g_token_file})
        .port;
  }();
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

// A whole connection per run(): connect, the sizes and one `request`-byte message in one send,
// the `reply` back, then a close that waits for the peer's (as Kiln's close() waits for the
// server to end the session).
void raw_session_once(size_t request, size_t reply) {
  std::vector<char> out(16 + request, 3);
  const uint64_t sizes[2] = {request, reply};
  std::memcpy(out.data(), sizes, sizeof(sizes));
  std::vector<char> in(reply);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(raw_peer_port()));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot connect to the raw TCP peer");
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const bool ok = send_all(fd, out.data(), out.size()) && recv_all(fd, in.data(), in.size());
  ::shutdown(fd, SHUT_WR);
  char end;
  const bool closed = ok && ::recv(fd, &end, 1, 0) == 0;
  ::close(fd);
  if (!closed) throw std::runtime_error("the raw TCP peer went away");
}

void BM_Raw_Session(benchmark::State& state) {
  raw_session_once(kCallRequestBytes, kReturnNoneBytes);
  for (auto _ : state) raw_session_once(kCallRequestBytes, kReturnNoneBytes);
}

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

// The servers the cases run against.
enum class Server { kProcess, kCold, kThread, kTls };

kiln::rpc::RPCSession connect(Server server = Server::kProcess) {
  kiln::rpc::ConnectOptions options;
  options.key = "bench";
  int port = 0;
  switch (server) {
    case Server::kProcess:
      port = kiln_server_port();
      break;
    case Server::kCold:
      port = kiln_cold_server_port();
      break;
    case Server::kThread:
      port = kiln_thread_server_port();
      break;
    case Server::kTls:
      port = kiln_tls_server_port();
      options.token = g_token;
      break;
  }
  return kiln::rpc::connect("127.0.0.1", port, options);
}

void call_case(benchmark::State& state, Server server) {
  auto session = connect(server);
  kiln::Function nop = session.get_function("rpc.test.nop");
  nop();
  for (auto _ : state) nop();
}

void session_once(Server server) {
  auto session = connect(server);
  session.get_function("rpc.test.nop")();
  session.close();
}

void session_case(benchmark::State& state, Server server) {
  session_once(server);
  for (auto _ : state) session_once(server);
}

// The same, timing the session's start only: the close (and the end of the server's side of
// the session, which close() waits for) and a pause of kSessionGap run with the clock stopped.
constexpr auto kSessionGap = std::chrono::milliseconds(100);
void session_open_case(benchmark::State& state, Server server) {
  session_once(server);
  std::this_thread::sleep_for(kSessionGap);
  for (auto _ : state) {
    std::optional<kiln::rpc::RPCSession> session(connect(server));
    session->get_function("rpc.test.nop")();
    state.PauseTiming();
    session->close();
    session.reset();
    std::this_thread::sleep_for(kSessionGap);
    state.ResumeTiming();
  }
}

void upload_case(benchmark::State& state, Server server) {
  auto session = connect(server);
  const size_t bytes = mib(state);
  kiln::Tensor remote = kiln::Tensor::empty({static_cast<int64_t>(bytes / sizeof(float))},
                                            kiln::DataType::Float(32), session.cpu());
  std::vector<float> host(bytes / sizeof(float), 1.5f);
  remote.copy_from(host.data(), bytes);
  for (auto _ : state) remote.copy_from(host.data(), bytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void download_case(benchmark::State& state, Server server) {
  auto session = connect(server);
  const size_t bytes = mib(state);
  kiln::Tensor remote = kiln::Tensor::empty({static_cast<int64_t>(bytes / sizeof(float))},
                                            kiln::DataType::Float(32), session.cpu());
  std::vector<float> host(bytes / sizeof(float), 1.5f);
  remote.copy_from(host.data(), bytes);
  remote.copy_to(host.data(), bytes);
  for (auto _ : state) remote.copy_to(host.data(), bytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void BM_Kiln_Call(benchmark::State& state) { call_case(state, Server::kProcess); }
void BM_Kiln_Upload(benchmark::State& state) { upload_case(state, Server::kProcess); }
void BM_Kiln_Download(benchmark::State& state) { download_case(state, Server::kProcess); }
void BM_Kiln_Session(benchmark::State& state) { session_case(state, Server::kProcess); }
void BM_KilnThread_Session(benchmark::State& state) { session_case(state, Server::kThread); }
void BM_KilnCold_Session(benchmark::State& state) { session_case(state, Server::kCold); }
void BM_KilnCold_SessionOpen(benchmark::State& state) { session_open_case(state, Server::kCold); }
void BM_Kiln_SessionOpen(benchmark::State& state) { session_open_case(state, Server::kProcess); }
void BM_KilnThread_SessionOpen(benchmark::State& state) {
  session_open_case(state, Server::kThread);
}
void BM_KilnTls_SessionOpen(benchmark::State& state) { session_open_case(state, Server::kTls); }
void BM_KilnTls_Call(benchmark::State& state) { call_case(state, Server::kTls); }
void BM_KilnTls_Session(benchmark::State& state) { session_case(state, Server::kTls); }
void BM_KilnTls_Upload(benchmark::State& state) { upload_case(state, Server::kTls); }
void BM_KilnTls_Download(benchmark::State& state) { download_case(state, Server::kTls); }

void sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("MiB")->Arg(1)->Arg(4)->Arg(16)->Arg(64)->Arg(256)->UseRealTime();
}

BENCHMARK(BM_Raw_Call)->UseRealTime();
BENCHMARK(BM_Kiln_Call)->UseRealTime();
BENCHMARK(BM_Raw_Upload)->Apply(sizes);
BENCHMARK(BM_Kiln_Upload)->Apply(sizes);
BENCHMARK(BM_Raw_Download)->Apply(sizes);
BENCHMARK(BM_Kiln_Download)->Apply(sizes);
BENCHMARK(BM_Raw_Session)->UseRealTime();
BENCHMARK(BM_Kiln_Session)->UseRealTime();
BENCHMARK(BM_KilnThread_Session)->UseRealTime();
BENCHMARK(BM_KilnTls_Session)->UseRealTime();
BENCHMARK(BM_KilnCold_Session)->UseRealTime();
// A fixed count: each iteration also waits kSessionGap with the clock stopped.
BENCHMARK(BM_Kiln_SessionOpen)->UseRealTime()->Iterations(20);
BENCHMARK(BM_KilnThread_SessionOpen)->UseRealTime()->Iterations(20);
BENCHMARK(BM_KilnTls_SessionOpen)->UseRealTime()->Iterations(20);
BENCHMARK(BM_KilnCold_SessionOpen)->UseRealTime()->Iterations(20);
BENCHMARK(BM_KilnTls_Call)->UseRealTime();
BENCHMARK(BM_KilnTls_Upload)->Apply(sizes);
BENCHMARK(BM_KilnTls_Download)->Apply(sizes);

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
  if (!g_token_file.empty()) ::unlink(g_token_file.c_str());
  benchmark::Shutdown();
  return status;
}
