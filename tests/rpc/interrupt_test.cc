// SPDX-License-Identifier: Apache-2.0
// Issue 30 item 2: waits that an interrupt poll ends (kiln/detail/cancellation.h, installed by the
// Python extension for Ctrl-C). A poll that throws InterruptedError once a flag is set must end
// a connect that never completes, a read from a silent peer, a send to a peer that reads
// nothing, an unbounded tracker request and a retry sleep, well before their own time limits;
// once interrupted, a scope stays interrupted. Bounds here are liveness guards (the waits'
// own limits are a minute or unbounded), not speed requirements.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "kiln/detail/cancellation.h"
#include "kiln/rpc/tracker.h"
#include "rpc/connection.h"
#include "rpc_test_util.h"

namespace kiln::rpc {
namespace {

using test::LoopbackListener;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using kiln::detail::InterruptedError;
using kiln::detail::InterruptScope;

// How long an interrupted wait may take, at most, after the flag is set (the poll runs every
// kInterruptPollPeriod; the rest is slack for a loaded machine).
constexpr auto kLiveness = 5s;

// An interrupt poll for this thread that throws once `interrupt` is set (by another thread, as
// a SIGINT would), counting its runs.
struct Interrupter {
  std::atomic<bool> interrupt{false};
  std::atomic<int> polls{0};
  InterruptScope scope{&poll, this};

  static void poll(void* self) {
    auto* me = static_cast<Interrupter*>(self);
    me->polls.fetch_add(1);
    if (me->interrupt.load()) throw InterruptedError("interrupted by the test");
  }
  // Sets the flag after `delay`, from a thread of its own.
  std::thread interrupt_after(std::chrono::milliseconds delay) {
    return std::thread([this, delay] {
      std::this_thread::sleep_for(delay);
      interrupt = true;
    });
  }
};

// Descriptors open in this process.
int open_descriptors() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

// Expects `wait` to throw InterruptedError within kLiveness of the flag, set after 200 ms.
template <typename Wait>
void expect_interrupted(Wait wait) {
  Interrupter interrupter;
  std::thread setter = interrupter.interrupt_after(200ms);
  const auto start = Clock::now();
  EXPECT_THROW(wait(), InterruptedError);
  const auto took = Clock::now() - start;
  setter.join();
  EXPECT_LT(took, 200ms + kLiveness);
  EXPECT_GT(interrupter.polls.load(), 1);  // it polled while it waited
}

TEST(Interrupt, WithoutAScopeNothingPolls) {
  EXPECT_FALSE(kiln::detail::interrupt_poll_installed());
  kiln::detail::poll_interrupt();  // no poll: returns
  EXPECT_TRUE(kiln::detail::sleep_unless_cancelled(1ms));
}

TEST(Interrupt, AnInterruptedScopeStaysInterruptedAndScopesNest) {
  Interrupter outer;
  {
    Interrupter inner;
    EXPECT_TRUE(kiln::detail::interrupt_poll_installed());
    inner.interrupt = true;
    EXPECT_THROW(kiln::detail::poll_interrupt(), InterruptedError);
    EXPECT_TRUE(inner.scope.interrupted());
    const int polls = inner.polls.load();
    inner.interrupt = false;
    // A retry after the first interrupt is interrupted at once, without asking the poll.
    EXPECT_THROW(kiln::detail::poll_interrupt(), InterruptedError);
    EXPECT_EQ(inner.polls.load(), polls);
  }
  // The outer scope is back, not interrupted.
  EXPECT_NO_THROW(kiln::detail::poll_interrupt());
  EXPECT_FALSE(outer.scope.interrupted());
  EXPECT_EQ(outer.polls.load(), 1);
}

TEST(Interrupt, EndsASleep) {
  expect_interrupted([] { kiln::detail::sleep_unless_cancelled(60s); });
}

TEST(Interrupt, EndsAConnectThatNeverCompletes) {
  // A listen queue filled up: later SYNs are dropped, so connect() waits.
  LoopbackListener listener(0);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(listener.port()));
    (void)::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    fillers.push_back(fd);
  }
  std::this_thread::sleep_for(100ms);
  const int before = open_descriptors();
  expect_interrupted([&] { Connection::connect("127.0.0.1", listener.port(), 60s); });
  EXPECT_EQ(open_descriptors(), before);  // the socket of the attempt is closed
  for (int fd : fillers) ::close(fd);
}

TEST(Interrupt, EndsAReadFromASilentPeer) {
  LoopbackListener listener(8);
  auto conn = Connection::connect("127.0.0.1", listener.port(), 10s);
  conn->set_timeouts(0ms, 0ms);  // no limit of its own
  char byte = 0;
  expect_interrupted([&] { conn->read_exact(&byte, 1, "a byte"); });
}

TEST(Interrupt, EndsASendToAPeerThatReadsNothing) {
  LoopbackListener listener(8);
  auto conn = Connection::connect("127.0.0.1", listener.port(), 10s);
  conn->set_timeouts(0ms, 0ms);
  const std::vector<char> data(64 << 20);  // far more than the socket buffers take
  expect_interrupted([&] { conn->write_all(data.data(), data.size()); });
}

TEST(Interrupt, EndsAnUnboundedTrackerRequestAndWithdrawsIt) {
  TrackerOptions options;
  options.port = 0;
  Tracker tracker(options);
  TrackerSession session = connect_tracker("127.0.0.1", tracker.port(), 5s);
  expect_interrupted([&] { session.request_server("no-such-key", 1, std::nullopt); });
  // The connection went with the request: the tracker forgets it.
  TrackerSession observer = connect_tracker("127.0.0.1", tracker.port(), 5s);
  EXPECT_TRUE(test::wait_until(
      [&] {
        for (const TrackerQueue& q : observer.summary().queues) {
          if (q.key == "no-such-key" && q.pending > 0) return false;
        }
        return true;
      },
      10s));
  // And the session asks again on a new connection.
  EXPECT_THROW(session.request_server("no-such-key", 1, 100ms), NotFoundError);
}

}  // namespace
}  // namespace kiln::rpc
