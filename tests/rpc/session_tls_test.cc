// SPDX-License-Identifier: Apache-2.0
// Issue 37, item 9: under a token the session process holds the client's TLS connection (it
// runs the handshake and serves the session on the socket itself; no relay in the server), and
// the server keeps its defences around that handshake: it ends a session process that does not
// report the handshake by the deadline, and a handshake that gave a process no session leaves
// it for the next client.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "rpc/raw_session.h"
#include "rpc/rpc_test_util.h"

namespace kiln::rpc {
// Named after the file, not anonymous: its helpers meet other files' in a unity build.
namespace session_tls_test {

using namespace std::chrono_literals;
using kiln::test::wait_until;

const std::string kToken = "kiln-session-tls-test-token-0123456789";
const std::string kKey = "tls";

ServerOptions token_server(int prestarted) {
  ServerOptions o;
  o.port = 0;
  o.key = kKey;
  o.token = kToken;
  o.test_hooks.test_functions = true;
  o.prestarted_sessions = prestarted;
  return o;
}

ConnectOptions with_token(const std::string& token = kToken) {
  return test::client_options(kKey, token);
}

// The session processes of this process's in-process server (its children).
std::vector<pid_t> session_processes() {
  std::vector<pid_t> out;
  for (const kiln::test::ProcessStat& p : kiln::test::children_of(::getpid())) {
    if (p.comm.rfind("kiln-rpc-sess", 0) == 0 && p.state != 'Z') out.push_back(p.pid);
  }
  return out;
}

// The socket inodes of established TCP connections whose local port is `port` (the server's
// ends of its clients' connections), from /proc/net/tcp and tcp6.
std::set<std::string> server_side_inodes(int port) {
  std::set<std::string> inodes;
  const std::string local_port = fmt::format(":{:04X}", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      // "sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode"
      std::istringstream fields(line);
      std::string sl, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state == "01" && local.size() > 5 && local.substr(local.size() - 5) == local_port) {
        inodes.insert(inode);
      }
    }
  }
  return inodes;
}

// The socket inodes among the descriptors of the session's own process, as its
// /proc/self/fdinfo says ("ino:"); nullopt where the kernel does not say (before Linux 5.14).
std::optional<std::set<std::string>> session_inodes(RPCSession& s) {
  Function read_file = s.get_function("rpc.test.read_file");
  std::set<std::string> inodes;
  bool said = false;
  for (int fd = 0; fd < 64; ++fd) {
    std::string info;
    try {
      info = read_file(fmt::format("/proc/self/fdinfo/{}", fd)).cast<std::string>();
    } catch (const Error&) {
      continue;  // no such descriptor
    }
    const size_t at = info.find("ino:");
    if (at == std::string::npos) continue;
    said = true;
    std::istringstream rest(info.substr(at + 4));
    std::string inode;
    rest >> inode;
    inodes.insert(inode);
  }
  if (!said) return std::nullopt;
  return inodes;
}

// The session process holds the client's connection itself: the server's end of it (the TCP
// socket accepted on the server's port) is among the session process's descriptors, with a
// token and without, started ahead or not. Under a token the server used to keep that socket
// and relay the session's plaintext over a socket pair.
TEST(SessionTls, TheSessionProcessHoldsTheClientsConnection) {
  for (const int prestarted : {1, 0}) {
    for (const bool token : {true, false}) {
      SCOPED_TRACE(fmt::format("{} started ahead, {}", prestarted, token ? "token" : "no token"));
      ServerOptions o = token_server(prestarted);
      if (!token) o.token.clear();
      Server server(o);
      RPCSession s = connect("127.0.0.1", server.port(), with_token(token ? kToken : ""));
      const std::set<std::string> server_side = server_side_inodes(server.port());
      ASSERT_EQ(server_side.size(), 1u) << "one connection to the server";
      const auto held = session_inodes(s);
      if (!held) GTEST_SKIP() << "this kernel's fdinfo does not name socket inodes";
      EXPECT_EQ(held->count(*server_side.begin()), 1u)
          << "the session process does not hold the client's socket";
      EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{41}).cast<int64_t>(), 42);
    }
  }
}

// A session process that does not report the handshake it was handed (stopped here, as a hung
// one would be) is ended at the handshake deadline, with its directory; the next client gets a
// session. Before, the server ran the TLS handshake itself and handed the session to the
// stopped process, whose client then waited for ever.
TEST(SessionTls, AProcessThatDoesNotReportTheHandshakeEndsAtTheDeadline) {
  ServerOptions o = token_server(1);
  o.handshake_timeout_s = 1;
  Server server(o);
  ASSERT_TRUE(wait_until([] { return session_processes().size() == 1; }, 10s));
  std::this_thread::sleep_for(100ms);  // in the pool, not just exec'd
  const pid_t stopped = session_processes().front();
  ASSERT_EQ(::kill(stopped, SIGSTOP), 0);
  ConnectOptions c = with_token();
  c.connect_timeout = 5s;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(connect("127.0.0.1", server.port(), c), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s) << "the client was not let go";
  EXPECT_TRUE(wait_until(
      [&] {
        for (const pid_t p : session_processes()) {
          if (p == stopped) return false;
        }
        return true;
      },
      5s))
      << "the stopped session process was not ended";
  RPCSession next = connect("127.0.0.1", server.port(), with_token());
  EXPECT_EQ(next.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

// A wrong token costs no process: the process started ahead that ran the refused handshake
// waits for the next client, and serves it.
TEST(SessionTls, AWrongTokenLeavesTheProcessStartedAheadToTheNextClient) {
  Server server(token_server(1));
  ASSERT_TRUE(wait_until([] { return session_processes().size() == 1; }, 10s));
  std::this_thread::sleep_for(100ms);
  const pid_t ahead = session_processes().front();
  EXPECT_THROW(connect("127.0.0.1", server.port(), with_token(kToken + "-wrong")), Error);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(session_processes(), std::vector<pid_t>{ahead});
  RPCSession s = connect("127.0.0.1", server.port(), with_token());
  EXPECT_EQ(s.get_function("rpc.test.pid")().cast<int64_t>(), static_cast<int64_t>(ahead));
}

}  // namespace session_tls_test
}  // namespace kiln::rpc
