// SPDX-License-Identifier: Apache-2.0
// Soak (issue 16): many sessions against one `kiln rpc-server` process, clean ones and ones
// whose client vanishes mid-upload or mid-handshake, must leave the server's memory, open
// descriptors and files where they were. KILN_RPC_SOAK_SESSIONS sets the count (default 200, 100
// in a sanitizer build; the soak is 2,000: KILN_RPC_SOAK_SESSIONS=2000).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "kiln/kiln.h"
#include "kiln/rpc/session.h"
#include "kiln/rpc/tracker.h"
#include "rpc/raw_session.h"
#include "rpc/rpc_test_util.h"

namespace kiln::rpc {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct Usage {
  int64_t rss_kib = -1;
  int64_t fds = -1;
  int64_t files = -1;
};

Usage usage(pid_t pid, const fs::path& work_dir) {
  Usage u;
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) u.rss_kib = std::stoll(line.substr(6));
  }
  u.fds = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(fmt::format("/proc/{}/fd", pid))) {
    ++u.fds;
  }
  u.files = 0;
  for ([[maybe_unused]] const auto& e : fs::recursive_directory_iterator(work_dir)) ++u.files;
  return u;
}

// In a sanitizer build (CI's second pass) the servers these tests start are built with ASan,
// whose quarantine holds every freed block until 256 MiB have gone through it: their RSS then
// climbs for hundreds of sessions with no leak at all (measured: +50 MiB over 200 sessions).
// Without the quarantine freed memory is reused as in a plain build, so the bound below means
// the same thing in both. Leaks themselves are LeakSanitizer's job in that build.
void reuse_freed_memory_in_sanitized_children() {
  kiln::test::add_asan_option_for_children("quarantine_size_mb=0");
}

// The sessions of a soak by default, and the least of its warm-up: fewer in a sanitizer build,
// where each costs ~4x as much and the test must stay inside ctest's 120 s.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kDefaultSessions = 100;
constexpr int kLeastWarmUp = 200;
#else
constexpr int kDefaultSessions = 200;
constexpr int kLeastWarmUp = 600;
#endif

void one_session(int port, int i) {
  ConnectOptions c;
  c.key = "soak";
  c.connect_timeout = 10s;
  if (i % 10 == 3) {
    // A client that vanishes mid-upload.
    auto conn = test::raw_session("127.0.0.1", port, "soak");
    test::start_upload(*conn, 1 << 20, 64 << 10);
    return;
  }
  if (i % 10 == 7) {
    // A client that vanishes mid-handshake.
    auto conn = Connection::connect("127.0.0.1", port, 5s);
    conn->write_all("KILN", 4);
    return;
  }
  // A vanished client's session may still be ending (the server notices the close): "busy"
  // is retried for a bounded time.
  RPCSession s;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (true) {
    try {
      s = connect("127.0.0.1", port, c);
      break;
    } catch (const RuntimeError& e) {
      if (std::string(e.what()).find("busy") == std::string::npos ||
          std::chrono::steady_clock::now() > deadline) {
        throw;
      }
      std::this_thread::sleep_for(10ms);
    }
  }
  s.upload_bytes(std::string(4096, 'x'), fmt::format("dir/file-{}.bin", i));
  Tensor t = Tensor::empty({1024}, DataType::Float(32), s.cpu());
  EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{i}).cast<int64_t>(), i + 1);
  s.close();
}

TEST(RpcSoak, ManySessionsLeaveMemoryDescriptorsAndFilesWhereTheyWere) {
  int sessions = kDefaultSessions;
  if (const char* env = std::getenv("KILN_RPC_SOAK_SESSIONS")) sessions = std::atoi(env);
  ASSERT_GT(sessions, 0);
  const fs::path work = fs::temp_directory_path() / fmt::format("kiln-soak-{}", getpid());
  fs::remove_all(work);
  fs::create_directories(work);
  reuse_freed_memory_in_sanitized_children();
  auto server = kiln::test::start_rpc_server({"--key", "soak", "--work-dir", work.string()});
  const auto settle = [&] {
    // Sessions end asynchronously: wait until no session directory is left.
    kiln::test::wait_until([&] { return fs::is_empty(work); }, 10s);
    std::this_thread::sleep_for(200ms);
  };
  // Warm up: allocator pools and arenas (each session runs on a new thread), thread stacks,
  // the runtime's lazily loaded parts. The server's RSS then moves between ~15 and ~24 MiB
  // as glibc's arenas are trimmed or not (measured over 12,000 sessions: it never passed that
  // plateau), so the bound is the highest RSS seen during the warm-up, not its last value.
  const int warm_up = std::max(kLeastWarmUp, sessions / 2);
  int64_t plateau_kib = 0;
  for (int i = 0; i < warm_up; ++i) {
    one_session(server.port, i);
    // Sampled often: under load a sample every 50 sessions missed the top of the range
    // (19 MiB seen, 23 MiB reached later with no leak: flat over 3,000 sessions alone).
    if (i % 10 == 9)
      plateau_kib = std::max(plateau_kib, usage(server.process->pid(), work).rss_kib);
  }
  settle();
  const Usage before = usage(server.process->pid(), work);
  plateau_kib = std::max(plateau_kib, before.rss_kib);
  for (int i = 0; i < sessions; ++i) one_session(server.port, i);
  settle();
  const Usage after = usage(server.process->pid(), work);
  std::printf(
      "soak: %d sessions; RSS %lld -> %lld KiB (warm-up peak %lld), fds %lld -> %lld, files %lld "
      "-> %lld\n",
      sessions, static_cast<long long>(before.rss_kib), static_cast<long long>(after.rss_kib),
      static_cast<long long>(plateau_kib), static_cast<long long>(before.fds),
      static_cast<long long>(after.fds), static_cast<long long>(before.files),
      static_cast<long long>(after.files));
  EXPECT_EQ(after.files, 0) << "session files left behind";
  EXPECT_LE(after.fds, before.fds) << "descriptors leaked";
  // A leak of one 4 KiB upload or one tensor per session would pass this after 1,000 sessions.
  EXPECT_LT(after.rss_kib, plateau_kib + 4 * 1024) << "memory grew";
  EXPECT_TRUE(server.process->running()) << server.process->log();
  fs::remove_all(work);
}

// Issue 27, item 8: a server registered with a tracker grew ~110 bytes per session (its
// registration remembered every match key it ever offered). Sessions here go through a
// `kiln tracker`, so the registration PUTs a fresh key for each. KILN_RPC_SOAK_SESSIONS sets
// the count (default 200, 100 in a sanitizer build; the soak is 10,000). The registration's
// bound itself is checked exactly by
// TrackerFairness.ARegistrationRemembersABoundedNumberOfMatchKeys.
TEST(RpcSoak, AServerRegisteredWithATrackerStaysFlat) {
  int sessions = kDefaultSessions;
  if (const char* env = std::getenv("KILN_RPC_SOAK_SESSIONS")) sessions = std::atoi(env);
  ASSERT_GT(sessions, 0);
  const fs::path work = fs::temp_directory_path() / fmt::format("kiln-soak-tracker-{}", getpid());
  fs::remove_all(work);
  fs::create_directories(work);
  reuse_freed_memory_in_sanitized_children();
  auto tracker = kiln::test::start_tracker();
  auto server =
      kiln::test::start_rpc_server({"--key", "soak", "--work-dir", work.string(), "--tracker",
                                    fmt::format("127.0.0.1:{}", tracker.port)});
  TrackerSession client = connect_tracker("127.0.0.1", tracker.port, 10s);
  const auto one = [&](int i) {
    // Granted once the server has registered its slot again after the last session.
    RPCSession s = client.request("soak", 1, 0, 5, 20s);
    EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{i}).cast<int64_t>(), i + 1);
    s.close();
  };
  const int warm_up = std::max(100, sessions / 4);
  int64_t plateau_kib = 0;
  for (int i = 0; i < warm_up; ++i) {
    one(i);
    if (i % 10 == 9)
      plateau_kib = std::max(plateau_kib, usage(server.process->pid(), work).rss_kib);
  }
  const Usage before = usage(server.process->pid(), work);
  plateau_kib = std::max(plateau_kib, before.rss_kib);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < sessions; ++i) {
    one(i);
    if (i % 1000 == 999) {
      std::printf("soak (tracker): %d sessions, RSS %lld KiB\n", i + 1,
                  static_cast<long long>(usage(server.process->pid(), work).rss_kib));
      std::fflush(stdout);
    }
  }
  // The last session ends asynchronously (its socket closes once its worker has gone): a
  // leaked descriptor stays, one in flight goes within moments.
  kiln::test::wait_until([&] { return usage(server.process->pid(), work).fds <= before.fds; }, 10s);
  const Usage after = usage(server.process->pid(), work);
  std::printf(
      "soak (tracker): %d sessions in %.0f s; RSS %lld -> %lld KiB (warm-up peak %lld), fds "
      "%lld -> %lld\n",
      sessions, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
      static_cast<long long>(before.rss_kib), static_cast<long long>(after.rss_kib),
      static_cast<long long>(plateau_kib), static_cast<long long>(before.fds),
      static_cast<long long>(after.fds));
  EXPECT_LE(after.fds, before.fds) << "descriptors leaked";
  EXPECT_LT(after.rss_kib, plateau_kib + 4 * 1024) << "memory grew";
  EXPECT_TRUE(server.process->running()) << server.process->log();
  fs::remove_all(work);
}

}  // namespace
}  // namespace kiln::rpc
