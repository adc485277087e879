// SPDX-License-Identifier: Apache-2.0
// rpc_run, RPCConfig and servers behind a tracker (SPEC.md §1.7, §1.10, §4.5, §4.8), with
// the faults of the issue: a server killed mid-call, a client gone mid-upload, a tracker
// restart, and `kiln run` with a remote: section. Everything on loopback, in bounded time.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "example_args.h"
#include "kiln/kiln.h"
#include "kiln/rpc/rpc_config.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "kiln/rpc/tracker.h"
#include "rpc/raw_session.h"
#include "rpc/rpc_test_util.h"
#include "test_util.h"

namespace kiln::rpc {
// Named after the file, not anonymous: its helpers meet other files' in a unity build.
namespace rpc_run_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
using kiln::test::ChildProcess;
using kiln::test::wait_until;

const std::string kKernels = KILN_EXAMPLE_KERNEL_DIR;

TrackerOptions tracker_options() {
  TrackerOptions o;
  o.port = 0;
  return o;
}

ServerOptions board(int tracker_port, const std::string& key, int max_sessions = 1) {
  ServerOptions o;
  o.port = 0;
  o.key = key;
  o.tracker = fmt::format("127.0.0.1:{}", tracker_port);
  o.max_sessions = max_sessions;
  o.test_hooks.test_functions = true;
  return o;
}

// The free count of `key` in the tracker's summary (-1 when the key has no queue).
int64_t free_count(int tracker_port, const std::string& key) {
  for (const auto& q : connect_tracker("127.0.0.1", tracker_port).summary().queues) {
    if (q.key == key) return q.free;
  }
  return -1;
}

int64_t pending_count(int tracker_port, const std::string& key) {
  for (const auto& q : connect_tracker("127.0.0.1", tracker_port).summary().queues) {
    if (q.key == key) return q.pending;
  }
  return -1;
}

RPCConfig config_for(int tracker_port, const std::string& key) {
  RPCConfig c;
  c.tracker_host = "127.0.0.1";
  c.tracker_port = tracker_port;
  c.tracker_key = key;
  c.session_timeout_sec = 30;
  c.request_wait_sec = 10;
  return c;
}

using kiln::test::vector_add_args;

TEST(RpcConfig, MissingFieldsAreReportedBeforeAnyNetworkAccess) {
  ScopedEnv a("KILN_TRACKER_HOST", std::nullopt), b("KILN_TRACKER_PORT", std::nullopt),
      c("KILN_TRACKER_KEY", std::nullopt), d("TVM_TRACKER_HOST", std::nullopt),
      e("TVM_TRACKER_PORT", std::nullopt), f("TVM_TRACKER_KEY", std::nullopt);
  EXPECT_THAT([] { RPCConfig::normalized(std::nullopt); },
              ::testing::ThrowsMessage<ValueError>(::testing::StrEq(
                  "RPCConfig.tracker_host is not provided. Please provide it explicitly,or set "
                  "environment variable TVM_TRACKER_HOST")));
  RPCConfig partial;
  partial.tracker_host = "127.0.0.1";
  EXPECT_THAT([&] { RPCConfig::normalized(partial); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("RPCConfig.tracker_port")));
  partial.tracker_port = 9190;
  EXPECT_THAT([&] { RPCConfig::normalized(partial); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("TVM_TRACKER_KEY")));
  // rpc_run checks the same before it connects or exports anything.
  Module m = load_module(kKernels + "/libvector_add.so");
  EXPECT_THROW(testing::rpc_run(m, "cpu", vector_add_args(4), std::nullopt, partial), ValueError);
}

TEST(RpcConfig, EnvironmentFallbacksKilnFirstAndPortsAsText) {
  ScopedEnv a("TVM_TRACKER_HOST", "tvm-host"), b("TVM_TRACKER_PORT", "9190"),
      c("TVM_TRACKER_KEY", "tvm-key"), d("KILN_TRACKER_HOST", "kiln-host"),
      e("KILN_TRACKER_PORT", std::nullopt), f("KILN_TRACKER_KEY", "");
  RPCConfig config;
  config.tracker_host = "";  // empty falls back, as in the reference
  config.tracker_port = 0;
  const RPCConfig n = RPCConfig::normalized(config);
  EXPECT_EQ(*n.tracker_host, "kiln-host") << "KILN_* wins over TVM_*";
  EXPECT_EQ(*n.tracker_port, 9190) << "the port given as text becomes a number";
  EXPECT_EQ(*n.tracker_key, "tvm-key");
  ScopedEnv g("KILN_TRACKER_PORT", "http");
  EXPECT_THROW(RPCConfig::normalized(config), ValueError);
}

TEST(RpcConfig, HostPortParsing) {
  HostPort hp = parse_host_port("board7.lab:9190");
  EXPECT_EQ(hp.host, "board7.lab");
  EXPECT_EQ(hp.port, 9190);
  hp = parse_host_port("[::1]:9091");
  EXPECT_EQ(hp.host, "::1");
  EXPECT_EQ(hp.port, 9091);
  for (const std::string bad :
       {"nowhere", ":9190", "host:", "host:http", "host:0", "host:65536", "host:91x", "[]:9190"}) {
    EXPECT_THAT(
        [&] { parse_host_port(bad); },
        ::testing::ThrowsMessage<ValueError>(HasSubstr(fmt::format("'{}' is not HOST:PORT", bad))))
        << bad;
  }
}

TEST(RpcConfig, TokenFiles) {
  const kiln::TemporaryDirectory dir("kiln_token_test_");
  const fs::path token = dir.path() / "token";
  std::ofstream(token) << "s3cret \r\nsecond line\n";
  EXPECT_EQ(read_token_file(token), "s3cret") << "first line, trailing spaces and CR removed";
  const fs::path empty = dir.path() / "empty";
  std::ofstream(empty) << "\nsecond line\n";
  EXPECT_THAT([&] { read_token_file(empty); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("has an empty first line")));
  EXPECT_THAT([&] { read_token_file(dir.path() / "missing"); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("cannot read the token file")));
}

TEST(RpcConfig, UnreachableTrackerAndMissingServersAreExplained) {
  // A port nobody listens on: bind one, note it, close it.
  int port = 0;
  {
    Tracker probe(tracker_options());
    port = probe.port();
  }
  RPCConfig c = config_for(port, "k");
  c.session_timeout_sec = 1;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT([&] { c.connect_tracker(); },
              ::testing::ThrowsMessage<ValueError>(::testing::AllOf(
                  ::testing::StartsWith(
                      "Unable to connect to the tracker using the following configuration:"),
                  HasSubstr(fmt::format("kiln query --tracker 127.0.0.1:{}", port)))));
  // Not a speed bound: without session_timeout_sec the connect would retry for 10 s.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s) << "bounded by session_timeout_sec";

  Tracker tracker(tracker_options());
  const RPCConfig none = config_for(tracker.port(), "no-such-key");
  EXPECT_EQ(none.count_num_servers(), 0);
  EXPECT_THAT([&] { none.count_num_servers(false); },
              ::testing::ThrowsMessage<ValueError>(::testing::StartsWith(
                  "Unable to find servers with the specific key using the following "
                  "configuration:")));
}

TEST(RpcTracker, ServersRegisterAndReturnToTheFreePool) {
  Tracker tracker(tracker_options());
  Server s1(board(tracker.port(), "test_device"));
  Server s2(board(tracker.port(), "test_device"));
  ASSERT_TRUE(wait_until([&] { return free_count(tracker.port(), "test_device") == 2; }, 10s));
  const TrackerSummary summary = connect_tracker("127.0.0.1", tracker.port()).summary();
  EXPECT_EQ(std::count_if(summary.servers.begin(), summary.servers.end(),
                          [](const auto& s) { return s.key == "server:test_device"; }),
            2);
  EXPECT_EQ(config_for(tracker.port(), "test_device").count_num_servers(), 2);
  {
    RPCSession session = config_for(tracker.port(), "test_device").connect_server();
    EXPECT_EQ(session.server_key(), "server:test_device");
    EXPECT_EQ(session.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
    EXPECT_EQ(free_count(tracker.port(), "test_device"), 1);
  }
  // The session ended: its server registers again.
  EXPECT_TRUE(wait_until([&] { return free_count(tracker.port(), "test_device") == 2; }, 10s));
}

TEST(RpcTracker, KeysWithColonsWork) {
  Tracker tracker(tracker_options());
  Server s(board(tracker.port(), "127.0.0.1:5555"));
  ASSERT_TRUE(wait_until([&] { return free_count(tracker.port(), "127.0.0.1:5555") == 1; }, 10s));
  EXPECT_EQ(config_for(tracker.port(), "127.0.0.1:5555").count_num_servers(), 1);
  RPCSession session = config_for(tracker.port(), "127.0.0.1:5555").connect_server();
  EXPECT_EQ(session.server_key(), "server:127.0.0.1:5555");
}

TEST(RpcTracker, ASecondRequestIsServedWhenTheFirstSessionEnds) {
  Tracker tracker(tracker_options());
  Server s(board(tracker.port(), "single"));
  ASSERT_TRUE(wait_until([&] { return free_count(tracker.port(), "single") == 1; }, 10s));
  auto first = std::make_unique<RPCSession>(config_for(tracker.port(), "single").connect_server());
  auto second = std::async(std::launch::async,
                           [&] { return config_for(tracker.port(), "single").connect_server(); });
  ASSERT_TRUE(wait_until([&] { return pending_count(tracker.port(), "single") == 1; }, 10s));
  EXPECT_EQ(second.wait_for(300ms), std::future_status::timeout) << "the server is taken";
  first->close();
  first.reset();
  ASSERT_EQ(second.wait_for(15s), std::future_status::ready);
  RPCSession session = second.get();
  EXPECT_EQ(session.get_function("rpc.test.addone")(int64_t{5}).cast<int64_t>(), 6);
  EXPECT_EQ(pending_count(tracker.port(), "single"), 0);
}

TEST(RpcTracker, ARequestForAnAbsentKeyFailsWithinItsWaitBound) {
  Tracker tracker(tracker_options());
  RPCConfig c = config_for(tracker.port(), "nobody");
  c.request_wait_sec = 0.5;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT([&] { c.connect_server(); },
              ::testing::ThrowsMessage<NotFoundError>(HasSubstr("nobody")));
  // Not a speed bound: without the wait bound the request waits the 10 s session timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
}

TEST(RpcRun, TarAndSoRoundTripsLeaveNothingOnTheServer) {
  Tracker tracker(tracker_options());
  Server s(board(tracker.port(), "cpu-board"));
  ASSERT_TRUE(wait_until([&] { return free_count(tracker.port(), "cpu-board") == 1; }, 10s));
  Module m = load_module(kKernels + "/libvector_add.so");
  for (const std::string exporter : {"tar", "so"}) {
    SCOPED_TRACE(exporter);
    std::vector<std::string> steps;
    testing::RunHooks hooks;
    hooks.on_step = [&](const std::string& step, double) { steps.push_back(step); };
    const auto args = vector_add_args(1000);
    testing::RunResult r =
        testing::rpc_run(m, "cpu", args, EvaluatorConfig{4, 3, 0, false},
                         config_for(tracker.port(), "cpu-board"), exporter, std::nullopt, hooks);
    ASSERT_EQ(r.outputs.size(), 4u);
    Tensor out = r.outputs[2].cast<Tensor>();
    EXPECT_EQ(out.device(), Device::cpu());
    for (int64_t i = 0; i < 1000; ++i) ASSERT_FLOAT_EQ(out.host_span<float>()[i], i + 0.5f);
    EXPECT_DOUBLE_EQ(r.outputs[3].cast<double>(), 0.25);
    EXPECT_EQ(r.profile.results().size(), 3u) << "exactly evaluator_config.repeat entries";
    EXPECT_EQ(steps, (std::vector<std::string>{"connect", "export", "upload_module", "upload",
                                               "load", "time", "call", "download", "cleanup"}));
    EXPECT_FLOAT_EQ(args[2].cast<Tensor>().host_span<float>()[0], -1.0f) << "inputs copied";
    // Remote cleanup: no session directory, file or loaded library is left on the server.
    EXPECT_TRUE(wait_until([&] { return fs::is_empty(s.work_dir()); }, 5s));
    EXPECT_TRUE(wait_until([&] { return free_count(tracker.port(), "cpu-board") == 1; }, 10s));
  }
}

TEST(RpcRun, CleanupRunsWhenTimingFails) {
  Tracker tracker(tracker_options());
  Server s(board(tracker.port(), "cpu-board"));
  ASSERT_TRUE(wait_until([&] { return free_count(tracker.port(), "cpu-board") == 1; }, 10s));
  Module m = load_module(kKernels + "/libvector_add.so");
  testing::RunHooks hooks;
  hooks.function = "no_such_function";
  std::vector<std::string> steps;
  hooks.on_step = [&](const std::string& step, double) { steps.push_back(step); };
  EXPECT_THROW(
      testing::rpc_run(m, "cpu", vector_add_args(8), std::nullopt,
                       config_for(tracker.port(), "cpu-board"), "tar", std::nullopt, hooks),
      RPCError);
  EXPECT_EQ(steps.back(), "cleanup");
  EXPECT_TRUE(wait_until([&] { return fs::is_empty(s.work_dir()); }, 5s));
}

// ---- faults with real processes ----

TEST(RpcFaults, ServerKilledMidCallFailsTheCallPromptly) {
  auto server = kiln::test::start_rpc_server({"--key", "k"});
  RPCSession session = connect("127.0.0.1", server.port, "k", 10);
  Function sleep = session.get_function("rpc.test.sleep");
  std::thread killer([&] {
    std::this_thread::sleep_for(300ms);
    server.process->kill(SIGKILL);
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT([&] { sleep(30.0); },
              ::testing::ThrowsMessage<RPCError>(HasSubstr("lost the connection")));
  killer.join();
  // "lost the connection" (not RPCSessionTimeoutError) already says it did not wait for the
  // session timeout; the bound only catches a call that waits out the 30 s sleep.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 25s) << "before the sleep would end";
  EXPECT_THROW(session.get_function("rpc.test.addone"), RuntimeError) << "the session is closed";
}

TEST(RpcFaults, KilledServerLeavesTheTrackersPool) {
  Tracker tracker(tracker_options());
  auto a = kiln::test::start_rpc_server(
      {"--key", "pool", "--tracker", fmt::format("127.0.0.1:{}", tracker.port())});
  auto b = kiln::test::start_rpc_server(
      {"--key", "pool", "--tracker", fmt::format("127.0.0.1:{}", tracker.port())});
  ASSERT_TRUE(wait_until([&] { return free_count(tracker.port(), "pool") == 2; }, 10s));
  a.process->kill(SIGKILL);
  EXPECT_TRUE(wait_until([&] { return free_count(tracker.port(), "pool") == 1; }, 10s));
  EXPECT_TRUE(
      wait_until([&] { return config_for(tracker.port(), "pool").count_num_servers() == 1; }, 10s));
}

TEST(RpcFaults, ClientGoneMidUploadFreesTheSessionAndTheServerRegistersAgain) {
  Tracker tracker(tracker_options());
  Server s(board(tracker.port(), "up"));
  ASSERT_TRUE(wait_until([&] { return free_count(tracker.port(), "up") == 1; }, 10s));
  const ServerAddress address =
      connect_tracker("127.0.0.1", tracker.port()).request_server("up", 1, 10s);
  {
    auto conn = test::raw_session(address.host, address.port, address.matchkey);
    ASSERT_TRUE(wait_until([&] { return s.active_sessions() == 1; }, 5s));
    test::start_upload(*conn, 256 << 20, 4 << 20);
  }  // the client vanishes mid-upload
  EXPECT_TRUE(wait_until([&] { return s.active_sessions() == 0; }, 5s));
  EXPECT_TRUE(wait_until([&] { return fs::is_empty(s.work_dir()); }, 5s));
  EXPECT_TRUE(wait_until([&] { return free_count(tracker.port(), "up") == 1; }, 10s))
      << "the server is back in the pool";
}

TEST(RpcFaults, ServersRegisterAgainAfterATrackerRestart) {
  auto tracker = kiln::test::start_tracker();
  const int port = tracker.port;
  Server s(board(port, "survivor"));
  ASSERT_TRUE(wait_until([&] { return free_count(port, "survivor") == 1; }, 10s));
  tracker.process.reset();  // killed
  ChildProcess restarted({kiln::test::kiln_cli(), "tracker", "--port", std::to_string(port),
                          "--port-end", std::to_string(port + 1)});
  ASSERT_EQ(restarted.wait_for_listen_port(), port) << restarted.log();
  EXPECT_TRUE(wait_until(
      [&] {
        try {
          return free_count(port, "survivor") == 1;
        } catch (const std::exception&) {
          return false;
        }
      },
      15s));
  RPCSession session = config_for(port, "survivor").connect_server();
  EXPECT_EQ(session.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
}

TEST(RpcFaults, AnUnresponsiveTrackerDoesNotDelaySessionTimeouts) {
  // A stopped tracker process: its kernel still accepts bytes, nothing answers, so each of the
  // server's exchanges with it (a ping every 2 s after registering) blocks for the 5 s I/O
  // bound. A 3 s session timeout always has a ping before it (at about 2 s), not after it.
  auto tracker = kiln::test::start_tracker();
  Server s(board(tracker.port, "frozen"));
  ASSERT_TRUE(wait_until([&] { return free_count(tracker.port, "frozen") == 1; }, 10s));
  RPCConfig config = config_for(tracker.port, "frozen");
  config.session_timeout_sec = 3;
  RPCSession session = config.connect_server();
  Function sleep = session.get_function("rpc.test.sleep");
  tracker.process->kill(SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(sleep(6.0), RPCSessionTimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "the 3 s timeout, on time";
  tracker.process->kill(SIGCONT);
}

TEST(RpcCli, RunWithARemoteSection) {
  Tracker tracker(tracker_options());
  auto server = kiln::test::start_rpc_server({"--key", "cli-board", "--tracker",
                                              fmt::format("127.0.0.1:{}", tracker.port()),
                                              "--token", "t0ken-0123456789abcdef"});
  ASSERT_TRUE(wait_until([&] { return free_count(tracker.port(), "cli-board") == 1; }, 10s));
  const fs::path dir = fs::temp_directory_path() / fmt::format("kiln_rpc_cli_{}", getpid());
  fs::create_directories(dir);
  {
    std::ofstream(dir / "token") << "t0ken-0123456789abcdef\n";
    std::ofstream yaml(dir / "run.yaml");
    yaml << kiln::test::vector_add_run_config()
         << "remote:\n  tracker: 127.0.0.1:" << tracker.port()
         << "\n  key: cli-board\n  wait: 10\n  token_file: token\n";
  }
  ChildProcess run({kiln::test::kiln_cli(), "run", (dir / "run.yaml").string()});
  ASSERT_EQ(run.wait_for(60s), 0) << run.log();
  EXPECT_THAT(run.log(), HasSubstr("remote, key 'cli-board'"));
  EXPECT_THAT(run.log(), HasSubstr("out      float32[64] min=2 max=65"));
  // A wrong token is a clear error.
  std::ofstream(dir / "token") << "wrong-0123456789abcdef\n";
  ChildProcess refused({kiln::test::kiln_cli(), "run", (dir / "run.yaml").string()});
  EXPECT_EQ(refused.wait_for(60s), 3) << refused.log();  // at once: a token is not retried
  EXPECT_THAT(refused.log(), HasSubstr("could not prove the channel"));
  fs::remove_all(dir);
}

}  // namespace rpc_run_test
}  // namespace kiln::rpc
