// SPDX-License-Identifier: Apache-2.0
// One perf_event_open(2) counter of the calling thread and the threads it creates.
#ifndef KILN_PLUGINS_PERF_PERF_COUNTER_H_
#define KILN_PLUGINS_PERF_PERF_COUNTER_H_

#include <cstdint>

#include "event_catalog.h"

namespace kiln::perf {

// A counter's cumulative state at one moment, as read(2) returns it with
// PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING. The times (nanoseconds)
// differ when the kernel multiplexed the counter: it then counted only `time_running` of the
// `time_enabled` nanoseconds.
struct CounterReading {
  uint64_t value = 0;
  uint64_t time_enabled = 0;
  uint64_t time_running = 0;
};

// Which privilege levels a counter observes.
enum class CountingScope {
  kUserAndKernel,  // everything; refused (EACCES) to unprivileged processes at paranoid >= 2
  kUserOnly,       // exclude_kernel and exclude_hv set: what perf_event_paranoid 2 allows
};

// An open, enabled counter: owns its file descriptor and closes it on destruction. Move-only.
class PerfCounter {
 public:
  // A counter that is not open.
  PerfCounter() = default;
  PerfCounter(PerfCounter&& other) noexcept;
  PerfCounter& operator=(PerfCounter&& other) noexcept;
  PerfCounter(const PerfCounter&) = delete;
  PerfCounter& operator=(const PerfCounter&) = delete;
  ~PerfCounter();

  // Opens `event` (static storage, see known_events()) for the calling thread on any CPU
  // (pid 0, cpu -1) with inherit set, so that threads it creates from now on count too (their
  // counts are summed into every read), and enabled at once: the counter runs from here on
  // and reads never stop it, which lets nested measurements share it. `scope` selects
  // exclude_kernel/exclude_hv. Returns 0 and stores the counter in `*counter`, or returns the
  // errno of perf_event_open(2) (ENOENT, EOPNOTSUPP, EACCES, ...) and leaves `*counter` as is.
  static int open(const PerfEvent& event, CountingScope scope, PerfCounter* counter);

  // Whether this object holds an open counter.
  bool is_open() const { return fd_ >= 0; }

  // Reads the counter. Each counter is read on its own: inherit forbids PERF_FORMAT_GROUP.
  // Throws kiln::sdk::Error(KILN_ERROR_RUNTIME) naming `event_name` (borrowed) and the errno
  // when the read fails or is short.
  CounterReading read(const char* event_name) const;

 private:
  explicit PerfCounter(int fd) : fd_(fd) {}
  // Closes the descriptor, if any.
  void close();

  int fd_ = -1;
};

}  // namespace kiln::perf

#endif  // KILN_PLUGINS_PERF_PERF_COUNTER_H_
