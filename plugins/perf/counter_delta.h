// SPDX-License-Identifier: Apache-2.0
// The count between two readings of one counter, scaled for multiplexing.
#ifndef KILN_PLUGINS_PERF_COUNTER_DELTA_H_
#define KILN_PLUGINS_PERF_COUNTER_DELTA_H_

#include <cstdint>
#include <optional>

#include "perf_counter.h"

namespace kiln::perf {

// The events counted between `start` and `end` (two readings of the same counter), or nullopt
// when `end` is below `start` or the result does not fit in int64: a counter overflow, which
// the caller reports as -1 (SPEC.md §3.7).
//
// When the kernel multiplexed the counter (it ran for less time than it was enabled), the raw
// delta is scaled by enabled/running over the interval, as `perf stat` does. If the counter
// did not run at all during the interval, the difference of the two cumulative estimates
// (value * enabled / running at each reading) is the best available figure.
std::optional<int64_t> scaled_delta(const CounterReading& start, const CounterReading& end);

}  // namespace kiln::perf

#endif  // KILN_PLUGINS_PERF_COUNTER_DELTA_H_
