// SPDX-License-Identifier: Apache-2.0
// Issue 26 item 10: socket calls under a storm of signals. A SIGALRM handler installed without
// SA_RESTART (as libFuzzer's is) fires every 100 µs on the test's thread, so its blocking calls
// fail with EINTR. Connections must still be made (an interrupted connect is waited for, not
// abandoned or started again), bytes must still flow both ways, and time limits must still
// hold (a retry gets what is left of its limit, not the whole limit again).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/rpc/tracker.h"
#include "rpc/connection.h"
#include "rpc/socket_io.h"
#include "rpc_test_util.h"

// glibc before 2.38 does not name the target thread's member of struct sigevent.
#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

namespace kiln::rpc {
// Named after the file, not anonymous: its helpers meet other files' in a unity build.
namespace signal_test {

using test::LoopbackListener;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::atomic<long> g_signals{0};
void count_signal(int) { g_signals.fetch_add(1, std::memory_order_relaxed); }

// SIGALRM every `period` to the thread that made it (a per-thread POSIX timer: other threads,
// the servers below included, are left alone), through a handler without SA_RESTART.
class SignalStorm {
 public:
  explicit SignalStorm(std::chrono::nanoseconds period = 100us) {
    struct sigaction action {};
    action.sa_handler = count_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: blocking calls fail with EINTR
    ::sigaction(SIGALRM, &action, &previous_);
    sigevent event{};
    event.sigev_notify = SIGEV_THREAD_ID;
    event.sigev_signo = SIGALRM;
    event.sigev_notify_thread_id = ::gettid();
    armed_ = ::timer_create(CLOCK_MONOTONIC, &event, &timer_) == 0;
    itimerspec spec{};
    spec.it_interval.tv_nsec = static_cast<long>(period.count());
    spec.it_value = spec.it_interval;
    armed_ = armed_ && ::timer_settime(timer_, 0, &spec, nullptr) == 0;
  }
  ~SignalStorm() {
    // A signal the timer already queued is delivered even after timer_delete: block SIGALRM,
    // take what is pending, and only then put the previous handler back.
    sigset_t alarm;
    sigemptyset(&alarm);
    sigaddset(&alarm, SIGALRM);
    sigset_t old;
    ::pthread_sigmask(SIG_BLOCK, &alarm, &old);
    ::timer_delete(timer_);
    const timespec now{};
    while (::sigtimedwait(&alarm, nullptr, &now) == SIGALRM) {
    }
    ::sigaction(SIGALRM, &previous_, nullptr);
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  SignalStorm(const SignalStorm&) = delete;
  SignalStorm& operator=(const SignalStorm&) = delete;
  bool armed() const { return armed_; }

 private:
  struct sigaction previous_ {};
  timer_t timer_{};
  bool armed_ = false;
};

// A thread of its own (SIGALRM blocked) that runs `serve` on every connection `listener`
// accepts, one at a time, until destroyed.
class Server {
 public:
  Server(const LoopbackListener& listener, std::function<void(int)> serve)
      : thread_([this, fd = listener.fd, serve = std::move(serve)] {
          sigset_t alarm;
          sigemptyset(&alarm);
          sigaddset(&alarm, SIGALRM);
          ::pthread_sigmask(SIG_BLOCK, &alarm, nullptr);
          while (!stop_) {
            if (poll_until(fd, POLLIN, Clock::now() + 50ms) <= 0) continue;
            const int c =
                retry_on_signal([&] { return ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC); });
            if (c < 0) continue;
            serve(c);
            ::close(c);
          }
        }) {}
  ~Server() {
    stop_ = true;
    thread_.join();
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Runs `fire` on a thread of its own unless destroyed within `limit`.
class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds limit, std::function<void()> fire)
      : thread_([this, limit, fire = std::move(fire)] {
          std::unique_lock lock(mu_);
          if (!cv_.wait_for(lock, limit, [&] { return stopped_; })) fire();
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::thread thread_;
};

// Reads exactly `n` bytes within 5 s; false on close, error or timeout.
bool recv_exact(int fd, char* out, size_t n) {
  const auto deadline = Clock::now() + 5s;
  while (n > 0) {
    if (poll_until(fd, POLLIN, deadline) <= 0) return false;
    const ssize_t got = retry_on_signal([&] { return ::recv(fd, out, n, 0); });
    if (got <= 0) return false;
    out += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// Echoes 8 bytes.
void echo8(int fd) {
  char buf[8];
  if (recv_exact(fd, buf, sizeof(buf))) (void)send_all(fd, buf, sizeof(buf));
}

TEST(SignalStorm, ConnectSendAndReceiveSurviveASignalEvery100Microseconds) {
  LoopbackListener listener;
  Server server(listener, echo8);
  const long before = g_signals.load();
  SignalStorm storm;
  ASSERT_TRUE(storm.armed()) << std::strerror(errno);
  constexpr int kConnections = 1000;
  for (int i = 0; i < kConnections; ++i) {
    // The raw sockets of the tests and fuzz harnesses.
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    const int err = connect_until(fd, listener.addr(), sizeof(sockaddr_in), Clock::now() + 5s);
    ASSERT_EQ(err, 0) << "raw connection " << i << ": " << std::strerror(err);
    const char out[8] = {'r', 'a', 'w', char(i), char(i >> 8), 0, 1, 2};
    char in[8] = {};
    ASSERT_TRUE(send_all(fd, out, sizeof(out))) << i << ": " << std::strerror(errno);
    ASSERT_TRUE(recv_exact(fd, in, sizeof(in))) << i;
    ASSERT_EQ(std::memcmp(in, out, sizeof(out)), 0) << i;
    ::close(fd);
  }
  for (int i = 0; i < kConnections; ++i) {
    // The core's connections (RPC sessions, tracker clients).
    std::unique_ptr<Connection> conn;
    ASSERT_NO_THROW(conn = Connection::connect("127.0.0.1", listener.port(), 5s)) << i;
    conn->set_timeouts(5s, 5s);
    const char out[8] = {'c', 'o', 'r', 'e', char(i), char(i >> 8), 3, 4};
    char in[8] = {};
    ASSERT_NO_THROW(conn->write_all(out, sizeof(out))) << i;
    ASSERT_NO_THROW(conn->read_exact(in, sizeof(in), "the echo")) << i;
    ASSERT_EQ(std::memcmp(in, out, sizeof(out)), 0) << i;
  }
  // The storm really blew: a signal every 100 µs over the whole run (not a speed bound).
  EXPECT_GT(g_signals.load() - before, 100);
}

TEST(SignalStorm, AnInterruptedConnectIsWaitedForNotAbandoned) {
  // A listener whose accept queue is full drops new SYNs, so a connect blocks until the
  // client sends its SYN again (1 s later): long enough for the storm to interrupt it.
  LoopbackListener listener(0);
  std::vector<int> queued;  // connections the listener has not accepted
  bool full = false;
  for (int i = 0; i < 8 && !full; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int err = connect_until(fd, listener.addr(), sizeof(sockaddr_in), Clock::now() + 200ms);
    if (err == 0) {
      queued.push_back(fd);
      continue;
    }
    ASSERT_EQ(err, ETIMEDOUT) << std::strerror(err);
    full = true;  // that SYN was dropped
    ::close(fd);
  }
  if (!full) {
    for (const int fd : queued) ::close(fd);
    GTEST_SKIP() << "this kernel accepted 8 connections into a backlog of 0";
  }

  SignalStorm storm;
  ASSERT_TRUE(storm.armed()) << std::strerror(errno);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  // What the tracker fuzz harness did: a blocking connect, which a signal interrupts.
  errno = 0;
  ASSERT_NE(::connect(fd, listener.addr(), sizeof(sockaddr_in)), 0);
  ASSERT_EQ(errno, EINTR) << std::strerror(errno);
  // The connection goes on in the kernel. Once the server accepts what is queued, the SYN
  // sent again gets through, and connect_until sees that same connect complete.
  for (const int q : queued) ::close(q);
  Server server(listener, echo8);
  const int err = connect_until(fd, listener.addr(), sizeof(sockaddr_in), Clock::now() + 10s);
  ASSERT_EQ(err, 0) << std::strerror(err);
  const char out[8] = {'l', 'a', 't', 'e', 0, 1, 2, 3};
  char in[8] = {};
  ASSERT_TRUE(send_all(fd, out, sizeof(out))) << std::strerror(errno);
  ASSERT_TRUE(recv_exact(fd, in, sizeof(in)));
  EXPECT_EQ(std::memcmp(in, out, sizeof(out)), 0);
  ::close(fd);
}

TEST(SignalStorm, ReceiveTimeoutsStillPass) {
  // A peer that accepts and never answers: a receive limit of 300 ms must end the wait,
  // although every signal interrupts the receive (retrying with the whole limit again would
  // wait forever).
  LoopbackListener listener;
  Server server(listener, [](int c) { (void)poll_until(c, POLLIN, Clock::now() + 10s); });
  auto conn = Connection::connect("127.0.0.1", listener.port(), 5s);
  conn->set_timeouts(300ms, 300ms);
  // Without the bound this test would hang: after 5 s the connection is shut down, and the
  // receive fails as closed, not timed out.
  Watchdog watchdog(5s, [&] { conn->shutdown(); });
  SignalStorm storm;
  ASSERT_TRUE(storm.armed()) << std::strerror(errno);
  const auto start = Clock::now();
  char byte = 0;
  try {
    conn->read_exact(&byte, 1, "a reply");
    ADD_FAILURE() << "read a byte nobody sent";
  } catch (const ConnectionError& e) {
    EXPECT_TRUE(e.timed_out()) << e.what();
  }
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 4s);
}

TEST(SignalStorm, TrackerClientsConnectAndPing) {
  // The tracker fuzz harness's loop through the core's tracker client: connect, PING, close.
  TrackerOptions options;
  options.port = 0;
  Tracker tracker(options);
  SignalStorm storm;
  ASSERT_TRUE(storm.armed()) << std::strerror(errno);
  for (int i = 0; i < 200; ++i) {
    TrackerSession session = connect_tracker("127.0.0.1", tracker.port(), 5s);
    ASSERT_TRUE(session.ping()) << i;
  }
}

}  // namespace signal_test
}  // namespace kiln::rpc
