// SPDX-License-Identifier: Apache-2.0
// The warnings that explain why an event is left out of the metrics.
#ifndef KILN_PLUGINS_PERF_OPEN_ERROR_H_
#define KILN_PLUGINS_PERF_OPEN_ERROR_H_

#include <optional>
#include <string>

#include "event_catalog.h"

namespace kiln::perf {

// The message for `event`, whose perf_event_open(2) failed with `error` (an errno), e.g.
// "event 'cycles' unavailable: no hardware PMU exposed (ENOENT); perf_event_paranoid=2".
// `paranoid` is read_perf_event_paranoid() (nullopt: unknown); `pmu_missing` is
// hardware_pmu_missing(), which decides whether ENOENT for a hardware event means "no PMU at
// all" or "this PMU does not count it". Adds a hint where one helps (lowering
// perf_event_paranoid, seccomp in containers).
std::string open_error_message(const PerfEvent& event, int error, std::optional<int> paranoid,
                               bool pmu_missing);

// The message for a kernel_only `event` whose user-and-kernel open failed with `error` (EACCES
// or EPERM) and which could be opened only in user-only scope, where it would always read 0.
std::string kernel_only_message(const PerfEvent& event, int error, std::optional<int> paranoid);

// The symbolic name of an errno value ("ENOENT"), or "errno <n>" for one not listed.
std::string errno_name(int error);

}  // namespace kiln::perf

#endif  // KILN_PLUGINS_PERF_OPEN_ERROR_H_
