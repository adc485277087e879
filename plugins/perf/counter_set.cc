// SPDX-License-Identifier: Apache-2.0
#include "counter_set.h"

#include <linux/perf_event.h>

#include <cerrno>
#include <optional>
#include <utility>

#include "open_error.h"
#include "perf_environment.h"

namespace kiln::perf {

CounterSet CounterSet::open(std::span<const PerfEvent* const> events,
                            std::vector<UnavailableEvent>* unavailable) {
  CounterSet set;
  const std::optional<int> paranoid = read_perf_event_paranoid();
  // Probed only when a hardware event fails with ENOENT, to tell "no PMU" from "this PMU
  // lacks the event" in the warning.
  std::optional<bool> pmu_missing;
  for (const PerfEvent* event : events) {
    PerfCounter counter;
    CountingScope scope = CountingScope::kUserAndKernel;
    // Kernel-mode counts are wanted where allowed (root, CAP_PERFMON, paranoid <= 1): they
    // are what `perf stat` shows and the only way to see context switches.
    int error = PerfCounter::open(*event, scope, &counter);
    if (error == EACCES || error == EPERM) {
      const int full_error = error;
      scope = CountingScope::kUserOnly;
      error = PerfCounter::open(*event, scope, &counter);
      if (error == 0 && event->kernel_only) {
        unavailable->push_back({event, kernel_only_message(*event, full_error, paranoid)});
        continue;  // `counter` closes here
      }
    }
    if (error != 0) {
      if (event->type == PERF_TYPE_HARDWARE && (error == ENOENT || error == ENODEV) &&
          !pmu_missing) {
        pmu_missing = hardware_pmu_missing();
      }
      unavailable->push_back(
          {event, open_error_message(*event, error, paranoid, pmu_missing.value_or(false))});
      continue;
    }
    set.counters_.push_back(Entry{event, std::move(counter), scope});
  }
  return set;
}

std::vector<CounterReading> CounterSet::read_all() const {
  std::vector<CounterReading> readings;
  readings.reserve(counters_.size());
  for (const Entry& entry : counters_) readings.push_back(entry.counter.read(entry.event->name));
  return readings;
}

std::string CounterSet::describe() const {
  // The scope is said once when all counters share it, else per counter.
  bool mixed = false;
  for (const Entry& entry : counters_) mixed |= entry.scope != counters_.front().scope;
  const auto scope_text = [](CountingScope scope) {
    return scope == CountingScope::kUserOnly ? " (user space only)" : " (user and kernel)";
  };
  std::string text;
  for (const Entry& entry : counters_) {
    if (!text.empty()) text += ", ";
    text += entry.event->name;
    if (mixed) text += scope_text(entry.scope);
  }
  if (!mixed && !counters_.empty()) text += scope_text(counters_.front().scope);
  return text;
}

}  // namespace kiln::perf
