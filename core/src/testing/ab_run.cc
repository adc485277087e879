// SPDX-License-Identifier: Apache-2.0
// kiln::testing::ab_run (kiln/ab_run.h): two time evaluators, called alternately.
#include "kiln/ab_run.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "kiln/detail/ratio_interval.h"
#include "kiln/error.h"
#include "run_steps.h"

namespace kiln::testing {
namespace {

// One side, ready to time: its function, its arguments on its device, its evaluator.
struct Ready {
  std::vector<Any> device_args;
  TimeEvaluator evaluator;
  std::string device;  // "cpu:0", for errors
};

Ready ready(const AbSide& side, const char* name) {
  if (side.context == nullptr) {
    throw ValueError(fmt::format("ab_run: side {} has no context (a Runtime)", name));
  }
  try {
    const std::string function = side.function.empty() ? side.module.entry_name() : side.function;
    if (function.empty()) {
      throw NotFoundError("the module has no entry function; name one");
    }
    Function f = side.module.get_function(function);
    detail::check_run_args(side.args);
    RunHooks hooks;
    hooks.evaluator = side.evaluator;
    hooks.evaluator->noise = {};
    hooks.evaluator->on_repeat = nullptr;
    EvaluatorConfig config = EvaluatorConfig::normalized(side.evaluator_config);
    config.repeat = 1;
    TimeEvaluatorOptions options = detail::run_evaluator_options(config, hooks);
    std::vector<Any> device_args = detail::args_to_device(side.args, side.device, *side.context);
    return {std::move(device_args), TimeEvaluator(f, side.device, options, *side.context),
            side.context->device_str(side.device)};
  } catch (const Error& e) {
    throw_error(e.code(), fmt::format("ab_run: side {}: {}", name, e.what()));  // same type
  }
}

// One repeat of `side`: seconds per call. A timer that reads 0 (or less) gives nothing to
// compare: an error naming it, not a ratio of zeros.
double time_once(Ready& side, const char* name) {
  BenchmarkResult r;
  try {
    r = side.evaluator(side.device_args);
  } catch (const Error& e) {
    throw_error(e.code(), fmt::format("ab_run: side {}: {}", name, e.what()));  // same type
  }
  const double seconds = r.results().at(0);
  if (!(seconds > 0) || !std::isfinite(seconds)) {
    throw RuntimeError(
        fmt::format("ab_run: side {}: the '{}' timer of {} read {} s per call: no time to compare",
                    name, r.timer, side.device, seconds));
  }
  return seconds;
}

}  // namespace

AbResult ab_run(const AbSide& a, const AbSide& b, const AbOptions& options) {
  if (options.rounds < 6) {
    throw ValueError(
        fmt::format("ab_run: rounds must be at least 6 (fewer cannot bound a 95% interval), got {}",
                    options.rounds));
  }
  if (!(options.threshold >= 0)) {
    throw ValueError(fmt::format("ab_run: threshold must be >= 0, got {}", options.threshold));
  }
  if (!(options.confidence > 0 && options.confidence < 1)) {
    throw ValueError(
        fmt::format("ab_run: confidence must be between 0 and 1, got {}", options.confidence));
  }
  AbResult result;
  result.seed = options.seed ? *options.seed : std::random_device{}();
  std::mt19937_64 order(result.seed);
  Ready ready_a = ready(a, "A");
  Ready ready_b = ready(b, "B");
  // Warm-up: caches, clocks, lazily compiled kernels and `number` grown to min_repeat_ms.
  time_once(ready_a, "A");
  time_once(ready_b, "B");
  for (int32_t round = 0; round < options.rounds; ++round) {
    const bool b_first = (order() & 1) != 0;
    double ta = 0, tb = 0;
    if (b_first) {
      tb = time_once(ready_b, "B");
      ta = time_once(ready_a, "A");
    } else {
      ta = time_once(ready_a, "A");
      tb = time_once(ready_b, "B");
    }
    result.a_seconds.push_back(ta);
    result.b_seconds.push_back(tb);
    result.b_first.push_back(b_first);
    if (options.on_round) options.on_round(round + 1, options.rounds);
  }
  const stats::RatioInterval interval =
      stats::paired_ratio(result.a_seconds, result.b_seconds, options.confidence);
  const stats::ChangeVerdict verdict = stats::judge_change(interval, options.threshold, 0);
  result.ratio = interval.ratio;
  result.low = interval.low;
  result.high = interval.high;
  result.confidence = interval.confidence;
  result.verdict = verdict.direction;
  result.significant = verdict.significant;
  result.detectable = verdict.detectable;
  result.reason = verdict.reason;
  return result;
}

}  // namespace kiln::testing
