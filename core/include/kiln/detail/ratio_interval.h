// SPDX-License-Identifier: Apache-2.0
// How much slower or faster B is than A, with a confidence interval, and the verdict `kiln
// compare`, `kiln ab` and kiln::testing::ab_run give (docs/evaluator.md "Comparing two
// timings"). Times are compared on a log scale, so the estimate is a ratio B / A:
// - paired samples (round i of an interleaved run measured a[i] and b[i] together): the median
//   of the per-round ratios b[i] / a[i] with the sign test's interval (order statistics of the
//   ratios), which a few rounds upset by a burst of load cannot move;
// - unpaired samples (the repeats of two runs made at different times): the two-sample
//   Hodges-Lehmann estimate (the median of log b_j - log a_i over all pairs) with the interval
//   of the Mann-Whitney U-test.
// Both intervals come from the exact null distributions (so they hold for any distribution of
// the noise, outliers included) and invert the test `kiln compare` always used: the interval
// excludes 1 exactly when the test rejects "no change" at 1 - confidence.
// Not installed (kiln/detail/, docs/architecture.md "The public surface"): libkiln implements it
// for the tools, the testing API and the tests; no API or ABI promise.
#ifndef KILN_DETAIL_RATIO_INTERVAL_H_
#define KILN_DETAIL_RATIO_INTERVAL_H_

#include <cstddef>
#include <string>
#include <vector>

namespace kiln::stats {

// An estimate of B / A and its confidence interval.
struct RatioInterval {
  double ratio = 1;  // the point estimate of B / A
  // The interval. With too few samples to bound it at the requested confidence (fewer than 6
  // pairs at 95%, or 3 and 3 repeats), low = 0 and high = +infinity.
  double low = 0, high = 0;
  // The interval's actual coverage (at least the requested confidence: the exact distributions
  // are discrete).
  double confidence = 0;
  size_t n_a = 0, n_b = 0;  // the samples used

  bool bounded() const;
  // "1.042 [0.991, 1.097]" (ratios), or "1.042 [unbounded]".
  std::string text() const;
};

// Paired ratio of `b` to `a` (equal lengths, every value > 0 and finite) at `confidence`
// (0 < confidence < 1, e.g. 0.95). Throws ValueError otherwise.
RatioInterval paired_ratio(const std::vector<double>& a, const std::vector<double>& b,
                           double confidence);

// Unpaired ratio of the values of `b` to those of `a` (each non-empty, every value > 0 and
// finite) at `confidence`. Throws ValueError otherwise. A sample of more than 1000 values is
// replaced by 1000 evenly spaced order statistics of it.
RatioInterval unpaired_ratio(const std::vector<double>& a, const std::vector<double>& b,
                             double confidence);

// What a comparison concludes about one benchmark.
struct ChangeVerdict {
  // "slower" or "faster": the change is beyond the allowance and the interval excludes 1;
  // "within noise": beyond the threshold but not that (not significant, or inside the noise
  // band); "no change": within the threshold. "undecided" when the interval is unbounded.
  std::string direction;
  bool significant = false;  // the interval excludes 1
  // The band a change must pass to count: max(threshold, noise band).
  double allowance = 0;
  // The smallest change these samples could call slower or faster: the allowance, or the
  // interval's half-width when that is wider (+infinity when unbounded).
  double detectable = 0;
  std::string reason;  // why a change beyond the threshold was not counted, else ""
};

// Judges `interval` with `threshold` (a fraction: 0.05 for 5%) and `noise_band` (a fraction the
// machine's drift could explain; 0 for an interleaved run, where drift cancels; +infinity when
// the machine was too busy for any change to count).
ChangeVerdict judge_change(const RatioInterval& interval, double threshold, double noise_band);

}  // namespace kiln::stats

#endif  // KILN_DETAIL_RATIO_INTERVAL_H_
