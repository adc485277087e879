// SPDX-License-Identifier: Apache-2.0
// Throughput arithmetic (kiln/detail/throughput.h).
#include "kiln/detail/throughput.h"

#include <fmt/format.h>

#include <cmath>

#include "kiln/tensor.h"

namespace kiln {
namespace {

// Three significant figures without an exponent for the usual range: "812", "42.1", "3.20".
std::string rate(double value) {
  if (value >= 100) return fmt::format("{:.0f}", value);
  if (value >= 10) return fmt::format("{:.1f}", value);
  return fmt::format("{:.2f}", value);
}

}  // namespace

double argument_bytes(const std::vector<Any>& args) {
  double total = 0;
  for (const Any& v : args) {
    if (v.type_code() == KILN_TYPE_TENSOR) total += static_cast<double>(v.cast<Tensor>().nbytes());
  }
  return total;
}

std::optional<double> peak_memory_bandwidth(
    const std::vector<std::pair<std::string, Any>>& attributes) {
  for (const auto& [key, value] : attributes) {
    if (key != kPeakMemoryBandwidthAttribute) continue;
    if (value.type_code() != KILN_TYPE_INT && value.type_code() != KILN_TYPE_FLOAT) return {};
    const double peak = value.cast<double>();
    if (std::isfinite(peak) && peak > 0) return peak;
    return {};
  }
  return {};
}

Throughput compute_throughput(const ThroughputSpec& spec, double derived_bytes, double seconds,
                              std::optional<double> peak_bytes_per_s) {
  Throughput t;
  t.bytes_derived = !spec.bytes.has_value();
  t.bytes = spec.bytes.value_or(derived_bytes);
  t.flops = spec.flops;
  t.seconds = seconds;
  t.peak_bytes_per_s = peak_bytes_per_s;
  const bool timed = seconds > 0 && std::isfinite(seconds);
  t.gb_per_s = timed ? t.bytes / seconds / 1e9 : 0;
  if (t.flops) t.gflop_per_s = timed ? *t.flops / seconds / 1e9 : 0;
  if (peak_bytes_per_s && *peak_bytes_per_s > 0 && timed) {
    t.fraction_of_peak = t.bytes / seconds / *peak_bytes_per_s;
  }
  return t;
}

std::string Throughput::line() const {
  if (!(seconds > 0 && std::isfinite(seconds))) {
    // No rate from no time: "n/a", never 0 GB/s (issue 29: a timer reading 0 printed 0.00).
    return fmt::format("throughput: n/a (no time per call was measured; {:.0f} bytes per call)",
                       bytes);
  }
  std::string out = fmt::format("throughput: {} GB/s (", rate(gb_per_s));
  if (fraction_of_peak) {
    out += fmt::format("{:.0f}% of the {} GB/s peak memory bandwidth; ", *fraction_of_peak * 100,
                       rate(*peak_bytes_per_s / 1e9));
  }
  out += fmt::format("{:.0f} bytes per call", bytes);
  if (bytes_derived) out += ", the arguments' total size, an estimate of the traffic";
  out += ")";
  if (gflop_per_s) {
    out += fmt::format(", {} GFLOP/s ({:.0f} flops per call)", rate(*gflop_per_s), *flops);
  }
  return out;
}

}  // namespace kiln
