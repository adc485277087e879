// SPDX-License-Identifier: Apache-2.0
// The noise verdict of a measurement (docs/evaluator.md "Noise verdict"): whether the spread of
// its repeats, the machine's load or the time the measuring thread spent off the CPU make its
// numbers doubtful, with the reasons in words ("noisy: CV 13%; load 3.3 on 2 cores"). The
// statistics come from kiln::stats::summarize.
// Not installed (kiln/detail/, docs/architecture.md "The public surface"): libkiln implements it
// for `kiln run` and the tests; no API or ABI promise.
#ifndef KILN_DETAIL_NOISE_VERDICT_H_
#define KILN_DETAIL_NOISE_VERDICT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/evaluator.h"
#include "kiln/statistics.h"

namespace kiln {

// Past any of these a measurement is called noisy. The defaults are documented in
// docs/evaluator.md; change them there too.
struct NoiseThresholds {
  // The coefficient of variation of the per-repeat times (sample stddev / mean) above this...
  double max_cv = 0.10;
  // ... judged only with at least this many repeats (fewer say little about the spread).
  int32_t min_repeats_for_cv = 3;
  // The 1-minute load average above (online cores x this): runnable threads were waiting.
  // Where the measurement recorded the CPU pressure, a high load counts only when the pressure
  // over the measurement passed max_cpu_pressure too (the load average lags by a minute).
  double max_load_per_core = 1.0;
  // The fraction of the measurement in which some runnable thread of the machine waited for a
  // CPU (BenchmarkResult::cpu_pressure_s / wall_time_s) above this.
  double max_cpu_pressure = 0.10;
  // The measuring thread off the CPU for more than this fraction of the measurement's wall
  // time (1 - thread CPU time / wall time); judged on CPU devices only, where the measuring
  // thread runs the function itself (an accelerator's thread may rightly sleep in a wait).
  double max_off_cpu = 0.10;
};

// The machine's 1-minute load average (getloadavg) and online cores (sysconf); nullopt where
// the system does not say.
struct HostLoad {
  double load1 = 0;
  int32_t cores = 0;
};
std::optional<HostLoad> host_load();

struct NoiseVerdict {
  stats::Summary summary;  // of the per-repeat times (seconds per call)
  // The host's load when it was given (a local measurement), else nullopt.
  std::optional<HostLoad> load;
  // 1 - thread CPU / wall over the measurement, when judged (a CPU device with clocks
  // recorded), else nullopt. Negative values (CPU time above wall time) read as 0.
  std::optional<double> off_cpu;
  // cpu_pressure_s / wall_time_s, when the measurement recorded it, else nullopt.
  std::optional<double> cpu_pressure;
  bool noisy = false;
  // What passed its threshold, in words: "CV 13%", "load 3.3 on 2 cores",
  // "CPU pressure 35% of the measurement", "off-CPU 60% of the measurement".
  std::vector<std::string> reasons;

  // "noisy: CV 13%; load 3.3 on 2 cores", or "" when nothing passed its threshold.
  std::string line() const;
};

// Judges `result`. `load`: the host's load for a measurement made on this machine (nullopt for
// a remote one: this machine's load says nothing about the server's).
NoiseVerdict noise_verdict(const BenchmarkResult& result, const std::optional<HostLoad>& load,
                           const NoiseThresholds& thresholds = {});

// A fraction as a percentage for reports: "0.84%", "3.3%", "13%" (two significant digits,
// at least one decimal below 10%).
std::string format_percent(double fraction);

}  // namespace kiln

#endif  // KILN_DETAIL_NOISE_VERDICT_H_
