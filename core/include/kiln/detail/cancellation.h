// SPDX-License-Identifier: Apache-2.0
// Cooperative cancellation of long-running work on a thread (issue 27, item 4): whoever runs the
// work (an RPC session serving a call) installs a flag for this thread; long loops in the core
// (the time evaluator) poll it and end early with CancelledError. Work run outside such a scope
// never sees a cancellation. The core's evaluator depends on this, not on the RPC code.
// Interrupts (issue 30, item 2) are the caller's side of the same idea: an interactive caller
// (the Python extension, for Ctrl-C) installs a poll that the thread's waits run every
// kInterruptPollPeriod at most and that throws InterruptedError to end the work.
// Not installed (kiln/detail/, docs/architecture.md "The public surface"): libkiln implements it
// for its own RPC server, the in-tree Python extension and the tests; no API or ABI promise.
#ifndef KILN_DETAIL_CANCELLATION_H_
#define KILN_DETAIL_CANCELLATION_H_

#include <atomic>
#include <chrono>
#include <exception>
#include <string>

#include "kiln/error.h"

namespace kiln::detail {

// The work running on this thread was cancelled (its RPC session ended: a timeout, a client
// that hung up, a server that stops). A RuntimeError, so that it crosses the ABI as one.
class CancelledError : public RuntimeError {
 public:
  explicit CancelledError(const std::string& message) : RuntimeError(message) {}
};

// Makes `flag` this thread's cancellation flag for the scope's lifetime (scopes nest: the
// previous flag comes back at the end). `flag` is not owned and must outlive the scope; another
// thread sets it to cancel. Not copyable or movable: it belongs to the thread that made it.
class CancellationScope {
 public:
  explicit CancellationScope(const std::atomic<bool>& flag) noexcept;
  ~CancellationScope();
  CancellationScope(const CancellationScope&) = delete;
  CancellationScope& operator=(const CancellationScope&) = delete;

 private:
  const std::atomic<bool>* previous_;
};

// Whether the flag installed on this thread is set; false when none is installed.
bool cancellation_requested() noexcept;

// Throws CancelledError "<what> was cancelled (...)" when cancellation_requested().
void throw_if_cancelled(const char* what);

// Sleeps `duration`, waking every few tens of milliseconds to look at the flag: returns false
// as soon as cancellation is requested (true when the whole duration passed). With an interrupt
// poll installed it runs the poll meanwhile, and throws what the poll throws. Without a flag
// or a poll it is one plain sleep.
bool sleep_unless_cancelled(std::chrono::nanoseconds duration);

// ---- Interrupts ------------------------------------------------------------------------------

// The caller interrupted the work on this thread (Ctrl-C in Python): thrown by an interrupt
// poll. A RuntimeError, so that it crosses the ABI as one (the poll's owner recognises it by its
// message there). Its key function is in libkiln, so every module catches the same type.
class InterruptedError : public RuntimeError {
 public:
  explicit InterruptedError(const std::string& message) : RuntimeError(message) {}
  ~InterruptedError() override;
};

// The longest a wait runs between two polls: an interrupt ends a wait within this, plus the
// time the poll takes.
inline constexpr std::chrono::milliseconds kInterruptPollPeriod{50};

// Installs `poll(context)` as this thread's interrupt poll for the scope's lifetime (scopes
// nest: the previous one comes back at the end). Every wait in the core that can last longer
// than kInterruptPollPeriod (connecting, tracker requests, RPC replies and sends, the time
// evaluator's batches and cooldowns, retry sleeps) then waits in slices of at most that and
// runs poll_interrupt() between them. The poll runs on this thread, never concurrently with
// itself; it returns to let the wait go on or throws InterruptedError to end the work, which
// unwinds through the core's cleanup like any error (sessions closed, temporary directories
// removed). Once it has thrown, the scope is interrupted for good: every later poll_interrupt()
// in it throws the same exception again at once, so a retry loop that caught the first one
// cannot wait again. `context` is not owned and must outlive the scope. Not copyable or movable.
class InterruptScope {
 public:
  using Poll = void (*)(void* context);
  // Inline, with one call into libkiln: Python installs one around every call it makes.
  InterruptScope(Poll poll, void* context) noexcept
      : poll_(poll), context_(context), slot_(&interrupt_scope_slot()), previous_(*slot_) {
    *slot_ = this;
  }
  ~InterruptScope() { *slot_ = previous_; }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

  // Whether a poll threw InterruptedError in this scope (whether or not the work passed the
  // exception on: the caller delivers the interrupt either way).
  bool interrupted() const noexcept { return static_cast<bool>(interrupted_); }

 private:
  friend void poll_interrupt();
  // This thread's current scope (its address is stable while the thread lives).
  static InterruptScope*& interrupt_scope_slot() noexcept;
  Poll poll_;
  void* context_;
  InterruptScope** slot_;
  InterruptScope* previous_;
  std::exception_ptr interrupted_;                     // what the poll threw, once it has
  std::chrono::steady_clock::time_point last_poll_{};  // rate limit (poll_interrupt)
};

// Whether an interrupt poll is installed on this thread: waits then slice themselves.
bool interrupt_poll_installed() noexcept;

// Runs this thread's interrupt poll (nothing when none is installed), at most once per
// kInterruptPollPeriod / 5 (calls in between return at once, so a loop may call it often).
// Throws InterruptedError when the poll does, or at once when the scope was interrupted before.
void poll_interrupt();

}  // namespace kiln::detail

#endif  // KILN_DETAIL_CANCELLATION_H_
