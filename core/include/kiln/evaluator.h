// SPDX-License-Identifier: Apache-2.0
// The time evaluator: runs a function repeatedly on a device and returns honest statistics.
// The measurement loop follows the reference exactly (SPEC.md §1.3): one warm-up call, then
// `repeat` measurements of `number` calls each, `number` growing by the golden ratio while a
// batch is shorter than `min_repeat_ms` (and staying grown in the evaluator), a cap on batches
// that read zero time, cooldown sleeps, `f_preproc` once per repeat and cache flushing before
// each timed batch. Options beyond the reference default off. See docs/evaluator.md.
#ifndef KILN_EVALUATOR_H_
#define KILN_EVALUATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/any.h"
#include "kiln/device.h"
#include "kiln/function.h"

namespace kiln {

class Module;
class DeviceContext;

// Per-repeat times in seconds per call, and their statistics.
class BenchmarkResult {
 public:
  BenchmarkResult() = default;
  // `results`: seconds per call, one per repeat. Statistics are computed here.
  explicit BenchmarkResult(std::vector<double> results);

  const std::vector<double>& results() const { return results_; }
  double mean() const { return mean_; }
  double median() const { return median_; }
  double min() const { return min_; }
  double max() const { return max_; }
  double std() const { return std_; }  // population standard deviation (ddof = 0)

  // Which timer measured: "device" (the backend's timer slots) or "wall" (sync + host clock).
  std::string timer;
  // Calls per repeat in the final batch of each repeat (after growth).
  std::vector<int64_t> numbers;
  // Every timed batch in order when keep_raw_samples was set: {calls, seconds}.
  struct Sample {
    int64_t calls;
    double seconds;
  };
  std::vector<Sample> raw_samples;
  // Why measuring stopped when the noise rule was on: "target", "plateau", "timeout" or
  // "max_repeats"; empty otherwise.
  std::string stop_reason;
  std::string name;  // the function measured, for reports
  Device device;
  // The clocks over the measurement: from the first timed batch to the end of the last repeat
  // (batches, f_preproc, cache flushes and progress callbacks; not the warm-up call nor the
  // cooldown sleeps). Wall-clock seconds, CPU seconds of the thread that measured, and CPU
  // seconds of the whole process. All 0 when not recorded (a result read from JSON or sent by
  // an RPC server). The noise verdict compares them (kiln/detail/noise_verdict.h, the CLI's).
  double wall_time_s = 0;
  double thread_cpu_time_s = 0;
  double process_cpu_time_s = 0;
  // Seconds of the same span in which some runnable thread on this machine waited for a CPU
  // (Linux's pressure stall information, /proc/pressure/cpu "some"); -1 when not recorded (no
  // PSI, or read from JSON or an RPC server).
  double cpu_pressure_s = -1;

  // The reference's printed form: "Execution time summary:" and a table in milliseconds.
  std::string to_string() const;
  // The reference's repr: "BenchmarkResult(min=..., mean=..., median=..., max=..., std=...,
  // results=(...))" with Python float and tuple formatting.
  std::string repr() const;
  // Google Benchmark's JSON schema: "context" plus one entry per repeat and mean / median /
  // stddev aggregates (times in nanoseconds), readable by its compare.py.
  std::string to_json() const;
  // Reads what to_json() wrote. Throws ValueError for anything else.
  static BenchmarkResult from_json(const std::string& text);

 private:
  std::vector<double> results_;
  double mean_ = 0, median_ = 0, min_ = 0, max_ = 0, std_ = 0;
};

// Options beyond the reference; all default off.
struct NoiseStoppingRule {
  bool enabled = false;
  double target_rse = 0.01;    // stop when the relative standard error of means is below this
  int32_t min_repeats = 5;     // ... after at least this many repeats
  double min_time_s = 0.0;     // ... and at least this much measuring time
  double timeout_s = 60.0;     // stop anyway after this much wall-clock time
  int32_t max_repeats = 1000;  // and after this many repeats
  // Stop when the RSE over the last `plateau_window` repeats changed by less than
  // `plateau_tolerance` (relative): the noise has stabilised above the target.
  int32_t plateau_window = 10;
  double plateau_tolerance = 0.05;
};

// The evaluator's parameters (SPEC.md §1.2), with the reference's defaults.
struct TimeEvaluatorOptions {
  int32_t number = 10;
  int32_t repeat = 1;
  int32_t min_repeat_ms = 0;
  int32_t limit_zero_time_iterations = 100;
  int32_t cooldown_interval_ms = 0;
  int32_t repeats_to_cooldown = 1;
  int64_t cache_flush_bytes = 0;
  std::string f_preproc;  // name of a global function called before each repeat with the args
  // Beyond the reference:
  NoiseStoppingRule noise;  // replaces the fixed `repeat` when enabled
  bool keep_raw_samples = false;
  // Called after each repeat with (repeats done, total or -1 when open-ended); for progress.
  std::function<void(int32_t, int32_t)> on_repeat;

  // Throws ValueError naming the parameter: number < 1, repeat < 0, repeats_to_cooldown < 1,
  // min_repeat_ms < 0, limit_zero_time_iterations < 1, cooldown_interval_ms < 0,
  // cache_flush_bytes < 0, and noise-rule values out of range.
  void validate() const;
};

// A callable evaluator. Not thread-safe: `number` is state that grows across calls.
class TimeEvaluator {
 public:
  // Times `f` on `device` of `context` (which the evaluator keeps alive; its backend times
  // and synchronises, and cache-flush buffers are allocated through it). Validates `options`
  // (ValueError), looks up f_preproc (NotFoundError when not registered).
  TimeEvaluator(Function f, Device device, TimeEvaluatorOptions options,
                const DeviceContext& context);
  // API-edge default: the same with Runtime::global().
  TimeEvaluator(Function f, Device device, TimeEvaluatorOptions options);
  ~TimeEvaluator();
  TimeEvaluator(TimeEvaluator&&) noexcept;
  TimeEvaluator& operator=(TimeEvaluator&&) noexcept;

  // Runs the measurement loop with `args` (passed unchanged to the function). Run for an RPC
  // session, it ends early with a RuntimeError once the session ends (timeout, client gone,
  // server stopping): cancellation is looked at before every batch and during cooldown sleeps
  // (docs/evaluator.md, "Cancellation"). Elsewhere nothing cancels it.
  BenchmarkResult operator()(const std::vector<Any>& args);
  template <typename... Args>
  BenchmarkResult call(Args&&... args) {
    return (*this)(std::vector<Any>{Any(std::forward<Args>(args))...});
  }

  // The current `number` (grown by earlier calls).
  int32_t number() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Module::time_evaluator and Function time evaluators, with the reference's signature.
TimeEvaluator time_evaluator(const Module& module, const std::string& func_name, Device device,
                             int32_t number = 10, int32_t repeat = 1, int32_t min_repeat_ms = 0,
                             int32_t limit_zero_time_iterations = 100,
                             int32_t cooldown_interval_ms = 0, int32_t repeats_to_cooldown = 1,
                             int64_t cache_flush_bytes = 0, const std::string& f_preproc = "");
TimeEvaluator time_evaluator(Function f, Device device, TimeEvaluatorOptions options = {});

// The runner-level configuration (SPEC.md §1.6).
struct EvaluatorConfig {
  int32_t number = 3;
  int32_t repeat = 1;
  int32_t min_repeat_ms = 100;
  bool enable_cpu_cache_flush = false;

  // Field-by-field copy, or the defaults for nullopt (the reference's `_normalized`).
  static EvaluatorConfig normalized(const std::optional<EvaluatorConfig>& config);
  // The evaluator options it means: f_preproc = "cache_flush_cpu_non_first_arg" when
  // enable_cpu_cache_flush, other parameters at their defaults.
  TimeEvaluatorOptions to_options() const;
};

}  // namespace kiln

#endif  // KILN_EVALUATOR_H_
