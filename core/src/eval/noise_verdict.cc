// SPDX-License-Identifier: Apache-2.0
#include "kiln/detail/noise_verdict.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace kiln {

std::string format_percent(double fraction) {
  const double p = fraction * 100;
  if (!std::isfinite(p)) return fmt::format("{}%", p);
  if (p == 0) return "0%";
  const double a = std::fabs(p);
  return fmt::format("{:.{}f}%", p, a < 0.995 ? 2 : a < 9.95 ? 1 : 0);
}

std::optional<HostLoad> host_load() {
  double loads[1];
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (getloadavg(loads, 1) != 1 || cores < 1) return std::nullopt;
  return HostLoad{loads[0], static_cast<int32_t>(cores)};
}

std::string NoiseVerdict::line() const {
  if (!noisy) return "";
  return fmt::format("noisy: {}", fmt::join(reasons, "; "));
}

NoiseVerdict noise_verdict(const BenchmarkResult& result, const std::optional<HostLoad>& load,
                           const NoiseThresholds& thresholds) {
  NoiseVerdict v;
  v.summary = stats::summarize(result.results());
  v.load = load;
  const stats::Summary& s = v.summary;
  if (static_cast<int64_t>(s.n) >= thresholds.min_repeats_for_cv && s.cv > thresholds.max_cv) {
    v.reasons.push_back("CV " + format_percent(s.cv));
  }
  if (result.cpu_pressure_s >= 0 && result.wall_time_s > 0) {
    v.cpu_pressure = std::min(1.0, result.cpu_pressure_s / result.wall_time_s);
  }
  const bool pressed = v.cpu_pressure && *v.cpu_pressure > thresholds.max_cpu_pressure;
  // The load average lags by a minute: where the pressure over the measurement itself is
  // known, a high load with no pressure is a burst that ended before it.
  if (load && load->cores > 0 && load->load1 > load->cores * thresholds.max_load_per_core &&
      (!v.cpu_pressure || pressed)) {
    v.reasons.push_back(fmt::format("load {:.1f} on {} core{}", load->load1, load->cores,
                                    load->cores == 1 ? "" : "s"));
  }
  if (pressed) {
    v.reasons.push_back("CPU pressure " + format_percent(*v.cpu_pressure) + " of the measurement");
  }
  // Only where the measuring thread runs the function: on an accelerator it may rightly sleep
  // while it waits for the device.
  if (result.device.type == kDLCPU && result.wall_time_s > 0) {
    v.off_cpu = std::max(0.0, 1 - result.thread_cpu_time_s / result.wall_time_s);
    if (*v.off_cpu > thresholds.max_off_cpu) {
      v.reasons.push_back("off-CPU " + format_percent(*v.off_cpu) + " of the measurement");
    }
  }
  v.noisy = !v.reasons.empty();
  return v;
}

}  // namespace kiln
