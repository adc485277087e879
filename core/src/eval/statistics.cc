// SPDX-License-Identifier: Apache-2.0
#include "kiln/statistics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kiln::stats {

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

Summary summarize(const std::vector<double>& samples) {
  Summary s;
  s.n = samples.size();
  if (s.n == 0) return s;
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  const double n = static_cast<double>(s.n);
  s.mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / n;
  s.min = sorted.front();
  s.max = sorted.back();
  s.median = quantile(sorted, 0.5);
  s.p50 = s.median;
  s.p90 = quantile(sorted, 0.9);
  s.p99 = quantile(sorted, 0.99);
  double squares = 0;
  for (double v : sorted) squares += (v - s.mean) * (v - s.mean);
  s.stddev_population = std::sqrt(squares / n);
  s.stddev = s.n > 1 ? std::sqrt(squares / (n - 1)) : 0;
  s.cv = s.mean != 0 ? s.stddev / s.mean : 0;
  s.rse = s.cv / std::sqrt(n);
  return s;
}

}  // namespace kiln::stats
