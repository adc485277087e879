// SPDX-License-Identifier: Apache-2.0
// Issue 16: attacks on `kiln rpc-server` and its clients, on loopback (127.0.0.0/8; other
// loopback source addresses play other hosts). Each test is a regression test for one defect
// the outside attack found; it failed on the code before its fix.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "kiln/vm/virtual_machine.h"
#include "rpc/connection.h"
#include "rpc/handshake.h"
#include "rpc/protocol.h"
#include "rpc/raw_session.h"
#include "rpc/rpc_test_util.h"
#include "rpc/socket_io.h"

namespace kiln::rpc {
// Named after the file, not anonymous: its helpers meet other files' in a unity build.
namespace server_hardening_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;
using kiln::test::wait_until;

ServerOptions loopback(std::string key = "test") {
  ServerOptions o;
  o.port = 0;
  o.key = std::move(key);
  o.test_hooks.test_functions = true;
  // Sessions take processes started ahead: the limits hold for them as for processes started
  // for their session (the default, which every other test file covers).
  o.prestarted_sessions = 1;
  return o;
}

ConnectOptions with_key(const std::string& key, const std::string& token = "") {
  ConnectOptions c;
  c.key = key;
  c.token = token;
  c.connect_timeout = 10s;
  return c;
}

// A plain TCP socket from loopback address `source` to 127.0.0.1:`port`; -1 when the
// connection failed.
int raw_connect(int port, const char* source = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (source != nullptr) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect_until(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to),
                    std::chrono::steady_clock::now() + 5s) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether the peer closed `fd` within `timeout` (data before the close is skipped).
bool closed_within(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (poll_until(fd, POLLIN, deadline) > 0) {
    char buf[512];
    const ssize_t got = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
  return false;
}

// A process's resident memory in KiB (/proc/<pid>/status VmRSS).
int64_t rss_kib(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// ---------------------------------------------------------------------------------------------
// Item 4: the handshake limit is a deadline, handshakes are capped per address, and a quick
// client always finds a slot.

// Peers that each send one byte now and then: they held all 32 handshake slots forever.
class SlowLoris {
 public:
  SlowLoris(int port, const std::vector<std::string>& sources) {
    for (const auto& source : sources) {
      const int fd = raw_connect(port, source.c_str());
      if (fd >= 0) fds_.push_back(fd);
    }
    dripper_ = std::thread([this] {
      const char magic[] = "KILN-RPC";
      for (int step = 0; step < 8 && !stop_; ++step) {  // at most 8 x 500 ms
        for (const int fd : fds_) ::send(fd, magic + step, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(50ms);
      }
    });
  }
  ~SlowLoris() {
    stop_ = true;
    dripper_.join();
    for (const int fd : fds_) ::close(fd);
  }
  const std::vector<int>& fds() const { return fds_; }

 private:
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::thread dripper_;
};

TEST(RpcHardening, SlowLorisFromOneAddressCannotLockOutAClient) {
  ServerOptions o = loopback();
  o.handshake_timeout_s = 2;
  Server server(o);
  SlowLoris loris(server.port(), std::vector<std::string>(40, "127.0.5.1"));
  ASSERT_EQ(loris.fds().size(), 40u);
  std::this_thread::sleep_for(300ms);
  RPCSession s = connect("127.0.0.1", server.port(), with_key("test"));
  EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
  s.close();
  // The whole handshake has a deadline: dripping a byte every 500 ms does not extend it.
  for (const int fd : loris.fds()) EXPECT_TRUE(closed_within(fd, 10s));
}

// Issue 37, item 4: the 8 handshakes one address may have at once, all held by peers dripping
// bytes, refused every other client from that address until they stopped. The address's
// oldest handshake now makes room for a new one.
TEST(RpcHardening, SlowLorisCannotLockOutAClientFromItsOwnAddress) {
  ServerOptions o = loopback();
  o.handshake_timeout_s = 30;  // not their deadline: the room a new handshake makes
  Server server(o);
  SlowLoris loris(server.port(), std::vector<std::string>(8, "127.0.5.3"));
  ASSERT_EQ(loris.fds().size(), 8u);
  std::this_thread::sleep_for(300ms);
  const int fd = raw_connect(server.port(), "127.0.5.3");
  ASSERT_GE(fd, 0);
  auto conn = Connection::adopt(fd, fmt::format("127.0.0.1:{}", server.port()));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  conn->set_deadline(deadline);
  EXPECT_EQ(handshake::client(*conn, with_key("test"), deadline), "server:test");
}

TEST(RpcHardening, SlowLorisFromManyAddressesCannotLockOutAClient) {
  ServerOptions o = loopback();
  o.handshake_timeout_s = 30;  // the eviction of the oldest handshake lets the client in
  Server server(o);
  std::vector<std::string> sources;
  for (int i = 1; i <= 40; ++i) sources.push_back(fmt::format("127.0.6.{}", i));
  SlowLoris loris(server.port(), sources);
  ASSERT_EQ(loris.fds().size(), 40u);
  std::this_thread::sleep_for(300ms);
  RPCSession s = connect("127.0.0.1", server.port(), with_key("test"));
  EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{2}).cast<int64_t>(), 3);
}

// Tokens, the encrypted channel and the throttle of guesses: secure_channel_test.cc.

// ---------------------------------------------------------------------------------------------
// Item 9: session directories are unique (mkdtemp), private, and never an existing one.

TEST(RpcHardening, SessionDirectoriesAreUniqueAndPrivate) {
  const fs::path shared = fs::temp_directory_path() / fmt::format("kiln-shared-{}", getpid());
  fs::remove_all(shared);
  fs::create_directories(shared / "session-1");
  std::ofstream(shared / "session-1" / "crashed.txt") << "a crashed server's file";
  ServerOptions a = loopback();
  a.work_dir = shared;
  ServerOptions b = a;
  Server server_a(a);
  Server server_b(b);
  RPCSession sa = connect("127.0.0.1", server_a.port(), with_key("test"));
  RPCSession sb = connect("127.0.0.1", server_b.port(), with_key("test"));
  sa.upload_bytes("mine", "a.txt");
  EXPECT_TRUE(sb.listdir().empty()) << "B sees A's files";
  EXPECT_TRUE(sa.listdir() == std::vector<std::string>{"a.txt"});
  sb.upload_bytes("sub", "dir/b.txt");
  // 0700 directories, 0600 files; those of pre-started session processes (empty) too.
  int sessions = 0;
  for (const auto& e : fs::directory_iterator(shared)) {
    if (e.path().filename() == "session-1") continue;
    if (!fs::is_empty(e.path())) ++sessions;
    EXPECT_EQ(fs::status(e.path()).permissions() & fs::perms::all, fs::perms::owner_all)
        << e.path();
    for (const auto& f : fs::recursive_directory_iterator(e.path())) {
      const auto want = f.is_directory() ? fs::perms::owner_all
                                         : (fs::perms::owner_read | fs::perms::owner_write);
      EXPECT_EQ(f.status().permissions() & fs::perms::all, want) << f.path();
    }
  }
  EXPECT_EQ(sessions, 2);
  sa.close();
  sb.close();
  // The crashed server's directory was neither used nor removed.
  EXPECT_TRUE(fs::exists(shared / "session-1" / "crashed.txt"));
  server_a.stop();
  server_b.stop();
  EXPECT_TRUE(fs::exists(shared)) << "a given --work-dir is never removed";
  fs::remove_all(shared);
}

// ---------------------------------------------------------------------------------------------
// Item 10: the default work directory is made with mkdtemp (0700), links are never followed,
// and leftovers of crashed servers of the same user are removed at start.

TEST(RpcHardening, DefaultWorkDirectoryIsPrivateAndLeftoversAreCleaned) {
  const fs::path tmp = fs::temp_directory_path() / fmt::format("kiln-tmpdir-{}", getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp / "victim");
  std::ofstream(tmp / "victim" / "precious.txt") << "not the server's";
  const std::string prefix = fmt::format("kiln-rpc-{}-", getuid());
  // A planted link where a server's directory could be, and a crashed server's leftover.
  fs::create_directory_symlink(tmp / "victim", tmp / (prefix + "999999998-planted"));
  const std::string leftover = prefix + "999999999-AbCdEf";  // its server process is gone
  fs::create_directories(tmp / leftover / "session-x");
  std::ofstream(tmp / leftover / "session-x" / "old-session-file") << "x";

  const char* old_tmpdir = std::getenv("TMPDIR");
  const std::string saved = old_tmpdir ? old_tmpdir : "";
  setenv("TMPDIR", tmp.c_str(), 1);
  auto server = kiln::test::start_rpc_server({"--key", "k"});
  if (old_tmpdir) {
    setenv("TMPDIR", saved.c_str(), 1);
  } else {
    unsetenv("TMPDIR");
  }
  EXPECT_FALSE(fs::exists(tmp / leftover)) << server.process->log();
  EXPECT_TRUE(fs::is_symlink(tmp / (prefix + "999999998-planted")));
  fs::path own;
  for (const auto& e : fs::directory_iterator(tmp)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && !fs::is_symlink(e.symlink_status())) own = e.path();
  }
  ASSERT_FALSE(own.empty());
  struct stat st {};
  ASSERT_EQ(::lstat(own.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  RPCSession s = connect("127.0.0.1", server.port, with_key("k"));
  s.upload_bytes("data", "f.txt");
  server.process->kill(SIGTERM);
  ASSERT_TRUE(server.process->wait_for(20s).has_value());
  EXPECT_FALSE(fs::exists(own)) << "its own directory is removed at SIGTERM";
  EXPECT_TRUE(fs::exists(tmp / "victim" / "precious.txt")) << "nothing through the link";
  fs::remove_all(tmp);
}

// ---------------------------------------------------------------------------------------------
// Item 7: --max-session-memory counts every byte a session holds, not only Alloc.

TEST(RpcHardening, TensorsMadeByCallsCountAgainstTheMemoryLimit) {
  ServerOptions o = loopback();
  o.max_session_memory = 16 << 20;
  Server server(o);
  RPCSession s = connect("127.0.0.1", server.port(), with_key("test"));
  Function alloc = s.get_function("rpc.test.alloc");
  std::vector<Any> kept;
  int refused = 0;
  for (int i = 0; i < 24; ++i) {
    try {
      kept.push_back(alloc(int64_t{8} << 20));
    } catch (const RPCError& e) {
      EXPECT_THAT(e.remote_message(), HasSubstr("memory limit"));
      ++refused;
    }
  }
  EXPECT_LE(kept.size(), 2u);
  EXPECT_EQ(refused, 24 - static_cast<int>(kept.size()));
  // Freed tensors count no more; Alloc and call results share the one budget.
  kept.clear();
  EXPECT_NO_THROW(s.get_function("testing.echo")(int64_t{1}));  // frees are sent first
  Tensor a = Tensor::empty({8 << 20}, DataType::UInt(8), s.cpu());
  EXPECT_NO_THROW(kept.push_back(alloc(int64_t{4} << 20)));
  EXPECT_THROW(alloc(int64_t{8} << 20), RPCError);
}

TEST(RpcHardening, TensorsInsideReturnedTuplesCountToo) {
  // A function of this process (the server is in-process) returning a VM tuple of two 6 MiB
  // tensors, one of them nested.
  registry::set(
      "test.hardening.tuple",
      Function::from_packed("test.hardening.tuple",
                            [](const Any*, int32_t) {
                              auto make = [] {
                                return Any(Tensor::empty_host({6 << 20}, DataType::UInt(8)));
                              };
                              auto inner = make_object<vm::ArrayObj>(std::vector<Any>{make()});
                              return Any::object(make_object<vm::ArrayObj>(
                                  std::vector<Any>{make(), Any::object(inner)}));
                            }),
      true);
  ServerOptions o = loopback();
  o.isolation = SessionIsolation::kThread;  // the function above lives in this process
  o.max_session_memory = 16 << 20;
  Server server(o);
  RPCSession s = connect("127.0.0.1", server.port(), with_key("test"));
  Function tuple = s.get_function("test.hardening.tuple");
  Any first = tuple();  // 12 MiB held
  try {
    tuple();  // 24 MiB would be held
    FAIL() << "a second tuple passed the 16 MiB limit";
  } catch (const RPCError& e) {
    EXPECT_THAT(e.remote_message(), HasSubstr("memory limit"));
  }
  // Dropping the first tuple frees its tensors' bytes.
  first = Any();
  EXPECT_NO_THROW(s.get_function("testing.echo")(int64_t{1}));  // frees are sent first
  EXPECT_NO_THROW(tuple());
}

// ---------------------------------------------------------------------------------------------
// Weak points: bounds on handles and uploads; no allocation sized from an unread header.

TEST(RpcHardening, HandlesAndUploadsAreBoundedPerSession) {
  ServerOptions o = loopback();
  o.max_handles = 50;
  o.max_upload_bytes = 1 << 20;
  Server server(o);
  RPCSession s = connect("127.0.0.1", server.port(), with_key("test"));
  std::vector<Function> held;
  int refused = 0;
  for (int i = 0; i < 80; ++i) {
    try {
      held.push_back(s.get_function("rpc.test.addone"));
    } catch (const RPCError& e) {
      EXPECT_THAT(e.remote_message(), HasSubstr("handles"));
      ++refused;
    }
  }
  EXPECT_EQ(held.size(), 50u);
  EXPECT_EQ(refused, 30);
  const std::string half(600 * 1024, 'x');
  s.upload_bytes(half, "one.bin");
  try {
    s.upload_bytes(half, "two.bin");
    FAIL() << "expected the upload limit";
  } catch (const RPCError& e) {
    EXPECT_THAT(e.remote_message(), HasSubstr("upload limit"));
  }
  // The session is still in step after the refused upload.
  EXPECT_EQ(s.listdir(), std::vector<std::string>{"one.bin"});
}

TEST(RpcHardening, AFrameHeaderAloneAllocatesNothing) {
  auto server = kiln::test::start_rpc_server({"--key", "k"});
  auto conn = test::raw_session("127.0.0.1", server.port, "k");
  std::this_thread::sleep_for(200ms);
  const int64_t before = rss_kib(server.process->pid());
  // A 12-byte header announcing a 64 MiB GetGlobalFunc, and nothing more.
  uint8_t header[12];
  const uint64_t length = 64ull << 20;  // the largest frame a GetGlobalFunc may have
  const uint32_t code = static_cast<uint32_t>(wire::Code::kGetGlobalFunc);
  std::memcpy(header, &length, 8);
  std::memcpy(header + 8, &code, 4);
  conn->write_all(header, sizeof(header));
  std::this_thread::sleep_for(500ms);
  const int64_t after = rss_kib(server.process->pid());
  EXPECT_LT(after - before, 16 * 1024) << "RSS grew from " << before << " to " << after << " KiB";
}

// ---------------------------------------------------------------------------------------------
// Weak points: timeouts by default; --session-timeout bounds a running call; test functions
// only on request; SIGTERM within a bound.

TEST(RpcHardening, AClientThatNeverReadsCannotHoldTheSlot) {
  ServerOptions o = loopback();
  o.write_timeout_s = 1;
  Server server(o);
  EXPECT_EQ(ServerOptions{}.write_timeout_s, 60) << "on by default";
  auto conn = test::raw_session("127.0.0.1", server.port(), "test");
  // 64 MiB uploaded, then asked for back and never read.
  const uint64_t n = 64ull << 20;
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.str("big.bin");
  w.u64(n);
  const std::vector<uint8_t> data(n, 1);
  conn->write_frame(wire::Code::kUpload, body, data.data(), n);
  Connection::FrameHeader h = conn->read_frame_header(1 << 20);
  std::vector<uint8_t> reply;
  conn->read_body(h.body_length(), reply, "Return");
  std::vector<uint8_t> download;
  wire::Writer d(download);
  d.str("big.bin");
  conn->write_frame(wire::Code::kDownload, download);
  // The server gives up on it, and the slot is free for the next client.
  EXPECT_TRUE(wait_until([&] { return server.active_sessions() == 0; }, 20s));
  RPCSession next = connect("127.0.0.1", server.port(), with_key("test"));
  EXPECT_EQ(next.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

TEST(RpcHardening, AnIdleClientIsEndedAtTheIdleTimeout) {
  ServerOptions o = loopback();
  o.idle_timeout_s = 1;
  Server server(o);
  EXPECT_EQ(ServerOptions{}.idle_timeout_s, 600) << "on by default";
  RPCSession s = connect("127.0.0.1", server.port(), with_key("test"));
  EXPECT_TRUE(wait_until([&] { return server.active_sessions() == 0; }, 10s));
}

TEST(RpcHardening, TheSessionTimeoutBoundsARunningCall) {
  ServerOptions o = loopback();
  o.session_timeout_s = 1;
  Server server(o);
  RPCSession s = connect("127.0.0.1", server.port(), with_key("test"));
  Function sleep = s.get_function("rpc.test.sleep");
  EXPECT_THROW(sleep(3600.0), RPCSessionTimeoutError);
  EXPECT_TRUE(wait_until([&] { return server.active_sessions() == 0; }, 10s));
  RPCSession next = connect("127.0.0.1", server.port(), with_key("test"));
  EXPECT_EQ(next.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

TEST(RpcHardening, TestFunctionsOnlyOnRequest) {
  ServerOptions o = loopback();
  o.test_hooks.test_functions = false;
  Server server(o);
  RPCSession s = connect("127.0.0.1", server.port(), with_key("test"));
  EXPECT_THROW(s.get_function("rpc.test.sleep"), RPCError);
  EXPECT_THROW(s.get_function("testing.echo"), RPCError);
}

TEST(RpcHardening, SigtermStopsAServerWithACallRunningWithinABound) {
  // rpc.test.sleep ends when told to; rpc.test.block does not (like a kernel): the process
  // then exits after the 5 s grace instead of waiting for it.
  for (const std::string function : {"rpc.test.sleep", "rpc.test.block"}) {
    auto server = kiln::test::start_rpc_server({"--key", "k"});
    std::thread caller([port = server.port, function] {
      try {
        RPCSession s = connect("127.0.0.1", port, with_key("k"));
        s.get_function(function)(3600.0);
      } catch (const std::exception&) {
      }
    });
    std::this_thread::sleep_for(500ms);
    server.process->kill(SIGTERM);
    const auto code = server.process->wait_for(30s);
    caller.join();
    ASSERT_TRUE(code.has_value()) << function << ": still running 30 s after SIGTERM";
    EXPECT_EQ(*code, 0) << function << "\n" << server.process->log();
  }
}

// ---------------------------------------------------------------------------------------------
// Weak points: a non-loopback address needs a token; close() frees the slot before it returns.

TEST(RpcHardening, ANonLoopbackAddressWithoutATokenIsRefused) {
  ServerOptions o = loopback();
  o.host = "0.0.0.0";  // refused before anything is bound
  EXPECT_THAT([&] { Server server(o); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("without a token")));
}

TEST(RpcHardening, CloseReturnsAfterTheServerFreedTheSlot) {
  Server server(loopback());
  for (int i = 0; i < 30; ++i) {
    RPCSession s = connect("127.0.0.1", server.port(), with_key("test"));
    s.close();
  }
  RPCSession last = connect("127.0.0.1", server.port(), with_key("test"));
  EXPECT_EQ(last.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

}  // namespace server_hardening_test
}  // namespace kiln::rpc
