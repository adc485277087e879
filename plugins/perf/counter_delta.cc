// SPDX-License-Identifier: Apache-2.0
#include "counter_delta.h"

#include <cmath>
#include <limits>

namespace kiln::perf {
namespace {

// The value `reading` estimates for the whole time the counter was enabled.
double cumulative_estimate(const CounterReading& reading) {
  if (reading.time_running == 0) return 0;
  return static_cast<double>(reading.value) * static_cast<double>(reading.time_enabled) /
         static_cast<double>(reading.time_running);
}

// `estimate` rounded to int64, or nullopt when it does not fit (treated as an overflow).
std::optional<int64_t> to_count(double estimate) {
  // 2^63 is exactly representable; anything at or above it does not fit.
  if (!(estimate < 9223372036854775808.0)) return std::nullopt;
  if (estimate < 0) return 0;
  return static_cast<int64_t>(std::llround(estimate));
}

}  // namespace

std::optional<int64_t> scaled_delta(const CounterReading& start, const CounterReading& end) {
  if (end.value < start.value) return std::nullopt;
  const uint64_t raw = end.value - start.value;
  // The times only grow; a decrease would be a kernel oddity, read as "no time passed".
  const uint64_t enabled =
      end.time_enabled > start.time_enabled ? end.time_enabled - start.time_enabled : 0;
  const uint64_t running =
      end.time_running > start.time_running ? end.time_running - start.time_running : 0;
  if (running >= enabled) {
    // Counted the whole interval (the only case for software events): exact, no rounding.
    if (raw > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(raw);
  }
  if (running == 0) return to_count(cumulative_estimate(end) - cumulative_estimate(start));
  return to_count(static_cast<double>(raw) * static_cast<double>(enabled) /
                  static_cast<double>(running));
}

}  // namespace kiln::perf
