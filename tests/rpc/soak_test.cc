// SPDX-License-Identifier: Apache-2.0
// Soak (issue 16): many sessions against one `kiln rpc-server` process, clean ones and ones
// whose client vanishes mid-upload or mid-handshake, must leave the server's memory, open
// descriptors and files where they were. KILN_RPC_SOAK_SESSIONS sets the count (default 200, 100
// in a sanitizer build; the soak is 2,000: KILN_RPC_SOAK_SESSIONS=2000).
// With a token (issue 37): legitimate clients among hostile ones (close_notify after a request,
// resets, readers that never read, vanishing mid-handshake) for KILN_RPC_SOAK_SECONDS.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

// The session processes `kiln rpc-server` keeps started ahead by default
// (--prestarted-sessions): between sessions each is a running child of the server with its
// (empty) directory in the work directory. The soaks expect exactly these, no more.
constexpr int kPooled = 1;

// The entries directly in `dir` (a session's directory is one).
int64_t top_entries(const fs::path& dir) {
  int64_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

// The running (not zombie) children of `pid`.
int running_children(pid_t pid) {
  int n = 0;
  for (const kiln::test::ProcessStat& p : kiln::test::children_of(pid)) n += p.state != 'Z';
  return n;
}

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
  const pid_t server_pid = server.process->pid();
  const auto settle = [&] {
    // Sessions end asynchronously: wait until only the pool's process and directory are left.
    kiln::test::wait_until(
        [&] { return top_entries(work) == kPooled && running_children(server_pid) == kPooled; },
        10s);
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
  EXPECT_EQ(top_entries(work), kPooled) << "session directories left behind (the pool's is one)";
  EXPECT_EQ(after.files, before.files) << "session files left behind";
  EXPECT_EQ(running_children(server_pid), kPooled) << "session processes left behind";
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
  // Measured with the pool full and no session left (its process holds two of the server's
  // descriptors: its channel and its pidfd).
  kiln::test::wait_until([&] { return running_children(server.process->pid()) == kPooled; }, 10s);
  std::this_thread::sleep_for(200ms);
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
  kiln::test::wait_until(
      [&] {
        return usage(server.process->pid(), work).fds <= before.fds &&
               running_children(server.process->pid()) == kPooled;
      },
      10s);
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

// The processes whose parent is `parent`, and how many of them are zombies.
struct Children {
  int running = 0;
  int zombies = 0;
};
Children children_now(pid_t parent) {
  Children c;
  for (const kiln::test::ProcessStat& p : kiln::test::children_of(parent)) {
    ++(p.state == 'Z' ? c.zombies : c.running);
  }
  return c;
}

int64_t threads_of(pid_t pid) {
  int64_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(fmt::format("/proc/{}/task", pid))) {
    ++n;
  }
  return n;
}

// Issue 37: under a token, legitimate sessions among hostile clients for KILN_RPC_SOAK_SECONDS
// (default 15, 10 in a sanitizer build; the soak is 600) from 4 client threads. A
// quarter of the clients are hostile: close_notify (or a reset) right after asking for 1 MiB,
// a reader that never reads 4 MiB and keeps its socket for 6 s, a client that vanishes
// mid-handshake. Afterwards the server holds no more threads or descriptors than before, no
// session process and no zombie, and every slot serves; legitimate sessions were served >= 99%
// ("busy" is retried for 15 s: hostile ones hold a slot until the write timeout ends them).
TEST(RpcSoak, WithATokenHostileClientsAmongLegitimateOnesLeaveNothingBehind) {
#if defined(__SANITIZE_ADDRESS__)
  int seconds = 10;
#else
  int seconds = 15;
#endif
  if (const char* env = std::getenv("KILN_RPC_SOAK_SECONDS")) seconds = std::atoi(env);
  ASSERT_GT(seconds, 0);
  const std::string token = "kiln-soak-token-0123456789abcdef0123456789";
  const fs::path work = fs::temp_directory_path() / fmt::format("kiln-soak-token-{}", getpid());
  fs::remove_all(work);
  fs::create_directories(work / "sessions");
  { std::ofstream(work / "token") << token << "\n"; }
  reuse_freed_memory_in_sanitized_children();
  constexpr int kSlots = 4;
  auto server = kiln::test::start_rpc_server(
      {"--key", "soak", "--work-dir", (work / "sessions").string(), "--token-file",
       (work / "token").string(), "--max-sessions", std::to_string(kSlots), "--write-timeout", "1",
       "--idle-timeout", "5"});
  const pid_t server_pid = server.process->pid();
  ConnectOptions options;
  options.key = "soak";
  options.token = token;
  options.connect_timeout = 10s;

  std::atomic<int64_t> served{0};
  std::atomic<int64_t> refused{0};
  std::atomic<int64_t> hostile{0};
  std::mutex failures_mu;
  std::vector<std::string> failures;  // the first few legitimate failures, for the report
  const auto legitimate = [&](int i) {
    const auto deadline = std::chrono::steady_clock::now() + 15s;
    try {
      RPCSession s;
      while (true) {
        try {
          s = connect("127.0.0.1", server.port, options);
          break;
        } catch (const RuntimeError& e) {
          if (std::string(e.what()).find("busy") == std::string::npos ||
              std::chrono::steady_clock::now() > deadline) {
            throw;
          }
          std::this_thread::sleep_for(20ms);
        }
      }
      s.upload_bytes(std::string(4096, 'x'), fmt::format("file-{}.bin", i));
      if (s.get_function("rpc.test.addone")(int64_t{i}).cast<int64_t>() != i + 1) {
        throw RuntimeError("rpc.test.addone gave a wrong answer");
      }
      s.close();
      ++served;
    } catch (const std::exception& e) {
      ++refused;
      std::lock_guard<std::mutex> lock(failures_mu);
      if (failures.size() < 5) failures.emplace_back(e.what());
    }
  };
  // Readers that never read keep their socket here until 6 s have passed.
  std::mutex parked_mu;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::unique_ptr<Connection>>> parked;
  const auto hostile_client = [&](int kind) {
    ++hostile;
    try {
      if (kind == 3) {
        // Vanishes mid-handshake (the TLS ClientHello never comes).
        auto conn = Connection::connect("127.0.0.1", server.port, 5s);
        conn->write_all("KILN", 4);
        return;
      }
      auto conn = test::raw_session("127.0.0.1", server.port, options);
      test::upload(*conn, "data.bin", kind == 2 ? 4 << 20 : 1 << 20);
      test::ask_download(*conn, "data.bin");
      if (kind == 0) {
        conn->tls_session()->close_notify();
      } else if (kind == 1) {
        const linger hard{1, 0};
        ::setsockopt(conn->fd(), SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
      } else {
        const int small = 64 << 10;
        ::setsockopt(conn->fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
        std::lock_guard<std::mutex> lock(parked_mu);
        parked.emplace_back(std::chrono::steady_clock::now() + 6s, std::move(conn));
      }
    } catch (const std::exception&) {
      // Busy, or ended by the server: a hostile client's fate is not counted.
    }
  };
  const auto drop_parked = [&](bool all) {
    std::lock_guard<std::mutex> lock(parked_mu);
    while (!parked.empty() && (all || parked.front().first < std::chrono::steady_clock::now())) {
      parked.pop_front();
    }
  };

  for (int i = 0; i < 10; ++i) legitimate(i);  // warm-up: what the server sets up once
  ASSERT_EQ(served.load(), 10) << (failures.empty() ? "" : failures[0]);
  ASSERT_TRUE(
      kiln::test::wait_until([&] { return children_now(server_pid).running == kPooled; }, 10s));
  const Usage before = usage(server_pid, work / "sessions");
  const int64_t threads_before = threads_of(server_pid);
  served = 0;

  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::vector<std::thread> clients;
  clients.reserve(4);
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937 rng(37 + t);
      for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
        drop_parked(false);
        const unsigned pick = rng() % 16;
        if (pick < 12) {
          legitimate(t * 1000000 + i);
        } else {
          hostile_client(static_cast<int>(pick - 12));
        }
      }
    });
  }
  for (std::thread& c : clients) c.join();
  drop_parked(true);

  // Sessions end asynchronously: wait for the server to come back to where it was.
  kiln::test::wait_until(
      [&] {
        const Children c = children_now(server_pid);
        return c.running == kPooled && c.zombies == 0 && threads_of(server_pid) <= threads_before &&
               usage(server_pid, work / "sessions").fds <= before.fds;
      },
      20s);
  const Usage after = usage(server_pid, work / "sessions");
  const Children left = children_now(server_pid);
  const int64_t threads_after = threads_of(server_pid);
  const double ratio = static_cast<double>(served) / static_cast<double>(served + refused);
  std::printf(
      "soak (token, %d s): %lld legitimate sessions served, %lld failed (%.2f%%), %lld hostile "
      "clients; threads %lld -> %lld, fds %lld -> %lld, session processes left %d (beside the "
      "pool's %d), zombies %d, files %lld -> %lld\n",
      seconds, static_cast<long long>(served.load()), static_cast<long long>(refused.load()),
      100.0 * ratio, static_cast<long long>(hostile.load()), static_cast<long long>(threads_before),
      static_cast<long long>(threads_after), static_cast<long long>(before.fds),
      static_cast<long long>(after.fds), left.running - kPooled, kPooled, left.zombies,
      static_cast<long long>(before.files), static_cast<long long>(after.files));
  std::fflush(stdout);
  for (const std::string& f : failures)
    std::printf("  a legitimate session failed: %s\n", f.c_str());
  EXPECT_GE(ratio, 0.99) << server.process->log();
  EXPECT_GT(hostile.load(), 0);
  EXPECT_LE(threads_after, threads_before) << "threads left behind";
  EXPECT_LE(after.fds, before.fds) << "descriptors leaked";
  EXPECT_EQ(left.running, kPooled) << "session processes left behind (the pool's is one)";
  EXPECT_EQ(left.zombies, 0) << "zombies left behind";
  EXPECT_EQ(top_entries(work / "sessions"), kPooled) << "session directories left behind";
  EXPECT_EQ(after.files, before.files) << "session files left behind";
  // Every slot serves again: kSlots sessions at once.
  std::vector<RPCSession> all;
  all.reserve(kSlots);
  for (int i = 0; i < kSlots; ++i) all.push_back(connect("127.0.0.1", server.port, options));
  for (RPCSession& s : all)
    EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
  all.clear();
  EXPECT_TRUE(server.process->running()) << server.process->log();
  fs::remove_all(work);
}

}  // namespace
}  // namespace kiln::rpc
