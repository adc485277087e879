// SPDX-License-Identifier: Apache-2.0
// The Mann-Whitney U-test (Wilcoxon rank-sum), two-sided, as `kiln compare` uses it to tell a
// change in timings from noise (docs/cli.md "kiln compare"). It agrees with
// scipy.stats.mannwhitneyu(x, y, alternative="two-sided", method="auto") for the cases that
// method covers: the exact distribution of U when both samples are shorter than 8 and there are
// no ties, otherwise the normal approximation with the tie correction and a continuity
// correction of 0.5.
// Not installed (kiln/detail/, docs/architecture.md "The public surface"): libkiln implements it
// for `kiln compare` and the tests; no API or ABI promise.
#ifndef KILN_DETAIL_MANN_WHITNEY_H_
#define KILN_DETAIL_MANN_WHITNEY_H_

#include <cstddef>
#include <vector>

namespace kiln::stats {

struct UTestResult {
  double u = 0;        // U of the first sample: pairs (x, y) with x > y, plus half the ties
  double p_value = 1;  // two-sided
  bool exact = false;  // from the exact distribution (else the normal approximation)
};

// The two-sided U-test of `x` against `y`. An empty sample gives p = 1 (no evidence).
UTestResult mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y);

// The exact null distribution of U for samples of m and n values without ties: element u is the
// number of the C(m + n, m) orderings with U = u (0 <= u <= m n). Doubles, since only their
// ratios matter: exact up to 2^53 and within the double range for m + n <= 1000.
std::vector<double> u_null_counts(size_t m, size_t n);

// The smallest two-sided p-value samples of these sizes can reach (all of one sample below all of
// the other, no ties): with 3 and 3 repeats it is 0.1, so no difference is ever significant at
// 0.05. 1 when either is empty.
double min_p_value(size_t nx, size_t ny);

}  // namespace kiln::stats

#endif  // KILN_DETAIL_MANN_WHITNEY_H_
