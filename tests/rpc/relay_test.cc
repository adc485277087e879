// SPDX-License-Identifier: Apache-2.0
// Issue 37, items 1-3: a session under a token ends however it ends, bounds the time a client
// may leave reply data unread, and the session's whole process tree ends with it. The defects
// were in the token relay between the client's TLS connection and the session process; since
// item 9 the session process holds the TLS connection itself (rpc/session_process.h) and there
// is no relay, and these tests hold that path to the same ends. Each TEST below failed on the
// relay before its fix; EverySessionEndGivesTheSlotBack drives random
// ends (close_notify, resets, half-closes, slow and absent readers, killed session processes)
// and checks after each that nothing is left behind.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "rpc/connection.h"
#include "rpc/handshake.h"
#include "rpc/protocol.h"
#include "rpc/raw_session.h"
#include "rpc/rpc_test_util.h"
#include "rpc/tls_psk.h"

namespace kiln::rpc {
// Named after the file, not anonymous: its helpers meet other files' in a unity build.
namespace relay_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using kiln::test::wait_until;

const std::string kToken = "kiln-relay-test-token-0123456789abcdef";
const std::string kKey = "relay";

ServerOptions token_server() {
  ServerOptions o;
  o.port = 0;
  o.key = kKey;
  o.token = kToken;
  o.test_hooks.test_functions = true;
  // Sessions take processes started ahead (the default starts each for its session: every
  // other test file covers that): the session's ends hold for them too.
  o.prestarted_sessions = 1;
  return o;
}

ConnectOptions with_token() { return test::client_options(kKey, kToken); }

// A session driven by hand over TLS: the handshake done, frames written by the test.
std::unique_ptr<Connection> raw_tls_session(int port) {
  return test::raw_session("127.0.0.1", port, with_token());
}

// Reads and discards what the server sends until it closes or `limit` passes, taking 16 KiB
// every `pause` (0: as fast as it comes).
void drain(Connection& conn, std::chrono::milliseconds limit, std::chrono::milliseconds pause) {
  conn.set_timeouts(100ms, 100ms);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<uint8_t> buffer(16 << 10);
  while (std::chrono::steady_clock::now() < deadline) {
    const ssize_t got = conn.tls_session()->recv(buffer.data(), buffer.size());
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) return;
    if (got > 0 && pause.count() > 0) std::this_thread::sleep_for(pause);
  }
}

// The processes whose parent is this one (the in-process server's session processes).
std::vector<pid_t> session_processes() {
  std::vector<pid_t> out;
  for (const kiln::test::ProcessStat& p : kiln::test::children_of(::getpid())) {
    if (p.comm.rfind("kiln-rpc-sess", 0) == 0) out.push_back(p.pid);
  }
  return out;
}

// When `pid` started (clock ticks since boot), or UINT64_MAX when it is gone.
uint64_t start_time(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return UINT64_MAX;
  std::istringstream fields(line.substr(line.rfind(')') + 2));
  std::string field;
  // state is field 3 of stat, starttime field 22.
  for (int i = 3; i <= 22 && fields >> field; ++i) {
  }
  return std::stoull(field);
}

// Waits until the server's pool holds its one process started ahead and no session process
// runs: the next session takes that process. Whether it did. The process shows in /proc as soon
// as it was exec'd, a moment before the server put it in its pool: a session that came in that
// moment would get a process started for it, younger than the pool's, and the_session_process()
// would name the wrong one; hence the pause.
bool pool_ready() {
  if (!wait_until([] { return session_processes().size() == 1; }, 10s)) return false;
  std::this_thread::sleep_for(100ms);
  return session_processes().size() == 1;
}

// The session process of the session that just started (waiting up to 10 s for one), or -1:
// the oldest of this process's session processes. After pool_ready() that is the process the
// session took; the pool's replacement is younger (it starts 20 ms after the take).
pid_t the_session_process() {
  pid_t pid = -1;
  wait_until(
      [&] {
        const std::vector<pid_t> all = session_processes();
        for (const pid_t p : all) {
          if (pid < 0 || std::pair(start_time(p), p) < std::pair(start_time(pid), pid)) pid = p;
        }
        return pid > 0;
      },
      10s);
  return pid;
}

// Gone, and reaped: no zombie left.
bool reaped(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// Not running any more: gone, or a zombie that another process than this one must reap (an
// orphan's; init reaps those).
bool ended(pid_t pid) {
  if (reaped(pid)) return true;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return true;
  char state = 0;
  int ppid = 0;
  const size_t close_paren = line.rfind(')');
  return close_paren != std::string::npos &&
         std::sscanf(line.c_str() + close_paren + 1, " %c %d", &state, &ppid) == 2 &&
         state == 'Z' && ppid != ::getpid();
}

// Processes running `sleep 126` (what spawn_kernel.cc starts).
int sleepers() {
  int n = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline == std::string("sleep\0"
                               "126\0",
                               10) &&
        !ended(std::stoi(entry.path().filename()))) {
      ++n;
    }
  }
  return n;
}

// Whether this process may make a cgroup v2 directory under its own (where the server makes
// one per session).
bool cgroup_writable() {
  std::string own;
  std::ifstream cgroup("/proc/self/cgroup");
  for (std::string line; std::getline(cgroup, line);) {
    if (line.rfind("0::", 0) == 0) own = line.substr(3);
  }
  std::ifstream mounts("/proc/self/mounts");
  for (std::string line; std::getline(mounts, line);) {
    char where[512];
    char type[64];
    if (own.empty() || std::sscanf(line.c_str(), "%*s %511s %63s", where, type) != 2 ||
        std::string(type) != "cgroup2") {
      continue;
    }
    const fs::path probe =
        fs::path(where) / fs::path(own).relative_path() / fmt::format("kiln-probe-{}", ::getpid());
    if (::mkdir(probe.c_str(), 0755) != 0) return false;
    ::rmdir(probe.c_str());
    return true;
  }
  return false;
}

int entries(const char* dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

// Sets (or with nullptr removes) an environment variable for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Defect 1: a token holder asks for 1 MiB, sends close_notify and closes. The relay got "0"
// from the TLS write (ZERO_RETURN), took it for "try again" and spun: the slot never came back
// and the session process stayed a zombie.
TEST(Relay, ACloseNotifyAfterARequestFreesTheSlot) {
  Server server(token_server());
  ASSERT_TRUE(pool_ready());
  auto conn = raw_tls_session(server.port());
  const pid_t worker = the_session_process();
  ASSERT_GT(worker, 0);
  test::upload(*conn, "big.bin", 1 << 20);
  test::ask_download(*conn, "big.bin");
  conn->tls_session()->close_notify();
  conn.reset();
  EXPECT_TRUE(wait_until([&] { return server.active_sessions() == 0; }, 10s));
  EXPECT_TRUE(wait_until([&] { return reaped(worker); }, 10s)) << "a zombie session process";
  RPCSession next = connect("127.0.0.1", server.port(), with_token());
  EXPECT_EQ(next.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

// Defect 2: under a token, a client that never reads its reply held the slot for as long as it
// kept its socket; the session's writes now have the plain path's deadline (the write timeout
// plus 1 s per MiB).
TEST(Relay, AClientThatNeverReadsCannotHoldTheSlot) {
  ServerOptions o = token_server();
  o.write_timeout_s = 1;
  Server server(o);
  ASSERT_TRUE(pool_ready());
  auto conn = raw_tls_session(server.port());
  const pid_t worker = the_session_process();
  // More than every buffer on the way holds (the client's socket takes 64 KiB).
  const int small = 64 << 10;
  ::setsockopt(conn->fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  test::upload(*conn, "big.bin", 32ull << 20);
  test::ask_download(*conn, "big.bin");
  EXPECT_TRUE(wait_until([&] { return server.active_sessions() == 0; }, 20s));
  EXPECT_TRUE(wait_until([&] { return reaped(worker); }, 10s));
  RPCSession next = connect("127.0.0.1", server.port(), with_token());
  EXPECT_EQ(next.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

// Defect 3: processes an uploaded kernel starts (orphaned, in the session's process group or
// out of it with setsid(), or through system("sleep 126 &")) held the session's socket, so the
// slot stayed busy, and escaped the group kill. With the session's cgroup and without it (the
// worker's subreaper role alone), they end with the session.
TEST(Relay, ProcessesASessionStartsEndWithIt) {
  for (const bool cgroup : {true, false}) {
    SCOPED_TRACE(cgroup ? "a cgroup where the machine offers one" : "no cgroup: subreaper");
    ScopedEnv env("KILN_RPC_SESSION_CGROUP", cgroup ? nullptr : "off");
    Server server(token_server());
    std::vector<int64_t> orphans;
    pid_t worker = -1;
    {
      RPCSession s = connect("127.0.0.1", server.port(), with_token());
      worker = static_cast<pid_t>(s.get_function("rpc.test.pid")().cast<int64_t>());
      s.upload(KILN_SPAWN_KERNEL, "libspawn.so");
      RemoteModule m = s.load_module("libspawn.so");
      orphans.push_back(m["orphan"](int64_t{0}).cast<int64_t>());
      orphans.push_back(m["orphan"](int64_t{1}).cast<int64_t>());
      EXPECT_EQ(m["shell"]().cast<int64_t>(), 0);
      for (const int64_t pid : orphans) EXPECT_FALSE(ended(static_cast<pid_t>(pid))) << pid;
      EXPECT_TRUE(wait_until([] { return sleepers() >= 3; }, 5s)) << sleepers() << " started";
      s.close();
    }
    EXPECT_TRUE(wait_until([&] { return server.active_sessions() == 0; }, 10s));
    EXPECT_TRUE(wait_until([&] { return reaped(worker); }, 10s)) << "a zombie session process";
    for (const int64_t pid : orphans) {
      EXPECT_TRUE(wait_until([&] { return ended(static_cast<pid_t>(pid)); }, 10s))
          << "process " << pid << " outlived its session";
    }
    EXPECT_TRUE(wait_until([&] { return sleepers() == 0; }, 10s)) << sleepers() << " left";
    RPCSession next = connect("127.0.0.1", server.port(), with_token());
    EXPECT_EQ(next.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
  }
}

// A session process that crashes cannot end its descendants itself: its cgroup does.
TEST(Relay, ACrashedSessionsProcessesEndWithItsCgroup) {
  if (const char* env = std::getenv("KILN_RPC_SESSION_CGROUP"); env && std::string(env) == "off") {
    GTEST_SKIP() << "KILN_RPC_SESSION_CGROUP=off: sessions get no cgroup";
  }
  Server server(token_server());
  int64_t orphan = -1;
  {
    RPCSession s = connect("127.0.0.1", server.port(), with_token());
    const int64_t worker = s.get_function("rpc.test.pid")().cast<int64_t>();
    std::ifstream cgroup_file(fmt::format("/proc/{}/cgroup", worker));
    const std::string cgroups((std::istreambuf_iterator<char>(cgroup_file)),
                              std::istreambuf_iterator<char>());
    if (cgroups.find("kiln-session-") == std::string::npos) {
      ASSERT_FALSE(cgroup_writable()) << "the machine offers a cgroup, the session has none";
      GTEST_SKIP() << "no writable cgroup v2 subtree here: a crashed session process's "
                      "descendants outside its process group are not reachable (docs/rpc.md)";
    }
    s.upload(KILN_SPAWN_KERNEL, "libspawn.so");
    RemoteModule m = s.load_module("libspawn.so");
    orphan = m["orphan"](int64_t{1}).cast<int64_t>();
    EXPECT_THROW(s.get_function("rpc.test.crash")(), Error);
  }
  EXPECT_TRUE(wait_until([&] { return server.active_sessions() == 0; }, 10s));
  EXPECT_TRUE(wait_until([&] { return ended(static_cast<pid_t>(orphan)); }, 10s));
}

// The property: however a session ends (the client's close_notify, a reset, a TCP half-close,
// a plain close, a slow reader, a reader that never reads, the session process killed at any
// point) after whatever request, the slot comes back, the session process is reaped, and the
// server's process holds no more descriptors or threads than before. 50 seeded rounds.
TEST(Relay, EverySessionEndGivesTheSlotBack) {
  ServerOptions o = token_server();
  o.write_timeout_s = 1;
  o.idle_timeout_s = 2;
  Server server(o);
  {  // one whole session first: what the process sets up once is not a leak
    RPCSession warm = connect("127.0.0.1", server.port(), with_token());
    warm.close();
  }
  ASSERT_TRUE(wait_until([&] { return server.active_sessions() == 0; }, 10s));
  // The pool refilled (a pre-started process holds descriptors of the server's).
  ASSERT_TRUE(pool_ready());
  const int fds_before = entries("/proc/self/fd");
  const int threads_before = entries("/proc/self/task");
  static const char* const kRequests[] = {"none", "64 KiB", "1 MiB", "8 MiB"};
  static const uint64_t kRequestBytes[] = {0, 64 << 10, 1 << 20, 8 << 20};
  static const char* const kEnds[] = {"close_notify, close",
                                      "close_notify, half-close, read all",
                                      "reset",
                                      "half-close, read all",
                                      "slow reader, then close",
                                      "never reads",
                                      "plain close",
                                      "close_notify, slow reader"};
  std::mt19937 rng(37);
  for (int round = 0; round < 50 && !HasFailure(); ++round) {
    const int request = static_cast<int>(rng() % 4);
    const int end = static_cast<int>(rng() % 8);
    // The session process killed: 0 no, 1 before the request, 2 after it, 3 with SIGTERM after.
    const int kill_worker = rng() % 3 == 0 ? 1 + static_cast<int>(rng() % 3) : 0;
    const auto delay = std::chrono::milliseconds(rng() % 40);
    SCOPED_TRACE(fmt::format("round {}: request {}, end '{}', kill {}, delay {} ms", round,
                             kRequests[request], kEnds[end], kill_worker, delay.count()));
    pid_t worker = -1;
    ASSERT_TRUE(pool_ready()) << "the pool did not refill";
    try {
      auto conn = raw_tls_session(server.port());
      worker = the_session_process();
      ASSERT_GT(worker, 0);
      const int small = 64 << 10;
      ::setsockopt(conn->fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
      try {
        if (kill_worker == 1) ::kill(worker, SIGKILL);
        if (request > 0) {
          test::upload(*conn, "data.bin", kRequestBytes[request]);
          test::ask_download(*conn, "data.bin");
        }
        if (kill_worker >= 2) ::kill(worker, kill_worker == 2 ? SIGKILL : SIGTERM);
      } catch (const std::exception&) {
        // The session process was killed under the request: the client sees the end.
      }
      std::this_thread::sleep_for(delay);
      const int fd = conn->fd();
      switch (end) {
        case 0:
          conn->tls_session()->close_notify();
          break;
        case 1:
          conn->tls_session()->close_notify();
          ::shutdown(fd, SHUT_WR);
          drain(*conn, 10s, 0ms);
          break;
        case 2: {
          const linger hard{1, 0};
          ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
          break;
        }
        case 3:
          ::shutdown(fd, SHUT_WR);
          drain(*conn, 10s, 0ms);
          break;
        case 4:
          drain(*conn, 300ms, 5ms);
          break;
        case 5:
          // Keeps its socket and reads nothing until the server has given up on it.
          EXPECT_TRUE(wait_until([&] { return server.active_sessions() == 0; }, 15s));
          break;
        case 6:
          break;
        case 7:
          conn->tls_session()->close_notify();
          drain(*conn, 300ms, 5ms);
          break;
      }
      conn.reset();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "the client failed: " << e.what();
    }
    EXPECT_TRUE(wait_until([&] { return server.active_sessions() == 0; }, 15s))
        << "the slot did not come back";
    if (worker > 0) {
      EXPECT_TRUE(wait_until([&] { return reaped(worker); }, 10s))
          << "session process " << worker << " not reaped";
    }
    EXPECT_TRUE(wait_until([&] { return entries("/proc/self/fd") <= fds_before; }, 5s))
        << entries("/proc/self/fd") << " descriptors open, " << fds_before << " before";
    EXPECT_TRUE(wait_until([&] { return entries("/proc/self/task") <= threads_before; }, 5s))
        << entries("/proc/self/task") << " threads, " << threads_before << " before";
  }
  RPCSession next = connect("127.0.0.1", server.port(), with_token());
  EXPECT_EQ(next.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

}  // namespace relay_test
}  // namespace kiln::rpc
