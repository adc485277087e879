// SPDX-License-Identifier: Apache-2.0
// The counters one collector state reads: the selected events that this machine can count.
#ifndef KILN_PLUGINS_PERF_COUNTER_SET_H_
#define KILN_PLUGINS_PERF_COUNTER_SET_H_

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "event_catalog.h"
#include "perf_counter.h"

namespace kiln::perf {

// A selected event that cannot be counted, with the warning that says why.
struct UnavailableEvent {
  const PerfEvent* event;  // static storage
  std::string message;     // "event 'cycles' unavailable: ...; perf_event_paranoid=2"
};

// Open counters, one per countable event, enabled since open() and running until this object
// is destroyed (which closes them). Reads do not disturb them, so any number of overlapping
// start/stop pairs can share one set. Move-only.
class CounterSet {
 public:
  // A set that counts nothing (no cpu device to profile).
  CounterSet() = default;

  // Opens `events` (static storage) for the calling thread and the threads it creates
  // afterwards, counting user and kernel mode where the kernel allows it and else (EACCES or
  // EPERM, i.e. perf_event_paranoid >= 2 without CAP_PERFMON) user space only. Events that
  // cannot be counted are left out and appended to `*unavailable` with the reason, never
  // counted as 0; this includes kernel-only events (context switches, migrations) when only
  // user space may be counted. Throws only std::bad_alloc.
  static CounterSet open(std::span<const PerfEvent* const> events,
                         std::vector<UnavailableEvent>* unavailable);

  // Whether no event is counted.
  bool empty() const { return counters_.empty(); }
  // The number of counted events.
  std::size_t size() const { return counters_.size(); }
  // The event of counter `i` (< size()).
  const PerfEvent& event(std::size_t i) const { return *counters_[i].event; }

  // Reads every counter, in order. Throws kiln::sdk::Error(KILN_ERROR_RUNTIME) when a read
  // fails.
  std::vector<CounterReading> read_all() const;

  // "task-clock, page-faults (user and kernel)": the counted events and their scopes, for the
  // debug log.
  std::string describe() const;

 private:
  // One open counter and what it counts.
  struct Entry {
    const PerfEvent* event;
    PerfCounter counter;
    CountingScope scope;
  };
  std::vector<Entry> counters_;
};

}  // namespace kiln::perf

#endif  // KILN_PLUGINS_PERF_COUNTER_SET_H_
