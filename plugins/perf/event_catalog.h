// SPDX-License-Identifier: Apache-2.0
// The perf events the plugin knows: their option names, metric names and perf_event_open(2)
// type and config.
#ifndef KILN_PLUGINS_PERF_EVENT_CATALOG_H_
#define KILN_PLUGINS_PERF_EVENT_CATALOG_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::perf {

// One countable event. Instances live in static storage (known_events()), so pointers to them
// and their strings stay valid for the life of the plugin image.
struct PerfEvent {
  const char* name;    // the option name, as `perf stat -e` spells it ("task-clock")
  const char* metric;  // the metric name reported to the host ("perf::task-clock")
  uint32_t type;       // perf_event_attr.type: PERF_TYPE_SOFTWARE or PERF_TYPE_HARDWARE
  uint64_t config;     // perf_event_attr.config: PERF_COUNT_SW_* or PERF_COUNT_HW_*
  // Counts nanoseconds (task-clock): reported as a duration in microseconds, not a count.
  bool is_time;
  // Only ever happens in kernel mode (context switches, migrations): counted with
  // exclude_kernel set it always reads 0, so it is unavailable rather than reported as 0.
  bool kernel_only;
};

// Every known event, in the order of the default selection and of the reported metrics:
// task-clock, page-faults, context-switches, cpu-migrations, cycles, instructions,
// cache-misses, branch-misses, stalled-cycles-frontend, stalled-cycles-backend.
std::span<const PerfEvent> known_events();

// The event named `name` (exact, case-sensitive), or NULL when there is none.
const PerfEvent* find_event(std::string_view name);

// The known event names joined by ", ", for error messages.
std::string known_event_names();

}  // namespace kiln::perf

#endif  // KILN_PLUGINS_PERF_EVENT_CATALOG_H_
