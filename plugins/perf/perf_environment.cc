// SPDX-License-Identifier: Apache-2.0
#include "perf_environment.h"

#include <cerrno>
#include <fstream>

#include "event_catalog.h"
#include "perf_counter.h"

namespace kiln::perf {

std::optional<int> read_perf_event_paranoid() {
  std::ifstream file("/proc/sys/kernel/perf_event_paranoid");
  int value = 0;
  if (!(file >> value)) return std::nullopt;
  return value;
}

bool hardware_pmu_missing() {
  const PerfEvent* cycles = find_event("cycles");
  if (cycles == nullptr) return false;
  PerfCounter probe;
  // User-only: the setting every process may use, so EACCES cannot mask the answer at
  // perf_event_paranoid 2.
  const int error = PerfCounter::open(*cycles, CountingScope::kUserOnly, &probe);
  return error == ENOENT || error == ENODEV;
}

}  // namespace kiln::perf
