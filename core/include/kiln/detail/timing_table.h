// SPDX-License-Identifier: Apache-2.0
// The human timing table of `kiln run` (docs/evaluator.md "The timing table"): times per call
// in a unit chosen per result (ns, us, ms or s) so that small kernels keep their digits, with
// percentiles, CV and RSE. BenchmarkResult::to_string() keeps the reference's exact format.
// Not installed (kiln/detail/, docs/architecture.md "The public surface"): libkiln implements it
// for `kiln run` and the tests; no API or ABI promise.
#ifndef KILN_DETAIL_TIMING_TABLE_H_
#define KILN_DETAIL_TIMING_TABLE_H_

#include <string>

#include "kiln/evaluator.h"

namespace kiln {

struct TimeUnit {
  const char* name;  // "ns", "us", "ms", "s"
  double seconds;    // one unit in seconds
};

// The unit in which `seconds` reads between 1 and 1000 (ns below 1 us, s from 1 s on; ns for
// 0, negative or non-finite values).
TimeUnit time_unit_for(double seconds);

// The table for `result`: a header line naming the unit, then one row of median (p50), mean,
// min, p90, p99, max, sample stddev, CV and RSE. Times carry four significant digits of the
// median; CV, RSE and std read "-" with fewer than 2 repeats. No repeats: one line saying so.
std::string timing_table(const BenchmarkResult& result);

}  // namespace kiln

#endif  // KILN_DETAIL_TIMING_TABLE_H_
