// SPDX-License-Identifier: Apache-2.0
// kiln/detail/cancellation.h.
#include "kiln/detail/cancellation.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

namespace kiln::detail {

namespace {

// How often a cancellable sleep looks at the flag: a cancelled sleep ends within this.
constexpr auto kSleepStep = std::chrono::milliseconds(20);

thread_local const std::atomic<bool>* t_flag = nullptr;
thread_local InterruptScope* t_interrupts = nullptr;

// The shortest time between two runs of the poll: a wait polls every kInterruptPollPeriod, a
// loop (the evaluator's batches) may ask far more often.
constexpr auto kMinPollInterval = kInterruptPollPeriod / 5;

}  // namespace

CancellationScope::CancellationScope(const std::atomic<bool>& flag) noexcept : previous_(t_flag) {
  t_flag = &flag;
}

CancellationScope::~CancellationScope() { t_flag = previous_; }

bool cancellation_requested() noexcept {
  return t_flag != nullptr && t_flag->load(std::memory_order_relaxed);
}

void throw_if_cancelled(const char* what) {
  if (cancellation_requested()) {
    throw CancelledError(
        fmt::format("{} was cancelled (its RPC session ended: the session timeout passed, the "
                    "client hung up or the server is stopping)",
                    what));
  }
}

bool sleep_unless_cancelled(std::chrono::nanoseconds duration) {
  if (t_flag == nullptr && t_interrupts == nullptr) {
    std::this_thread::sleep_for(duration);
    return true;
  }
  const auto end = std::chrono::steady_clock::now() + duration;
  while (!cancellation_requested()) {
    poll_interrupt();
    const auto now = std::chrono::steady_clock::now();
    if (now >= end) return true;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(end - now, kSleepStep));
  }
  return false;
}

InterruptedError::~InterruptedError() = default;

InterruptScope*& InterruptScope::interrupt_scope_slot() noexcept { return t_interrupts; }

bool interrupt_poll_installed() noexcept { return t_interrupts != nullptr; }

void poll_interrupt() {
  InterruptScope* scope = t_interrupts;
  if (scope == nullptr) return;
  if (scope->interrupted_) std::rethrow_exception(scope->interrupted_);
  const auto now = std::chrono::steady_clock::now();
  if (now - scope->last_poll_ < kMinPollInterval) return;
  scope->last_poll_ = now;
  try {
    scope->poll_(scope->context_);
  } catch (const InterruptedError&) {
    scope->interrupted_ = std::current_exception();
    throw;
  }
}

}  // namespace kiln::detail
