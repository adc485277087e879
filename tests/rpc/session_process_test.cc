// SPDX-License-Identifier: Apache-2.0
// Issue 27, defect 7: each session runs in a process of its own (rpc/session_process.h). A
// crash or a backdoor ends with its session; a session cannot read the server's token or
// another session's files.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kiln/kiln.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "rpc/rpc_test_util.h"

namespace kiln::rpc {
namespace {

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

}  // namespace
}  // namespace kiln::rpc
