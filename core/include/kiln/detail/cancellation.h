// Cooperative cancellation of long-running work on a thread (issue 27, item 4): whoever runs the
// work (an RPC session serving a call) installs a flag for this thread; long loops in the core
// (the time evaluator) poll it and end early with CancelledError. Work run outside such a scope
// never sees a cancellation. The core's evaluator depends on this, not on the RPC code.
// Not installed (kiln/detail/, docs/architecture.md "The public surface"): libkiln implements it
// for its own RPC server and the tests; no API or ABI promise.
#ifndef KILN_DETAIL_CANCELLATION_H_
#define KILN_DETAIL_CANCELLATION_H_

#include <atomic>
#include <chrono>
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
// as soon as cancellation is requested (true when the whole duration passed). Without a flag it
// is one plain sleep.
bool sleep_unless_cancelled(std::chrono::nanoseconds duration);

}  // namespace kiln::detail

#endif  // KILN_DETAIL_CANCELLATION_H_
