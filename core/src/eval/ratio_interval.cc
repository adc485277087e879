// SPDX-License-Identifier: Apache-2.0
#include "kiln/detail/ratio_interval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kiln/detail/mann_whitney.h"
#include "kiln/error.h"

namespace kiln::stats {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr size_t kMaxRepeats = 1000;

void check_confidence(double confidence) {
  if (!(confidence > 0 && confidence < 1)) {
    throw ValueError(fmt::format("confidence must be between 0 and 1, got {}", confidence));
  }
}

void check_times(const std::vector<double>& values, const char* which) {
  if (values.empty()) throw ValueError(fmt::format("no {} times to compare", which));
  for (size_t i = 0; i < values.size(); ++i) {
    if (!(values[i] > 0) || !std::isfinite(values[i])) {
      throw ValueError(fmt::format(
          "{} time [{}] is {}: times to compare must be positive and finite", which, i, values[i]));
    }
  }
}

// `count` evenly spaced elements of `values` (all of them when there are no more than that).
std::vector<double> evenly_spaced(const std::vector<double>& values, size_t count) {
  if (values.size() <= count) return values;
  std::vector<double> out(count);
  for (size_t i = 0; i < count; ++i) {
    out[i] = values[i * (values.size() - 1) / (count - 1)];
  }
  return out;
}

// Of a discrete null distribution given as probabilities of 0, 1, 2, ... (symmetric), the
// largest t with P(T <= t) <= tail, or -1 when even P(T <= 0) is above it. The interval of the
// test that inverts it runs from the (t + 1)-th to the (N - t)-th ordered estimate.
long critical_index(const std::vector<double>& probabilities, double tail, double* below) {
  double cumulative = 0;
  long t = -1;
  *below = 0;
  for (size_t k = 0; k < probabilities.size(); ++k) {
    cumulative += probabilities[k];
    if (cumulative > tail * (1 + 1e-12)) break;
    t = static_cast<long>(k);
    *below = cumulative;
  }
  return t;
}

// The estimate and interval from `estimates` (sorted) and the null distribution's critical
// index: ratio = exp(median), interval exp(estimates[t]) .. exp(estimates[N - 1 - t]).
RatioInterval from_sorted(const std::vector<double>& estimates, long t, double below) {
  RatioInterval r;
  const size_t n = estimates.size();
  const double median =
      n % 2 == 1 ? estimates[n / 2] : (estimates[n / 2 - 1] + estimates[n / 2]) / 2;
  r.ratio = std::exp(median);
  if (t < 0) {
    r.low = 0;
    r.high = kInfinity;
    r.confidence = 1;
    return r;
  }
  r.low = std::exp(estimates[static_cast<size_t>(t)]);
  r.high = std::exp(estimates[n - 1 - static_cast<size_t>(t)]);
  r.confidence = 1 - 2 * below;
  return r;
}

}  // namespace

bool RatioInterval::bounded() const { return low > 0 && std::isfinite(high); }

std::string RatioInterval::text() const {
  if (!bounded()) return fmt::format("{:.3f} [unbounded]", ratio);
  return fmt::format("{:.3f} [{:.3f}, {:.3f}]", ratio, low, high);
}

RatioInterval paired_ratio(const std::vector<double>& a, const std::vector<double>& b,
                           double confidence) {
  check_confidence(confidence);
  check_times(a, "A");
  check_times(b, "B");
  if (a.size() != b.size()) {
    throw ValueError(
        fmt::format("paired times differ in length: {} of A, {} of B", a.size(), b.size()));
  }
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = std::log(b[i]) - std::log(a[i]);
  std::sort(d.begin(), d.end());
  const size_t n = d.size();
  // The sign test's null distribution: Binomial(n, 1/2), built by halving so that it stays
  // probabilities.
  std::vector<double> p(n + 1, 0.0);
  p[0] = 1;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t k = i; k >= 1; --k) p[k] = (p[k] + p[k - 1]) / 2;
    p[0] /= 2;
  }
  double below = 0;
  const long t = critical_index(p, (1 - confidence) / 2, &below);
  RatioInterval r = from_sorted(d, t, below);
  r.n_a = r.n_b = n;
  return r;
}

RatioInterval unpaired_ratio(const std::vector<double>& a, const std::vector<double>& b,
                             double confidence) {
  check_confidence(confidence);
  check_times(a, "A");
  check_times(b, "B");
  std::vector<double> la(a.size()), lb(b.size());
  std::transform(a.begin(), a.end(), la.begin(), [](double v) { return std::log(v); });
  std::transform(b.begin(), b.end(), lb.begin(), [](double v) { return std::log(v); });
  std::sort(la.begin(), la.end());
  std::sort(lb.begin(), lb.end());
  la = evenly_spaced(la, kMaxRepeats);
  lb = evenly_spaced(lb, kMaxRepeats);
  std::vector<double> differences;
  differences.reserve(la.size() * lb.size());
  for (double x : la) {
    for (double y : lb) differences.push_back(y - x);
  }
  std::sort(differences.begin(), differences.end());
  std::vector<double> p =
      u_null_counts(std::min(la.size(), lb.size()), std::max(la.size(), lb.size()));
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& v : p) v /= total;
  double below = 0;
  const long t = critical_index(p, (1 - confidence) / 2, &below);
  RatioInterval r = from_sorted(differences, t, below);
  r.n_a = la.size();
  r.n_b = lb.size();
  return r;
}

ChangeVerdict judge_change(const RatioInterval& interval, double threshold, double noise_band) {
  ChangeVerdict v;
  v.allowance = std::max(threshold, noise_band);
  const double change = interval.ratio - 1;
  v.significant = interval.bounded() && (interval.low > 1 || interval.high < 1);
  // The half-width of the interval as a relative change: a true change smaller than it leaves
  // 1 inside the interval.
  const double half_width =
      interval.bounded()
          ? std::max(interval.ratio / interval.low, interval.high / interval.ratio) - 1
          : kInfinity;
  v.detectable = std::max(v.allowance, half_width);
  if (!interval.bounded()) {
    v.direction = "undecided";
    v.reason = "too few samples to bound the interval";
    return v;
  }
  const bool beyond_allowance = std::abs(change) > v.allowance;
  if (v.significant && beyond_allowance) {
    v.direction = change > 0 ? "slower" : "faster";
    return v;
  }
  const bool beyond_threshold = std::abs(change) > threshold;
  if (!beyond_threshold) {
    v.direction = "no change";
    return v;
  }
  v.direction = "within noise";
  v.reason = !v.significant
                 ? fmt::format("the {:.0f}% interval includes no change", interval.confidence * 100)
             : std::isfinite(noise_band)
                 ? fmt::format("inside the noise band of {:.1f}% the machine's state could explain",
                               noise_band * 100)
                 : std::string("the machine was too busy to tell a change from noise");
  return v;
}

}  // namespace kiln::stats
