// SPDX-License-Identifier: Apache-2.0
#include "event_catalog.h"

#include <linux/perf_event.h>

#include <array>

namespace kiln::perf {
namespace {

// Software events come first: they work without a hardware PMU (in VMs, containers), so the
// default selection always yields something.
constexpr std::array<PerfEvent, 10> kEvents = {{
    {"task-clock", "perf::task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, true, false},
    {"page-faults", "perf::page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, false,
     false},
    {"context-switches", "perf::context-switches", PERF_TYPE_SOFTWARE,
     PERF_COUNT_SW_CONTEXT_SWITCHES, false, true},
    {"cpu-migrations", "perf::cpu-migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS,
     false, true},
    {"cycles", "perf::cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, false, false},
    {"instructions", "perf::instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, false,
     false},
    {"cache-misses", "perf::cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, false,
     false},
    {"branch-misses", "perf::branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, false,
     false},
    {"stalled-cycles-frontend", "perf::stalled-cycles-frontend", PERF_TYPE_HARDWARE,
     PERF_COUNT_HW_STALLED_CYCLES_FRONTEND, false, false},
    {"stalled-cycles-backend", "perf::stalled-cycles-backend", PERF_TYPE_HARDWARE,
     PERF_COUNT_HW_STALLED_CYCLES_BACKEND, false, false},
}};

}  // namespace

std::span<const PerfEvent> known_events() { return kEvents; }

const PerfEvent* find_event(std::string_view name) {
  for (const PerfEvent& event : kEvents) {
    if (name == event.name) return &event;
  }
  return nullptr;
}

std::string known_event_names() {
  std::string names;
  for (const PerfEvent& event : kEvents) {
    if (!names.empty()) names += ", ";
    names += event.name;
  }
  return names;
}

}  // namespace kiln::perf
