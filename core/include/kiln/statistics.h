// SPDX-License-Identifier: Apache-2.0
// Summary statistics of repeated measurements (docs/evaluator.md "Statistics"): what the run
// table, the JSON reports and `kiln compare` print, computed in one place so that every report
// agrees. Plain functions on samples; no state.
#ifndef KILN_STATISTICS_H_
#define KILN_STATISTICS_H_

#include <cstddef>
#include <vector>

namespace kiln::stats {

struct Summary {
  size_t n = 0;
  double mean = 0, median = 0, min = 0, max = 0;
  double stddev = 0;  // sample standard deviation (n - 1), Google Benchmark's; 0 for n < 2
  double stddev_population = 0;  // population standard deviation (n), the reference's `std`
  double cv = 0;                 // coefficient of variation: stddev / mean (0 when mean is 0)
  double rse = 0;                // relative standard error of the mean: cv / sqrt(n)
  double p50 = 0, p90 = 0, p99 = 0;
};

// The summary of `samples` (any order). An empty input gives a zero Summary.
Summary summarize(const std::vector<double>& samples);

// The `q`-quantile (0 <= q <= 1) of `sorted` (ascending, non-empty) with linear interpolation
// between closest ranks, as numpy.percentile's default; q outside [0, 1] is clamped.
double quantile(const std::vector<double>& sorted, double q);

}  // namespace kiln::stats

#endif  // KILN_STATISTICS_H_
