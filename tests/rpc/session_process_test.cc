// SPDX-License-Identifier: Apache-2.0
// Issue 27, defect 7: each session runs in a process of its own (rpc/session_process.h). A
// crash or a backdoor ends with its session; a session cannot read the server's token or
// another session's files.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "rpc/rpc_test_util.h"

namespace kiln::rpc {
// Named after the file, not anonymous: its helpers meet other files' in a unity build.
namespace session_process_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

const std::string kToken = "kiln-test-token-0123456789abcdef";

ServerOptions isolated(int sessions = 1) {
  ServerOptions o;
  o.port = 0;
  o.key = "board";
  o.max_sessions = sessions;
  o.test_hooks.test_functions = true;
  // Sessions take processes started ahead: every test here holds them to what a process
  // started for its session does (the SessionPool tests check the pool itself).
  o.prestarted_sessions = 1;
  return o;
}

ConnectOptions board(const std::string& token = "") {
  ConnectOptions c;
  c.key = "board";
  c.token = token;
  return c;
}

int64_t pid_of(RPCSession& s) { return s.get_function("rpc.test.pid")().cast<int64_t>(); }

// Whether the session's process could hide files from it (a mount namespace of its own).
bool confined(RPCSession& s) {
  return s.get_function("rpc.test.read_file")(std::string("/proc/self/mountinfo"))
             .cast<std::string>()
             .find("kiln-sessions") != std::string::npos;
}

TEST(SessionProcess, ACrashEndsOnlyItsSession) {
  Server server(isolated());
  {
    RPCSession s = connect("127.0.0.1", server.port(), board());
    EXPECT_THAT([&] { s.get_function("rpc.test.crash")(); },
                ::testing::ThrowsMessage<RuntimeError>(HasSubstr("SIGSEGV")));
  }
  EXPECT_TRUE(kiln::test::wait_until([&] { return server.active_sessions() == 0; }, 10s));
  RPCSession next = connect("127.0.0.1", server.port(), board());
  EXPECT_EQ(next.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

// Whatever a session leaves in its process (a hooked function, a thread, a changed global)
// is gone with it: the next session is a new process.
TEST(SessionProcess, EachSessionIsAProcessOfItsOwnThatEndsWithIt) {
  Server server(isolated());
  int64_t first = 0;
  {
    RPCSession s = connect("127.0.0.1", server.port(), board());
    first = pid_of(s);
    EXPECT_NE(first, static_cast<int64_t>(::getpid()));
    s.close();
  }
  EXPECT_TRUE(kiln::test::wait_until(
      [&] { return ::kill(static_cast<pid_t>(first), 0) != 0 && errno == ESRCH; }, 10s));
  RPCSession next = connect("127.0.0.1", server.port(), board());
  EXPECT_NE(pid_of(next), first);
}

TEST(SessionProcess, ASessionCannotReadTheServersTokenOrMemory) {
  const fs::path token_file =
      fs::temp_directory_path() / fmt::format("kiln-session-token-{}", ::getpid());
  std::ofstream(token_file) << kToken << "\n";
  auto server = kiln::test::start_rpc_server(
      {"--key", "board", "--token-file", token_file.string(), "--enable-test-functions"});
  ASSERT_GT(server.port, 0);
  RPCSession s = connect("127.0.0.1", server.port, board(kToken));
  Function read_file = s.get_function("rpc.test.read_file");
  // Not in its environment, nor in the server's (non-dumpable: /proc refuses).
  EXPECT_EQ(s.get_function("rpc.test.getenv")(std::string("KILN_RPC_TOKEN")).cast<std::string>(),
            "");
  const std::string environ_path = fmt::format("/proc/{}/environ", server.process->pid());
  const std::string mem_path = fmt::format("/proc/{}/mem", server.process->pid());
  EXPECT_THROW(read_file(environ_path), Error);
  EXPECT_THROW(read_file(mem_path), Error);
  if (!confined(s)) {
    GTEST_SKIP() << "this machine lets no process make a mount namespace (no CAP_SYS_ADMIN, "
                    "no user namespaces): the token file stays readable to sessions there, as "
                    "docs/rpc.md says";
  }
  std::string content;
  try {
    content = read_file(token_file.string()).cast<std::string>();
  } catch (const Error&) {
  }
  EXPECT_THAT(content, Not(HasSubstr(kToken)));
  s.close();
  fs::remove(token_file);
}

TEST(SessionProcess, ASessionCannotReachAnotherSessionsFiles) {
  Server server(isolated(2));
  RPCSession a = connect("127.0.0.1", server.port(), board());
  const std::string secret = "the first session's secret";
  a.upload_bytes(secret, "secret.txt");
  // Where it lies, as the server's machine sees it.
  fs::path path;
  for (const auto& dir : fs::directory_iterator(server.work_dir())) {
    if (fs::exists(dir.path() / "secret.txt")) path = dir.path() / "secret.txt";
  }
  ASSERT_FALSE(path.empty());
  RPCSession b = connect("127.0.0.1", server.port(), board());
  EXPECT_NE(pid_of(a), pid_of(b));
  EXPECT_THROW(
      b.get_function("rpc.test.read_file")(fmt::format("/proc/{}/cwd/secret.txt", pid_of(a))),
      Error);
  if (!confined(b)) {
    GTEST_SKIP() << "no mount namespace here: sessions' directories are hidden by their "
                    "unguessable names only";
  }
  EXPECT_THROW(b.get_function("rpc.test.read_file")(path.string()), Error);
}

TEST(SessionProcess, TheSessionTimeoutEndsACallThatIgnoresIt) {
  ServerOptions o = isolated();
  o.session_timeout_s = 1;
  Server server(o);
  {
    RPCSession s = connect("127.0.0.1", server.port(), board());
    EXPECT_THAT([&] { s.get_function("rpc.test.block")(30.0); },
                ::testing::ThrowsMessage<Error>(HasSubstr("session has expired")));
  }
  RPCSession next = connect("127.0.0.1", server.port(), board());
  EXPECT_EQ(next.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

// ---------------------------------------------------------------------------------------------
// Issue 37, item 9: session processes started ahead (ServerOptions::prestarted_sessions). Every
// test above runs with a pool of one, so a session taken from the pool is held to all of them
// (every other test file runs with the default, no pool); these check the pool itself.

// This process's session processes (children running kiln-rpc-session): running, and zombies.
struct SessionProcesses {
  std::vector<pid_t> running;
  int zombies = 0;
};
SessionProcesses session_processes() {
  SessionProcesses out;
  for (const kiln::test::ProcessStat& p : kiln::test::children_of(::getpid())) {
    if (p.comm.rfind("kiln-rpc-sess", 0) != 0) continue;
    if (p.state == 'Z') {
      ++out.zombies;
    } else {
      out.running.push_back(p.pid);
    }
  }
  return out;
}

// Gone, and reaped.
bool reaped(int64_t pid) { return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

// Waits until exactly `n` session processes run; their pids (empty when that did not happen).
std::vector<pid_t> wait_for_processes(size_t n) {
  std::vector<pid_t> running;
  const bool ok = kiln::test::wait_until(
      [&] {
        running = session_processes().running;
        return running.size() == n;
      },
      10s);
  return ok ? running : std::vector<pid_t>{};
}

TEST(SessionPool, ASessionTakesAPreStartedProcessAndThePoolRefills) {
  ServerOptions o = isolated();
  o.prestarted_sessions = 1;
  Server server(o);
  const std::vector<pid_t> ready = wait_for_processes(1);
  ASSERT_EQ(ready.size(), 1u) << "no session process was started ahead";
  // A process shows in /proc once exec'd, a moment before the server put it in its pool: a
  // session that came in that moment got a process started for it (seen once beside a build).
  std::this_thread::sleep_for(100ms);
  pid_t spare = -1;
  int64_t first = 0;
  {
    RPCSession s = connect("127.0.0.1", server.port(), board());
    first = pid_of(s);
    EXPECT_EQ(first, ready[0]) << "the session did not take the process started ahead";
    // Replaced as soon as it was taken, while the session runs.
    const std::vector<pid_t> now = wait_for_processes(2);
    ASSERT_EQ(now.size(), 2u) << "the pool was not refilled";
    spare = now[0] == first ? now[1] : now[0];
    EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
    s.close();
  }
  EXPECT_TRUE(kiln::test::wait_until([&] { return reaped(first); }, 10s))
      << "the session's process was kept or left a zombie";
  // The next session gets the spare: a process that never served anyone, not the first one.
  RPCSession next = connect("127.0.0.1", server.port(), board());
  EXPECT_EQ(pid_of(next), spare);
  EXPECT_NE(pid_of(next), first);
}

TEST(SessionPool, APreStartedProcessThatDiedIsReplaced) {
  ServerOptions o = isolated();
  o.prestarted_sessions = 1;
  Server server(o);
  const std::vector<pid_t> ready = wait_for_processes(1);
  ASSERT_EQ(ready.size(), 1u);
  ASSERT_EQ(::kill(ready[0], SIGKILL), 0);
  EXPECT_TRUE(kiln::test::wait_until([&] { return reaped(ready[0]); }, 10s))
      << "the dead process was left a zombie";
  std::vector<pid_t> replaced;
  EXPECT_TRUE(kiln::test::wait_until(
      [&] {
        replaced = session_processes().running;
        return replaced.size() == 1 && replaced[0] != ready[0];
      },
      10s))
      << "not replaced";
  std::this_thread::sleep_for(100ms);  // shown in /proc before it is in the pool (see above)
  RPCSession s = connect("127.0.0.1", server.port(), board());
  ASSERT_EQ(replaced.size(), 1u);
  EXPECT_EQ(pid_of(s), replaced[0]);
  EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

TEST(SessionPool, StopReapsThePool) {
  ServerOptions o = isolated();
  o.prestarted_sessions = 2;
  std::vector<pid_t> ready;
  fs::path work_dir;
  {
    Server server(o);
    work_dir = server.work_dir();
    ready = wait_for_processes(2);
    ASSERT_EQ(ready.size(), 2u);
    EXPECT_TRUE(server.stop());
    // At once: stop() returns with the pool's processes reaped.
    for (const pid_t pid : ready) EXPECT_TRUE(reaped(pid)) << "process " << pid << " left";
    const SessionProcesses left = session_processes();
    EXPECT_TRUE(left.running.empty());
    EXPECT_EQ(left.zombies, 0);
  }
  EXPECT_FALSE(fs::exists(work_dir)) << "the pool's session directories were left";
}

TEST(SessionPool, WithoutAPoolEachSessionStartsItsOwnProcess) {
  ServerOptions o = isolated();
  o.prestarted_sessions = 0;
  Server server(o);
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(session_processes().running.empty()) << "a process was started ahead";
  int64_t first = 0;
  {
    RPCSession s = connect("127.0.0.1", server.port(), board());
    first = pid_of(s);
    EXPECT_EQ(session_processes().running, std::vector<pid_t>{static_cast<pid_t>(first)});
    s.close();
  }
  EXPECT_TRUE(kiln::test::wait_until([&] { return reaped(first); }, 10s));
  EXPECT_TRUE(session_processes().running.empty());
  EXPECT_THROW(Server([&] {
                 ServerOptions bad = o;
                 bad.prestarted_sessions = -1;
                 return bad;
               }()),
               ValueError);
}

}  // namespace session_process_test
}  // namespace kiln::rpc
