// SPDX-License-Identifier: Apache-2.0
// kiln::stats::mann_whitney_u against scipy.stats.mannwhitneyu(x, y, alternative="two-sided",
// method="auto") (scipy 1.17.1): the exact distribution for small samples without ties, the
// normal approximation with tie and continuity corrections otherwise.
#include "kiln/detail/mann_whitney.h"

#include <gtest/gtest.h>

#include <vector>

namespace kiln::stats {
namespace {

struct Case {
  std::vector<double> x, y;
  double u, p;
  bool exact;
};

TEST(MannWhitney, MatchesScipy) {
  const std::vector<Case> cases = {
      {{1, 2, 3}, {4, 5, 6}, 0, 0.1, true},
      {{1, 2, 3, 4}, {5, 6, 7, 8}, 0, 0.02857142857142857, true},
      {{3.1, 2.9, 3.4, 3.0, 3.2}, {3.3, 3.6, 3.5, 3.8, 3.7, 3.9}, 1, 0.008658008658008658, true},
      {{1, 4, 2, 7}, {3, 5, 6}, 4, 0.6285714285714286, true},
      // Ties: the normal approximation with the tie correction.
      {{1, 2, 2, 3, 4}, {2, 3, 5, 6, 6}, 4.5, 0.11049202405566802, false},
      // Both larger than 8: the normal approximation.
      {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
       {3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5},
       21,
       0.031209012771740218,
       false},
      {{1, 2, 3, 4, 5, 6, 7, 8, 9},
       {1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 20, 21},
       36,
       0.48766835345893045,
       false},
      // One sample of 8, the other of 20: still exact.
      {{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8},
       {0.15, 0.25, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6,
        1.7,  1.8,  1.9, 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6},
       13,
       0.00022328717980891894,
       true},
      {{5}, {1}, 1, 1.0, true},
      // Every value equal: no evidence either way.
      {{10, 10, 10, 10, 10}, {10, 10, 10, 10, 10}, 12.5, 1.0, false},
  };
  for (const Case& c : cases) {
    const UTestResult r = mann_whitney_u(c.x, c.y);
    SCOPED_TRACE(::testing::Message()
                 << "x[0]=" << c.x[0] << " n=" << c.x.size() << "/" << c.y.size());
    EXPECT_DOUBLE_EQ(r.u, c.u);
    EXPECT_NEAR(r.p_value, c.p, 1e-12 * c.p + 1e-15);
    EXPECT_EQ(r.exact, c.exact);
  }
}

TEST(MannWhitney, SymmetricInItsArguments) {
  const std::vector<double> x{3.1, 2.9, 3.4, 3.0, 3.2}, y{3.3, 3.6, 3.5, 3.8, 3.7, 3.9};
  const UTestResult a = mann_whitney_u(x, y), b = mann_whitney_u(y, x);
  EXPECT_DOUBLE_EQ(a.p_value, b.p_value);
  EXPECT_DOUBLE_EQ(a.u + b.u, 30);  // U1 + U2 = n1 * n2
}

TEST(MannWhitney, EmptyAndSmallestReachable) {
  EXPECT_DOUBLE_EQ(mann_whitney_u({}, {1, 2}).p_value, 1);
  EXPECT_DOUBLE_EQ(min_p_value(3, 3), 0.1);  // 2 / C(6, 3): never below 0.05
  EXPECT_DOUBLE_EQ(min_p_value(4, 4), 2.0 / 70);
  EXPECT_DOUBLE_EQ(min_p_value(1, 1), 1);
  EXPECT_DOUBLE_EQ(min_p_value(0, 5), 1);
}

}  // namespace
}  // namespace kiln::stats
