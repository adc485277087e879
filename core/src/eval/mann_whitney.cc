// SPDX-License-Identifier: Apache-2.0
#include "kiln/detail/mann_whitney.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace kiln::stats {

// The coefficients of the Gaussian binomial [m + n choose m]_q =
// prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i).
std::vector<double> u_null_counts(size_t m, size_t n) {
  const size_t top = m * n;
  std::vector<double> c(top + 1, 0.0);
  c[0] = 1;
  for (size_t i = 1; i <= m; ++i) {
    // Multiply by (1 - q^(n+i)), from the top down so each coefficient is used once ...
    for (size_t k = top; k >= n + i; --k) c[k] -= c[k - n - i];
    // ... and divide by (1 - q^i): a running sum with stride i.
    for (size_t k = i; k <= top; ++k) c[k] += c[k - i];
  }
  return c;
}

UTestResult mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y) {
  UTestResult r;
  const size_t n1 = x.size(), n2 = y.size();
  if (n1 == 0 || n2 == 0) return r;
  // Midranks of the pooled sample; tie group sizes for the variance.
  std::vector<std::pair<double, bool>> all;  // value, from x
  all.reserve(n1 + n2);
  for (double v : x) all.emplace_back(v, true);
  for (double v : y) all.emplace_back(v, false);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  double rank_sum_x = 0, tie_term = 0;
  bool ties = false;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    const double t = static_cast<double>(j - i);
    const double midrank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t k = i; k < j; ++k) {
      if (all[k].second) rank_sum_x += midrank;
    }
    if (t > 1) {
      ties = true;
      tie_term += t * t * t - t;
    }
    i = j;
  }
  const double m = static_cast<double>(n1), n = static_cast<double>(n2);
  r.u = rank_sum_x - m * (m + 1) / 2;
  const double u_max = std::max(r.u, m * n - r.u);  // the larger of U1 and U2

  // scipy's method="auto": exact unless both samples are larger than 8 or there are ties.
  if (!ties && (n1 <= 8 || n2 <= 8)) {
    const std::vector<double> c = u_null_counts(std::min(n1, n2), std::max(n1, n2));
    const double total = std::accumulate(c.begin(), c.end(), 0.0);
    // P(U >= u_max); u_max is a whole number without ties.
    double tail = 0;
    for (size_t k = static_cast<size_t>(std::llround(u_max)); k < c.size(); ++k) tail += c[k];
    r.p_value = std::min(1.0, 2 * tail / total);
    r.exact = true;
    return r;
  }
  const double total = m + n;
  const double sigma = std::sqrt(m * n / 12 * ((total + 1) - tie_term / (total * (total - 1))));
  if (!(sigma > 0)) return r;  // every value equal: no evidence either way
  const double z = (u_max - m * n / 2 - 0.5) / sigma;
  // Two-sided: 2 * P(Z > z) = erfc(z / sqrt 2).
  r.p_value = std::min(1.0, std::erfc(z / std::sqrt(2.0)));
  return r;
}

double min_p_value(size_t nx, size_t ny) {
  std::vector<double> x(nx), y(ny);
  std::iota(x.begin(), x.end(), 0.0);
  std::iota(y.begin(), y.end(), static_cast<double>(nx));
  return mann_whitney_u(x, y).p_value;
}

}  // namespace kiln::stats
