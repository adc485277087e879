// SPDX-License-Identifier: Apache-2.0
// kiln::stats::paired_ratio, unpaired_ratio and judge_change (kiln/detail/ratio_interval.h):
// the exact critical values of small samples, agreement with the U-test they invert, coverage
// by simulation and the verdicts.
#include "kiln/detail/ratio_interval.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kiln/detail/mann_whitney.h"
#include "kiln/error.h"

namespace kiln::stats {
namespace {

TEST(RatioInterval, PairedConstantRatioIsExact) {
  const std::vector<double> a = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<double> b;
  for (double v : a) b.push_back(v * 1.1);
  const RatioInterval r = paired_ratio(a, b, 0.95);
  EXPECT_NEAR(r.ratio, 1.1, 1e-12);
  EXPECT_NEAR(r.low, 1.1, 1e-12);
  EXPECT_NEAR(r.high, 1.1, 1e-12);
  EXPECT_TRUE(r.bounded());
}

// With 6 pairs, P(X <= 0) = 1/64 <= 0.025 < P(X <= 1) = 7/64 (X the sign test's binomial):
// the interval runs from the smallest to the largest ratio, with coverage 1 - 2/64. With 5
// pairs even the extremes (P = 1/32 each) cannot make 95%: unbounded.
TEST(RatioInterval, PairedSmallSamplesUseTheExactDistribution) {
  const std::vector<double> a(6, 1.0);
  const std::vector<double> b = {0.9, 1.0, 1.05, 1.1, 1.2, 1.3};
  const RatioInterval r = paired_ratio(a, b, 0.95);
  EXPECT_NEAR(r.low, 0.9, 1e-12);
  EXPECT_NEAR(r.high, 1.3, 1e-12);
  EXPECT_NEAR(r.confidence, 1 - 2.0 / 64, 1e-12);
  EXPECT_NEAR(r.ratio, std::sqrt(1.05 * 1.1), 1e-12);  // the median of the log ratios
  const RatioInterval five =
      paired_ratio(std::vector<double>(5, 1.0), std::vector<double>{0.9, 1.0, 1.1, 1.2, 1.3}, 0.95);
  EXPECT_FALSE(five.bounded());
  EXPECT_EQ(five.low, 0);
  EXPECT_TRUE(std::isinf(five.high));
}

// 20 pairs at 95%: P(X <= 5) = 0.0207 <= 0.025 < P(X <= 6) = 0.0577, so the interval runs from
// the 6th to the 15th smallest ratio, and five rounds upset by load on either side cannot move
// it.
TEST(RatioInterval, PairedIntervalIgnoresAFewWildRounds) {
  std::vector<double> a(20, 1.0), b;
  for (int i = 0; i < 20; ++i) b.push_back(1.10 + 0.001 * i);
  for (int i = 0; i < 5; ++i) b[i] = 0.4;   // the hog hit A's slot
  for (int i = 5; i < 10; ++i) b[i] = 2.5;  // ... or B's
  const RatioInterval r = paired_ratio(a, b, 0.95);
  EXPECT_NEAR(r.low, 1.110, 1e-12);
  EXPECT_NEAR(r.high, 1.119, 1e-12);
  EXPECT_NEAR(r.confidence, 1 - 2 * 0.020694732666015625, 1e-12);
}

// With 4 and 4 repeats, P(U <= 0) = 1/70 <= 0.025 < P(U <= 1) = 2/70: the interval spans the
// smallest to the largest pairwise ratio. 3 and 3 (P = 1/20) cannot: unbounded.
TEST(RatioInterval, UnpairedSmallSamplesUseTheExactDistribution) {
  const RatioInterval r = unpaired_ratio({1, 2, 3, 4}, {2, 4, 6, 8}, 0.95);
  EXPECT_NEAR(r.low, 2.0 / 4, 1e-12);
  EXPECT_NEAR(r.high, 8.0 / 1, 1e-12);
  EXPECT_NEAR(r.confidence, 1 - 2.0 / 70, 1e-12);
  EXPECT_FALSE(unpaired_ratio({1, 2, 3}, {4, 5, 6}, 0.95).bounded());
}

// The unpaired interval inverts the two-sided U-test: it excludes 1 exactly when the exact
// U-test's p is below 1 - confidence.
TEST(RatioInterval, UnpairedIntervalAgreesWithTheUTest) {
  std::mt19937 rng(7);
  std::lognormal_distribution<double> noise(0, 0.05);
  int disagreements = 0, rejections = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const double shift = 1 + 0.01 * (trial % 8);
    std::vector<double> a, b;
    for (int i = 0; i < 7; ++i) a.push_back(noise(rng));
    for (int i = 0; i < 8; ++i) b.push_back(shift * noise(rng));
    const RatioInterval r = unpaired_ratio(a, b, 0.95);
    const UTestResult u = mann_whitney_u(a, b);
    ASSERT_TRUE(u.exact);
    const bool excludes_one = r.low > 1 || r.high < 1;
    rejections += u.p_value < 0.05;
    disagreements += excludes_one != (u.p_value < 0.05);
  }
  EXPECT_EQ(disagreements, 0);
  EXPECT_GT(rejections, 20);  // the check saw both outcomes
}

// Over many simulated interleaved runs (20 rounds, 3% noise, outliers in one round of ten),
// the 95% interval holds the true ratio at least about 95% of the time.
TEST(RatioInterval, PairedCoverageBySimulation) {
  std::mt19937 rng(11);
  std::lognormal_distribution<double> noise(0, 0.03);
  std::uniform_real_distribution<double> unit(0, 1);
  const double truth = 1.07;
  int covered = 0;
  const int trials = 1000;
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<double> a, b;
    for (int i = 0; i < 20; ++i) {
      const double drift = 1 + 0.5 * (unit(rng) < 0.1);  // a hog now and then: both sides
      a.push_back(drift * noise(rng));
      b.push_back(drift * truth * noise(rng));
    }
    const RatioInterval r = paired_ratio(a, b, 0.95);
    covered += r.low <= truth && truth <= r.high;
  }
  EXPECT_GE(covered, trials * 93 / 100);
}

TEST(RatioInterval, RejectsBadInput) {
  EXPECT_THROW(paired_ratio({1, 2}, {1}, 0.95), ValueError);
  EXPECT_THROW(paired_ratio({1, 0}, {1, 1}, 0.95), ValueError);
  EXPECT_THROW(paired_ratio({}, {}, 0.95), ValueError);
  EXPECT_THROW(unpaired_ratio({1, 2}, {1, NAN}, 0.95), ValueError);
  EXPECT_THROW(unpaired_ratio({1, 2}, {1, -2}, 0.95), ValueError);
  EXPECT_THROW(unpaired_ratio({1, 2}, {1, 2}, 1.0), ValueError);
}

RatioInterval interval(double ratio, double low, double high) {
  RatioInterval r;
  r.ratio = ratio;
  r.low = low;
  r.high = high;
  r.confidence = 0.95;
  return r;
}

RatioInterval interval(double ratio, double low, double high, size_t n) {
  RatioInterval r = interval(ratio, low, high);
  r.n_a = r.n_b = n;
  return r;
}

TEST(RatioInterval, Verdicts) {
  // Significant and beyond the threshold: slower / faster.
  EXPECT_EQ(judge_change(interval(1.10, 1.06, 1.14), 0.05, 0).direction, "slower");
  EXPECT_EQ(judge_change(interval(0.90, 0.87, 0.93), 0.05, 0).direction, "faster");
  // The whole interval within the threshold, significant or not: no change.
  const ChangeVerdict small = judge_change(interval(1.02, 1.01, 1.03), 0.05, 0);
  EXPECT_EQ(small.direction, "no change");
  EXPECT_TRUE(small.significant);
  EXPECT_EQ(judge_change(interval(1.0, 1 / 1.05, 1.05), 0.05, 0).direction, "no change");
  // An estimate within the threshold whose interval reaches past it is not "no change": a
  // slowdown beyond the threshold fits the samples as well.
  const ChangeVerdict loose = judge_change(interval(1.01, 0.90, 1.20, 20), 0.05, 0);
  EXPECT_EQ(loose.direction, "could not tell");
  EXPECT_NE(loose.reason.find("holds both no change and changes beyond 5%"), std::string::npos);
  // ... and says how many samples would narrow the interval into the threshold: the interval
  // narrows as 1 / sqrt(n), so n (w / (t - d))^2 on a log scale.
  const double w = std::max(std::log(1.01 / 0.90), std::log(1.20 / 1.01));
  const double t = std::log(1.05), d = std::log(1.01);
  EXPECT_EQ(loose.samples_to_decide,
            static_cast<size_t>(std::ceil(20 * (w / (t - d)) * (w / (t - d)))));
  // Beyond the threshold but the interval holds 1: could not tell, and says why and how many
  // samples would exclude 1 (n (w / d)^2, w the wider half of the interval).
  const ChangeVerdict wide = judge_change(interval(1.10, 0.95, 1.25, 10), 0.05, 0);
  EXPECT_EQ(wide.direction, "could not tell");
  EXPECT_NEAR(wide.detectable, 1.10 / 0.95 - 1, 1e-12);
  const double ww = std::max(std::log(1.10 / 0.95), std::log(1.25 / 1.10)), dw = std::log(1.10);
  EXPECT_EQ(wide.samples_to_decide, static_cast<size_t>(std::ceil(10 * (ww / dw) * (ww / dw))));
  // Significant, beyond the threshold, inside a noise band of 15%: could not tell, and more
  // samples would not decide it.
  const ChangeVerdict band = judge_change(interval(1.10, 1.06, 1.14, 40), 0.05, 0.15);
  EXPECT_EQ(band.direction, "could not tell");
  EXPECT_NEAR(band.allowance, 0.15, 1e-12);
  EXPECT_NE(band.reason.find("noise band of 15.0%"), std::string::npos);
  EXPECT_EQ(band.samples_to_decide, 0u);
  // A machine too busy for any band: could not tell, saying so.
  const ChangeVerdict busy = judge_change(interval(1.5, 1.4, 1.6, 8), 0.05, INFINITY);
  EXPECT_EQ(busy.direction, "could not tell");
  EXPECT_NE(busy.reason.find("too busy"), std::string::npos);
  // Unbounded: could not tell, nothing detectable.
  const ChangeVerdict none = judge_change(interval(1.5, 0, INFINITY), 0.05, 0);
  EXPECT_EQ(none.direction, "could not tell");
  EXPECT_NE(none.reason.find("too few samples"), std::string::npos);
  EXPECT_TRUE(std::isinf(none.detectable));
}

// Issue 35: a run's 5 repeats scaled by exactly 1.5x were "within noise", so a gate passed.
// Unpaired, 5 against 5 with all of B above all of A, the interval excludes 1: slower on a
// quiet machine; with the busy machine's band, could not tell; never no change.
TEST(RatioInterval, FiveRepeatsScaledByOneAndAHalfAreNeverNoChange) {
  const std::vector<double> a = {100, 103, 98, 101, 99};
  std::vector<double> b(a.size());
  std::transform(a.begin(), a.end(), b.begin(), [](double v) { return v * 1.5; });
  const RatioInterval r = unpaired_ratio(a, b, 0.95);
  ASSERT_TRUE(r.bounded());
  EXPECT_NEAR(r.ratio, 1.5, 0.03);
  EXPECT_EQ(judge_change(r, 0.05, 0).direction, "slower");
  EXPECT_EQ(judge_change(r, 0.05, 0.08).direction, "slower");  // beyond a quiet run's band
  EXPECT_EQ(judge_change(r, 0.05, INFINITY).direction, "could not tell");
  // Paired: five rounds cannot bound a 95% interval (could not tell), six can (slower).
  EXPECT_EQ(judge_change(paired_ratio(a, b, 0.95), 0.05, 0).direction, "could not tell");
  std::vector<double> a6 = a, b6 = b;
  a6.push_back(100);
  b6.push_back(150);
  EXPECT_EQ(judge_change(paired_ratio(a6, b6, 0.95), 0.05, 0).direction, "slower");
}

// Blocks: the medians of consecutive blocks, and the drift: the spread of the block means
// beyond what the spread within the blocks explains.
TEST(RatioInterval, BlocksShowTheDriftWithinARun) {
  // Two blocks, each the same five values: no drift at all.
  const std::vector<double> steady = {10, 11, 12, 13, 14, 14, 13, 12, 11, 10};
  const Blocks s = block_medians(steady, 5);
  EXPECT_EQ(s.medians, (std::vector<double>{12, 12}));
  EXPECT_EQ(s.drift, 0);
  // The second block on a machine 1.5x slower: its median moves, and the drift is the
  // between-block component: var(block means) - within / 5 on a log scale.
  std::vector<double> moved = steady;
  for (size_t i = 5; i < 10; ++i) moved[i] *= 1.5;
  const Blocks m = block_medians(moved, 5);
  EXPECT_EQ(m.medians, (std::vector<double>{12, 18}));
  double within = 0;
  std::vector<double> means;
  for (size_t b = 0; b < 2; ++b) {
    double mean = 0, ss = 0;
    for (size_t i = 0; i < 5; ++i) mean += std::log(moved[5 * b + i]) / 5;
    for (size_t i = 0; i < 5; ++i) ss += std::pow(std::log(moved[5 * b + i]) - mean, 2);
    within += ss / 4;
    means.push_back(mean);
  }
  const double between = std::pow(means[0] - means[1], 2) / 2;  // sample variance of two
  const double sigma = std::sqrt(between - within / 2 / 5);
  EXPECT_NEAR(m.drift, std::exp(2 * sigma) - 1, 1e-12);
  EXPECT_GT(m.drift, 0.5);
  // The last partial block is dropped; too few samples or a block of one are errors.
  EXPECT_EQ(block_medians({1, 2, 3, 4, 5, 6, 7}, 3).medians, (std::vector<double>{2, 5}));
  EXPECT_THROW(block_medians({1, 2, 3}, 2), ValueError);
  EXPECT_THROW(block_medians({1, 2, 3, 4}, 1), ValueError);
  EXPECT_THROW(block_medians({1, 2, 0, 4}, 2), ValueError);
}

}  // namespace
}  // namespace kiln::stats
