// SPDX-License-Identifier: Apache-2.0
// Metric values of profiling reports (SPEC.md §3.1): Count, Duration (microseconds), Percent
// (0-100), Ratio, or a string.
#ifndef KILN_PROFILING_METRICS_H_
#define KILN_PROFILING_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <variant>

namespace kiln::profiling {

struct Count {
  int64_t value = 0;
  bool operator==(const Count&) const = default;
};
struct Duration {
  double microseconds = 0;
  bool operator==(const Duration&) const = default;
};
struct Percent {
  double percent = 0;  // 10 means 10 %
  bool operator==(const Percent&) const = default;
};
struct Ratio {
  double ratio = 0;
  bool operator==(const Ratio&) const = default;
};

// One metric value.
using MetricValue = std::variant<Count, Duration, Percent, Ratio, std::string>;
// Named metrics: one row of a report, a device's totals, or a configuration.
using MetricMap = std::map<std::string, MetricValue>;

// Whether `value` cannot be a measurement of its kind: a Count or Duration below 0, or a Percent
// outside 0-100 (with room for a sum's rounding). Ratios and strings never are. One judgement
// for profile tables (which mark such a value " (!)") and collector conformance tests.
bool impossible_for_its_kind(const MetricValue& value);

}  // namespace kiln::profiling

#endif  // KILN_PROFILING_METRICS_H_
