// SPDX-License-Identifier: Apache-2.0
// What the kernel allows and offers for perf counting: the perf_event_paranoid setting and
// whether a hardware PMU is exposed. Used to explain why an event cannot be counted.
#ifndef KILN_PLUGINS_PERF_PERF_ENVIRONMENT_H_
#define KILN_PLUGINS_PERF_PERF_ENVIRONMENT_H_

#include <optional>

namespace kiln::perf {

// The value of /proc/sys/kernel/perf_event_paranoid (-1 .. 4 in practice; 2 on most
// distributions: unprivileged processes may count user space only), or nullopt when the file
// is missing or unreadable. Never throws.
std::optional<int> read_perf_event_paranoid();

// Whether the kernel has no hardware PMU for this process: opening the generic `cycles`
// event, which every PMU supports, fails with ENOENT or ENODEV. True in most VMs. Costs one
// perf_event_open(2) and close(2); never throws.
bool hardware_pmu_missing();

}  // namespace kiln::perf

#endif  // KILN_PLUGINS_PERF_PERF_ENVIRONMENT_H_
