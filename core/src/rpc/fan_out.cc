// SPDX-License-Identifier: Apache-2.0
// kiln/rpc/fan_out.h: work over a farm of servers, `jobs` at once, each piece tried again on
// another server when its server is lost (rpc::ServerLostError).
#include "kiln/rpc/fan_out.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "kiln/detail/cancellation.h"
#include "kiln/error.h"

namespace kiln::rpc {

Attempts attempt_with_retries(const std::function<void()>& attempt, int max_retries,
                              const OnServerLost& on_lost) {
  if (max_retries < 0) {
    throw ValueError(fmt::format("max_retries must be >= 0, got {}", max_retries));
  }
  Attempts result;
  while (true) {
    ++result.count;
    try {
      attempt();
      result.error = nullptr;
      return result;
    } catch (const kiln::detail::InterruptedError&) {
      throw;  // Ctrl-C: the caller's whole work ends, not this attempt alone
    } catch (const ServerLostError& e) {
      result.lost.emplace_back(e.what());
      result.error = std::current_exception();
      if (result.count > max_retries) {
        result.gave_up = true;
        return result;
      }
      if (on_lost) on_lost(e, result.count + 1);
    } catch (...) {
      result.error = std::current_exception();
      return result;
    }
  }
}

void fan_out(size_t count, int jobs, const std::function<void(size_t i)>& work) {
  if (jobs < 1) throw ValueError(fmt::format("jobs must be >= 1, got {}", jobs));
  if (count == 0) return;
  std::mutex mu;
  std::condition_variable finished;
  size_t next = 0;     // the next i to start
  bool stop = false;   // no further i starts (an interrupt, or work that threw)
  size_t running = 0;  // threads not yet done
  std::exception_ptr first_error;
  const auto run = [&] {
    while (true) {
      size_t i = 0;
      {
        std::lock_guard lock(mu);
        if (stop || next >= count) break;
        i = next++;
      }
      try {
        work(i);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first_error) first_error = std::current_exception();
        stop = true;
      }
    }
    std::lock_guard lock(mu);
    --running;
    finished.notify_all();
  };
  const size_t threads_wanted = std::min<size_t>(static_cast<size_t>(jobs), count);
  std::vector<std::thread> threads;
  threads.reserve(threads_wanted);
  running = threads_wanted;
  for (size_t t = 0; t < threads_wanted; ++t) threads.emplace_back(run);
  // Waits for the threads, polling the caller's interrupt (Ctrl-C in Python) meanwhile.
  std::exception_ptr interrupted;
  {
    std::unique_lock lock(mu);
    while (running > 0) {
      finished.wait_for(lock, kiln::detail::kInterruptPollPeriod);
      if (interrupted || running == 0) continue;
      lock.unlock();
      try {
        kiln::detail::poll_interrupt();
      } catch (...) {
        interrupted = std::current_exception();
      }
      lock.lock();
      if (interrupted) stop = true;  // the work not yet started never starts
    }
  }
  for (std::thread& t : threads) t.join();
  if (interrupted) std::rethrow_exception(interrupted);
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace kiln::rpc
