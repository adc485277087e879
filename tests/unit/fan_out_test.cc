// SPDX-License-Identifier: Apache-2.0
// kiln/rpc/fan_out.h: the one fan-out with retry behind `kiln run --jobs` and Python's run_many,
// and its typed "server lost" (rpc::ServerLostError): what is tried again, how often, what is
// recorded, and how an interrupt or a throwing piece of work ends the fan-out.
#include "kiln/rpc/fan_out.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kiln/detail/cancellation.h"
#include "kiln/error.h"
#include "kiln/rpc/rpc_error.h"

namespace kiln::rpc {
namespace fan_out_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

TEST(ServerLostError, IsAnRpcErrorAndKeepsItsTypeAcrossTheErrorCodes) {
  const ServerLostError lost("lost the connection to the RPC server 10.0.0.1:9090 during call");
  const RPCError& as_rpc = lost;
  EXPECT_EQ(as_rpc.remote_code(), 0);
  EXPECT_EQ(lost.code(), kErrorCodeRpcServerLost);
  EXPECT_EQ(std::string(lost.what()), std::string(kRpcErrorPrefix) + lost.remote_message());
  // Across a packed-function boundary only the code and what() travel (kiln/error.h).
  try {
    throw_error(lost.code(), lost.what());
  } catch (const ServerLostError& e) {
    EXPECT_STREQ(e.what(), lost.what()) << "the prefix is not doubled";
    EXPECT_EQ(e.remote_message(), lost.remote_message());
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "came back as another type: " << e.what();
  }
}

TEST(AttemptWithRetries, ALostServerIsTriedAgainAndRecorded) {
  int calls = 0;
  std::vector<int> retries;
  const Attempts a = attempt_with_retries(
      [&] {
        if (++calls == 1) throw ServerLostError("lost the first server");
      },
      2,
      [&](const ServerLostError& e, int next) {
        EXPECT_THAT(e.what(), HasSubstr("lost the first server"));
        retries.push_back(next);
      });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(a.count, 2);
  EXPECT_FALSE(a.error);
  EXPECT_FALSE(a.gave_up);
  ASSERT_EQ(a.lost.size(), 1u);
  EXPECT_THAT(a.lost[0], HasSubstr("lost the first server"));
  EXPECT_THAT(retries, ElementsAre(2));
}

TEST(AttemptWithRetries, GivesUpAfterMaxRetriesWithTheLastLossAsItsError) {
  int calls = 0;
  const Attempts a = attempt_with_retries(
      [&] { throw ServerLostError("lost number " + std::to_string(++calls)); }, 1);
  EXPECT_EQ(calls, 2) << "1 attempt + max_retries 1";
  EXPECT_EQ(a.count, 2);
  EXPECT_TRUE(a.gave_up);
  EXPECT_EQ(a.lost.size(), 2u);
  ASSERT_TRUE(a.error);
  try {
    std::rethrow_exception(a.error);
  } catch (const ServerLostError& e) {
    EXPECT_THAT(e.what(), HasSubstr("lost number 2"));
  }
}

TEST(AttemptWithRetries, OtherErrorsAreTheWorksOwnAndNeverRetried) {
  // A server's own error (an RPCError with a remote code), a session timeout and a plain
  // error: one attempt each.
  const std::vector<std::function<void()>> failures = {
      [] { throw RPCError("the kernel failed", 5); },
      [] { throw RPCSessionTimeoutError("the session timed out"); },
      [] { throw RPCError("a malformed reply", 0); },
      [] { throw std::runtime_error("not even a kiln error"); },
  };
  for (const auto& failure : failures) {
    int calls = 0;
    const Attempts a = attempt_with_retries(
        [&] {
          ++calls;
          failure();
        },
        3);
    EXPECT_EQ(calls, 1);
    EXPECT_TRUE(a.error);
    EXPECT_FALSE(a.gave_up);
    EXPECT_TRUE(a.lost.empty());
  }
  EXPECT_THROW(attempt_with_retries([] {}, -1), ValueError);
}

TEST(AttemptWithRetries, AnInterruptEndsTheWholeWork) {
  EXPECT_THROW(attempt_with_retries([] { throw kiln::detail::InterruptedError("Ctrl-C"); }, 3),
               kiln::detail::InterruptedError);
}

TEST(FanOut, RunsEachPieceOnceAtMostJobsAtATime) {
  constexpr size_t kCount = 12;
  std::mutex mu;
  std::multiset<size_t> ran;
  std::atomic<int> in_flight{0};
  std::atomic<int> most{0};
  fan_out(kCount, 3, [&](size_t i) {
    const int now = ++in_flight;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(5ms);
    --in_flight;
    std::lock_guard lock(mu);
    ran.insert(i);
  });
  ASSERT_EQ(ran.size(), kCount);
  for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(ran.count(i), 1u) << i;
  EXPECT_LE(most.load(), 3);
  EXPECT_GE(most.load(), 1);
  fan_out(0, 1, [](size_t) { FAIL() << "nothing to run"; });
  EXPECT_THROW(fan_out(1, 0, [](size_t) {}), ValueError);
}

TEST(FanOut, WorkThatThrowsStopsWhatHasNotStartedAndIsRethrown) {
  std::atomic<int> started{0};
  EXPECT_THROW(fan_out(5, 1,
                       [&](size_t) {
                         ++started;
                         throw std::logic_error("the work's own bug");
                       }),
               std::logic_error);
  EXPECT_EQ(started.load(), 1) << "one thread: nothing starts after the first throws";
}

void interrupt_at_once(void*) { throw kiln::detail::InterruptedError("interrupted (test)"); }

TEST(FanOut, AnInterruptOfTheCallerLetsTheRunningWorkFinishAndStartsNoMore) {
  std::atomic<int> started{0};
  std::atomic<int> finished{0};
  kiln::detail::InterruptScope scope(&interrupt_at_once, nullptr);
  EXPECT_THROW(fan_out(20, 2,
                       [&](size_t) {
                         ++started;
                         std::this_thread::sleep_for(100ms);
                         ++finished;
                       }),
               kiln::detail::InterruptedError);
  EXPECT_EQ(started.load(), finished.load()) << "the running ones finished before the throw";
  EXPECT_LT(started.load(), 20);
}

}  // namespace fan_out_test
}  // namespace kiln::rpc
