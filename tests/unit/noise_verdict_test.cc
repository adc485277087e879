// SPDX-License-Identifier: Apache-2.0
// The noise verdict and the human timing table (issue 21 item 1): thresholds and verdicts on
// synthetic results, the unit chosen per result, and the clocks the time evaluator records.
#include "kiln/detail/noise_verdict.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/detail/timing_table.h"
#include "kiln/evaluator.h"
#include "kiln/function.h"

namespace kiln {
namespace {

// A CPU result of `times` (seconds per call) with the given clocks over its measurement.
BenchmarkResult result_of(std::vector<double> times, double wall_s = 0, double thread_cpu_s = 0) {
  BenchmarkResult r(std::move(times));
  r.device = Device::cpu();
  r.wall_time_s = wall_s;
  r.thread_cpu_time_s = thread_cpu_s;
  r.process_cpu_time_s = thread_cpu_s;
  return r;
}

const HostLoad kQuiet{0.5, 2};

TEST(NoiseVerdict, QuietMeasurementHasNoLine) {
  const NoiseVerdict v = noise_verdict(result_of({1.00e-3, 1.01e-3, 0.99e-3}, 1.0, 0.98), kQuiet);
  EXPECT_FALSE(v.noisy);
  EXPECT_TRUE(v.reasons.empty());
  EXPECT_EQ(v.line(), "");
  ASSERT_TRUE(v.off_cpu.has_value());
  EXPECT_NEAR(*v.off_cpu, 0.02, 1e-12);
  // The summary is kiln::stats': sample stddev 1e-5 over a mean of 1e-3.
  EXPECT_NEAR(v.summary.cv, 0.01, 1e-12);
  EXPECT_NEAR(v.summary.rse, 0.01 / std::sqrt(3.0), 1e-12);
}

TEST(NoiseVerdict, CvAboveThreshold) {
  // Mean 1, sample stddev 0.13: CV 13%.
  const NoiseVerdict v = noise_verdict(result_of({0.87, 1.0, 1.13}), kQuiet);
  EXPECT_TRUE(v.noisy);
  EXPECT_EQ(v.line(), "noisy: CV 13%");
  // Just below the default 10%: quiet.
  EXPECT_FALSE(noise_verdict(result_of({0.901, 1.0, 1.099}), kQuiet).noisy);
  // A stricter threshold flags it.
  NoiseThresholds strict;
  strict.max_cv = 0.05;
  EXPECT_EQ(noise_verdict(result_of({0.901, 1.0, 1.099}), kQuiet, strict).line(), "noisy: CV 9.9%");
}

TEST(NoiseVerdict, CvNeedsEnoughRepeats) {
  // Two repeats say little about the spread: not judged by default.
  EXPECT_FALSE(noise_verdict(result_of({1.0, 2.0}), kQuiet).noisy);
  EXPECT_FALSE(noise_verdict(result_of({1.0}), kQuiet).noisy);
  NoiseThresholds two;
  two.min_repeats_for_cv = 2;
  EXPECT_EQ(noise_verdict(result_of({1.0, 2.0}), kQuiet, two).line(), "noisy: CV 47%");
}

TEST(NoiseVerdict, LoadAboveCores) {
  const std::vector<double> steady{1.0, 1.0, 1.0};
  EXPECT_EQ(noise_verdict(result_of(steady), HostLoad{3.3, 2}).line(),
            "noisy: load 3.3 on 2 cores");
  EXPECT_EQ(noise_verdict(result_of(steady), HostLoad{1.5, 1}).line(), "noisy: load 1.5 on 1 core");
  // At the core count exactly: not above it.
  EXPECT_FALSE(noise_verdict(result_of(steady), HostLoad{2.0, 2}).noisy);
  // No load given (a remote measurement): not judged.
  EXPECT_FALSE(noise_verdict(result_of(steady), std::nullopt).noisy);
  NoiseThresholds half;
  half.max_load_per_core = 0.5;
  EXPECT_TRUE(noise_verdict(result_of(steady), HostLoad{1.2, 2}, half).noisy);
}

TEST(NoiseVerdict, CpuPressureDuringTheMeasurement) {
  const std::vector<double> steady{1.0, 1.0, 1.0};
  BenchmarkResult pressed = result_of(steady, 2.0, 2.0);
  pressed.cpu_pressure_s = 0.7;  // 35% of the 2 s measurement
  EXPECT_EQ(noise_verdict(pressed, kQuiet).line(), "noisy: CPU pressure 35% of the measurement");
  EXPECT_EQ(noise_verdict(pressed, HostLoad{3.3, 2}).line(),
            "noisy: load 3.3 on 2 cores; CPU pressure 35% of the measurement");
  ASSERT_TRUE(noise_verdict(pressed, kQuiet).cpu_pressure.has_value());
  EXPECT_NEAR(*noise_verdict(pressed, kQuiet).cpu_pressure, 0.35, 1e-12);
  // A high load average with no pressure over the measurement: a burst that ended before it
  // (the load average lags by a minute). Quiet.
  BenchmarkResult calm = result_of(steady, 2.0, 2.0);
  calm.cpu_pressure_s = 0.01;
  EXPECT_FALSE(noise_verdict(calm, HostLoad{3.3, 2}).noisy);
  // Exactly at the default 10%: not above it.
  calm.cpu_pressure_s = 0.2;
  EXPECT_FALSE(noise_verdict(calm, kQuiet).noisy);
  // Not recorded (-1): the load average alone decides, as without PSI.
  EXPECT_FALSE(noise_verdict(result_of(steady, 2.0, 2.0), kQuiet).cpu_pressure.has_value());
}

TEST(NoiseVerdict, OffCpuDuringTheMeasurement) {
  // The measuring thread ran 0.4 s of a 1 s measurement: off the CPU 60% of it.
  const NoiseVerdict v = noise_verdict(result_of({1.0, 1.0, 1.0}, 1.0, 0.4), kQuiet);
  EXPECT_EQ(v.line(), "noisy: off-CPU 60% of the measurement");
  ASSERT_TRUE(v.off_cpu.has_value());
  EXPECT_NEAR(*v.off_cpu, 0.6, 1e-12);
  // CPU time above wall time (a thread's clock runs a little ahead): reads as 0.
  EXPECT_EQ(*noise_verdict(result_of({1.0}, 1.0, 1.001), kQuiet).off_cpu, 0.0);
  // Exactly at the default 10%: not above it.
  EXPECT_FALSE(noise_verdict(result_of({1.0}, 1.0, 0.9), kQuiet).noisy);
  // No clocks recorded (read from JSON, sent by a server): not judged.
  EXPECT_FALSE(noise_verdict(result_of({1.0}), kQuiet).off_cpu.has_value());
  // An accelerator's measuring thread may rightly sleep in a wait: not judged.
  BenchmarkResult gpu = result_of({1.0}, 1.0, 0.01);
  gpu.device = {kDLCUDA, 0};
  EXPECT_FALSE(noise_verdict(gpu, kQuiet).noisy);
  EXPECT_FALSE(noise_verdict(gpu, kQuiet).off_cpu.has_value());
}

TEST(NoiseVerdict, EveryReasonInOrder) {
  BenchmarkResult r = result_of({0.87, 1.0, 1.13}, 2.0, 0.8);
  r.cpu_pressure_s = 1.0;
  const NoiseVerdict v = noise_verdict(r, HostLoad{3.26, 2});
  EXPECT_EQ(v.line(),
            "noisy: CV 13%; load 3.3 on 2 cores; CPU pressure 50% of the measurement; off-CPU 60% "
            "of the measurement");
  EXPECT_EQ(v.reasons.size(), 4u);
}

TEST(NoiseVerdict, EmptyResultIsQuiet) {
  const NoiseVerdict v = noise_verdict(result_of({}), kQuiet);
  EXPECT_FALSE(v.noisy);
  EXPECT_EQ(v.summary.n, 0u);
}

TEST(NoiseVerdict, HostLoadReadsTheMachine) {
  const std::optional<HostLoad> load = host_load();
  ASSERT_TRUE(load.has_value());  // Linux has both
  EXPECT_GE(load->load1, 0);
  EXPECT_GE(load->cores, 1);
}

TEST(NoiseVerdict, FormatPercent) {
  EXPECT_EQ(format_percent(0), "0%");
  EXPECT_EQ(format_percent(0.0084), "0.84%");
  EXPECT_EQ(format_percent(0.033), "3.3%");
  EXPECT_EQ(format_percent(0.0996), "10%");
  EXPECT_EQ(format_percent(0.13), "13%");
  EXPECT_EQ(format_percent(1.5), "150%");
}

TEST(TimingTable, UnitPerResult) {
  EXPECT_STREQ(time_unit_for(63e-9).name, "ns");
  EXPECT_STREQ(time_unit_for(999e-9).name, "ns");
  EXPECT_STREQ(time_unit_for(1e-6).name, "us");
  EXPECT_STREQ(time_unit_for(31e-3).name, "ms");
  EXPECT_STREQ(time_unit_for(2.5).name, "s");
  EXPECT_STREQ(time_unit_for(0).name, "ns");
  EXPECT_STREQ(time_unit_for(std::nan("")).name, "ns");
}

TEST(TimingTable, SmallKernelKeepsItsDigits) {
  // 63 ns per call: the reference's table reads 0.0001 ms; this one 63.05 ns. By hand: p90 at
  // rank 2.7 = 63.1 + 0.7 x 7.1, p99 at 2.97, sample stddev sqrt(38.9 / 3) = 3.60.
  const BenchmarkResult r = result_of({63.1e-9, 62.9e-9, 63.0e-9, 70.2e-9});
  const std::string table = timing_table(r);
  EXPECT_EQ(table,
            "Execution time summary (ns per call):\n"
            "    median       mean        min        p90        p99        max        std      CV"
            "     RSE\n"
            "     63.05      64.80      62.90      68.07      69.99      70.20       3.60    5.6%"
            "    2.8%");
  EXPECT_NE(r.to_string().find("0.0001"), std::string::npos);  // the reference's, unchanged
}

TEST(TimingTable, MillisecondsAndSeconds) {
  EXPECT_EQ(timing_table(result_of({0.0312, 0.0312, 0.0312})).substr(0, 38),
            "Execution time summary (ms per call):\n");
  const std::string ms = timing_table(result_of({0.0312, 0.0312, 0.0312}));
  EXPECT_NE(ms.find("    31.20      31.20"), std::string::npos) << ms;
  const std::string s = timing_table(result_of({2.5, 2.5}));
  EXPECT_NE(s.find("(s per call)"), std::string::npos) << s;
  EXPECT_NE(s.find("     2.500      2.500"), std::string::npos) << s;
  const std::string us = timing_table(result_of({123.4e-6, 123.4e-6}));
  EXPECT_NE(us.find("(us per call)"), std::string::npos) << us;
  EXPECT_NE(us.find("     123.4      123.4"), std::string::npos) << us;
}

TEST(TimingTable, OneRepeatHasNoSpread) {
  const std::string table = timing_table(result_of({1e-3}));
  EXPECT_NE(table.find("         -       -       -"), std::string::npos) << table;
  EXPECT_EQ(timing_table(result_of({})), "Execution time summary: no repeats");
}

// The evaluator records the clocks over its measurement, cooldown sleeps left out.
TEST(TimeEvaluatorClocks, BusyAndSleepingFunctions) {
  Function spin = Function::from_typed("spin_2ms", [] {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    while (std::chrono::steady_clock::now() < end) {
    }
  });
  TimeEvaluatorOptions o;
  o.number = 5;
  o.repeat = 3;
  o.cooldown_interval_ms = 20;  // 60 ms of sleep that must not count as off-CPU
  const BenchmarkResult busy = time_evaluator(spin, Device::cpu(), o).call();
  EXPECT_GT(busy.wall_time_s, 0.025);
  EXPECT_LT(busy.wall_time_s, 0.06 + 0.03 * 5);  // cooldowns excluded (generous on a busy host)
  EXPECT_GT(busy.thread_cpu_time_s, 0);
  EXPECT_GE(busy.process_cpu_time_s, busy.thread_cpu_time_s * 0.99);
  if (std::ifstream("/proc/pressure/cpu").good()) {  // Linux with PSI
    EXPECT_GE(busy.cpu_pressure_s, 0);
    EXPECT_LE(busy.cpu_pressure_s, busy.wall_time_s * 1.01);
  } else {
    EXPECT_EQ(busy.cpu_pressure_s, -1);
  }

  Function nap = Function::from_typed(
      "sleep_2ms", [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
  TimeEvaluatorOptions n;
  n.number = 5;
  n.repeat = 3;
  const BenchmarkResult sleeping = time_evaluator(nap, Device::cpu(), n).call();
  EXPECT_GT(sleeping.wall_time_s, 0.025);
  // A sleeping function is off the CPU nearly all the measurement, and the verdict says so.
  EXPECT_LT(sleeping.thread_cpu_time_s, sleeping.wall_time_s * 0.5);
  const NoiseVerdict v = noise_verdict(sleeping, std::nullopt);
  EXPECT_TRUE(v.noisy);
  EXPECT_NE(v.line().find("off-CPU"), std::string::npos) << v.line();
}

}  // namespace
}  // namespace kiln
