// SPDX-License-Identifier: Apache-2.0
// kiln::stats: the summary every report prints, against values worked out by hand (and numpy's
// percentile / Google Benchmark's sample stddev definitions).
#include "kiln/statistics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::stats {
namespace {

TEST(Statistics, SummaryOfKnownSamples) {
  const Summary s = summarize({4, 1, 3, 2, 5});
  EXPECT_EQ(s.n, 5u);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_DOUBLE_EQ(s.stddev, std::sqrt(2.5));             // sum of squares 10 over n - 1
  EXPECT_DOUBLE_EQ(s.stddev_population, std::sqrt(2.0));  // over n
  EXPECT_DOUBLE_EQ(s.cv, std::sqrt(2.5) / 3);
  EXPECT_DOUBLE_EQ(s.rse, std::sqrt(2.5) / 3 / std::sqrt(5.0));
  EXPECT_DOUBLE_EQ(s.p90, 4.6);   // numpy.percentile([1..5], 90)
  EXPECT_DOUBLE_EQ(s.p99, 4.96);  // numpy.percentile([1..5], 99)
}

TEST(Statistics, EdgeCases) {
  EXPECT_EQ(summarize({}).n, 0u);
  const Summary one = summarize({7});
  EXPECT_DOUBLE_EQ(one.median, 7);
  EXPECT_DOUBLE_EQ(one.stddev, 0);
  EXPECT_DOUBLE_EQ(one.p99, 7);
  EXPECT_DOUBLE_EQ(summarize({0, 0}).cv, 0);  // no division by a zero mean
  EXPECT_DOUBLE_EQ(summarize({1, 2, 3, 4}).median, 2.5);
  EXPECT_DOUBLE_EQ(quantile({1, 2}, -1), 1);
  EXPECT_DOUBLE_EQ(quantile({1, 2}, 2), 2);
}

}  // namespace
}  // namespace kiln::stats
