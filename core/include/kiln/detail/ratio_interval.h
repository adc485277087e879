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

// Two runs made at different times, each under its own load: consecutive repeats share the
// machine's state of the moment, so they are not independent samples of the run. Each run's
// repeats, in the order they were taken, are cut into blocks of `block_size` (the last partial
// block dropped) and each block gives its median: a run with k blocks gives k samples, and the
// drift of the machine within the run shows as the spread of its blocks instead of being
// averaged away. `drift` measures that drift apart from the repeats' own noise, on a log
// scale: the variance of the block means less what the spread within the blocks explains
// (var(block means) - mean within-block variance / block_size, at least 0: the between-block
// component of a one-way random-effects model), as exp(2 sigma) - 1, the change two standard
// deviations of drift make. It is how far a second run made as close by may move with no
// change in the code.
struct Blocks {
  std::vector<double> medians;
  double drift = 0;
};
// Throws ValueError for block_size < 2, fewer than two blocks, or a time that is not positive.
Blocks block_medians(const std::vector<double>& samples, size_t block_size);

// What a comparison concludes about one benchmark.
struct ChangeVerdict {
  // "slower" or "faster": the interval excludes 1 and the estimate is beyond the allowance.
  // "no change": the whole interval lies within the threshold (1 / (1 + threshold) to
  // 1 + threshold), so no change beyond it is consistent with the samples.
  // "could not tell": neither; `reason` says why (the interval reaches past the threshold on
  // one side and past no change on the other, the change is inside the noise band, the machine
  // was too busy, too few samples to bound the interval).
  std::string direction;
  bool significant = false;  // the interval excludes 1
  // The band a change must pass to count: max(threshold, noise band).
  double allowance = 0;
  // The smallest change these samples could call slower or faster: the allowance, or the
  // interval's half-width when that is wider (+infinity when unbounded).
  double detectable = 0;
  std::string reason;  // why a change beyond the threshold was not counted, else ""
  // For "could not tell" from a wide interval: about how many samples (rounds of a paired run,
  // or repeats per side of two files) would narrow the interval enough to decide, the interval's
  // width taken to shrink as 1 / sqrt(n); 0 when more samples would not decide (the change sits
  // on the threshold, or the noise band or a busy machine, not the spread, blocks a verdict).
  size_t samples_to_decide = 0;
};

// Judges `interval` with `threshold` (a fraction: 0.05 for 5%) and `noise_band` (a fraction the
// machine's drift could explain; 0 for an interleaved run, where drift cancels; +infinity when
// the machine was too busy for any change to count).
ChangeVerdict judge_change(const RatioInterval& interval, double threshold, double noise_band);

}  // namespace kiln::stats

#endif  // KILN_DETAIL_RATIO_INTERVAL_H_
