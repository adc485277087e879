// SPDX-License-Identifier: Apache-2.0
#include "kiln/detail/timing_table.h"

#include <fmt/format.h>

#include <cmath>

#include "kiln/detail/noise_verdict.h"
#include "kiln/statistics.h"

namespace kiln {

TimeUnit time_unit_for(double seconds) {
  if (!(std::isfinite(seconds) && seconds > 0) || seconds < 1e-6) return {"ns", 1e-9};
  if (seconds < 1e-3) return {"us", 1e-6};
  if (seconds < 1) return {"ms", 1e-3};
  return {"s", 1};
}

std::string timing_table(const BenchmarkResult& result) {
  const stats::Summary s = stats::summarize(result.results());
  if (s.n == 0) return "Execution time summary: no repeats";
  const TimeUnit unit = time_unit_for(s.median);
  // Four significant digits of the median, the same decimals in every column.
  const double m = std::fabs(s.median / unit.seconds);
  const int decimals = m >= 100 ? 1 : m >= 10 ? 2 : 3;
  auto time = [&](double seconds) {
    return fmt::format("{:>10.{}f}", seconds / unit.seconds, decimals);
  };
  const bool spread = s.n >= 2;  // one repeat has no spread
  std::string out = fmt::format("Execution time summary ({} per call):\n", unit.name);
  out += fmt::format("{:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>7}\n", "median",
                     "mean", "min", "p90", "p99", "max", "std", "CV", "RSE");
  out += fmt::format("{} {} {} {} {} {} {} {:>7} {:>7}", time(s.median), time(s.mean), time(s.min),
                     time(s.p90), time(s.p99), time(s.max),
                     spread ? time(s.stddev) : fmt::format("{:>10}", "-"),
                     spread ? format_percent(s.cv) : "-", spread ? format_percent(s.rse) : "-");
  return out;
}

}  // namespace kiln
