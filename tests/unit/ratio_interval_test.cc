// SPDX-License-Identifier: Apache-2.0
// kiln::stats::paired_ratio, unpaired_ratio and judge_change (kiln/detail/ratio_interval.h):
// the exact critical values of small samples, agreement with the U-test they invert, coverage
// by simulation and the verdicts.
#include "kiln/detail/ratio_interval.h"

#include <gtest/gtest.h>

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

TEST(RatioInterval, Verdicts) {
  // Significant and beyond the threshold: slower / faster.
  EXPECT_EQ(judge_change(interval(1.10, 1.06, 1.14), 0.05, 0).direction, "slower");
  EXPECT_EQ(judge_change(interval(0.90, 0.87, 0.93), 0.05, 0).direction, "faster");
  // Within the threshold, significant or not: no change.
  const ChangeVerdict small = judge_change(interval(1.02, 1.01, 1.03), 0.05, 0);
  EXPECT_EQ(small.direction, "no change");
  EXPECT_TRUE(small.significant);
  // Beyond the threshold but the interval holds 1: within noise, and says why.
  const ChangeVerdict wide = judge_change(interval(1.10, 0.95, 1.25), 0.05, 0);
  EXPECT_EQ(wide.direction, "within noise");
  EXPECT_NE(wide.reason.find("includes no change"), std::string::npos);
  EXPECT_NEAR(wide.detectable, 1.10 / 0.95 - 1, 1e-12);
  // Significant, beyond the threshold, inside a noise band of 15%: within noise.
  const ChangeVerdict band = judge_change(interval(1.10, 1.06, 1.14), 0.05, 0.15);
  EXPECT_EQ(band.direction, "within noise");
  EXPECT_NEAR(band.allowance, 0.15, 1e-12);
  EXPECT_NE(band.reason.find("noise band of 15.0%"), std::string::npos);
  // Unbounded: undecided, nothing detectable.
  const ChangeVerdict none = judge_change(interval(1.5, 0, INFINITY), 0.05, 0);
  EXPECT_EQ(none.direction, "undecided");
  EXPECT_TRUE(std::isinf(none.detectable));
}

}  // namespace
}  // namespace kiln::stats
