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

Blocks block_medians(const std::vector<double>& samples, size_t block_size) {
  if (block_size < 2 || samples.size() < 2 * block_size) {
    throw ValueError(fmt::format("block_medians: {} samples cannot fill two blocks of {}",
                                 samples.size(), block_size));
  }
  check_times(samples, "block");
  Blocks out;
  std::vector<double> means;
  double within = 0;  // the sum of the blocks' variances of log times
  for (size_t begin = 0; begin + block_size <= samples.size(); begin += block_size) {
    std::vector<double> block(samples.begin() + static_cast<std::ptrdiff_t>(begin),
                              samples.begin() + static_cast<std::ptrdiff_t>(begin + block_size));
    std::vector<double> logs(block.size());
    std::transform(block.begin(), block.end(), logs.begin(), [](double v) { return std::log(v); });
    const double mean = std::accumulate(logs.begin(), logs.end(), 0.0) / logs.size();
    double ss = 0;
    for (double v : logs) ss += (v - mean) * (v - mean);
    within += ss / static_cast<double>(logs.size() - 1);
    means.push_back(mean);
    std::sort(block.begin(), block.end());
    const size_t n = block.size();
    out.medians.push_back(n % 2 == 1 ? block[n / 2] : (block[n / 2 - 1] + block[n / 2]) / 2);
  }
  const double k = static_cast<double>(means.size());
  const double grand = std::accumulate(means.begin(), means.end(), 0.0) / k;
  double between = 0;
  for (double m : means) between += (m - grand) * (m - grand);
  between /= k - 1;
  const double component = std::max(0.0, between - within / k / static_cast<double>(block_size));
  out.drift = std::exp(2 * std::sqrt(component)) - 1;
  return out;
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
  v.direction = "could not tell";
  if (!interval.bounded()) {
    v.reason = "too few samples to bound the interval";
    return v;
  }
  if (v.significant && std::abs(change) > v.allowance) {
    v.direction = change > 0 ? "slower" : "faster";
    return v;
  }
  // Equivalence: every ratio the interval holds is within the threshold.
  if (interval.low >= 1 / (1 + threshold) && interval.high <= 1 + threshold) {
    v.direction = "no change";
    return v;
  }
  if (!std::isfinite(noise_band)) {
    v.reason = "the machine was too busy to tell a change from noise";
    return v;
  }
  // On a log scale: the estimate's distance from no change, the interval's half-width and the
  // threshold and allowance.
  const double d = std::abs(std::log(interval.ratio));
  const double w =
      std::max(std::log(interval.ratio / interval.low), std::log(interval.high / interval.ratio));
  const double t = std::log1p(threshold);
  const double beyond = std::log1p(v.allowance);
  if (d > t && d <= beyond) {
    v.reason = fmt::format(
        "a change of {:+.1f}% is inside the noise band of {:.1f}% the machine's "
        "state could explain",
        change * 100, noise_band * 100);
    return v;
  }
  v.reason = fmt::format(
      "the {:.1f}% interval {:.3f}-{:.3f} holds both no change and changes beyond {:g}%",
      interval.confidence * 100, interval.low, interval.high, threshold * 100);
  // The interval narrows as 1 / sqrt(n): a change beyond the allowance is decided once the
  // interval excludes 1 (half-width below d), one within the threshold once it fits inside
  // the threshold (half-width below t - d). In between more samples do not help.
  double factor = 0;
  if (d > beyond) {
    factor = (w / d) * (w / d);
  } else if (d < t) {
    factor = (w / (t - d)) * (w / (t - d));
  }
  const double n = static_cast<double>(std::max(interval.n_a, interval.n_b));
  const double needed = std::ceil(n * factor);
  if (factor > 0 && n > 0 && needed < 1e6) {
    v.samples_to_decide = std::max(static_cast<size_t>(needed), static_cast<size_t>(n) + 1);
  }
  return v;
}

}  // namespace kiln::stats
