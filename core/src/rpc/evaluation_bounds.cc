// SPDX-License-Identifier: Apache-2.0
#include "rpc/evaluation_bounds.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kiln/error.h"

namespace kiln::rpc {

namespace {

[[noreturn]] void refuse(const std::string& why) {
  throw ValueError(fmt::format("time_evaluator: {}", why));
}

}  // namespace

double planned_evaluation_seconds(const TimeEvaluatorOptions& o) {
  // In doubles: int32 options multiplied may pass any integer type's range.
  const double repeats = o.noise.enabled ? o.noise.max_repeats : o.repeat;
  const double every = std::max(1, o.repeats_to_cooldown);
  const double cooldowns = o.cooldown_interval_ms > 0 ? std::ceil(repeats / every) : 0;
  double ms = repeats * o.min_repeat_ms + cooldowns * o.cooldown_interval_ms;
  if (o.noise.enabled) {
    // The noise rule stops at its timeout, looked at after each repeat.
    ms = std::min(ms, o.noise.timeout_s * 1000 + o.min_repeat_ms + o.cooldown_interval_ms);
  }
  return std::max(ms, 0.0) / 1000;
}

void check_evaluation_bounds(const TimeEvaluatorOptions& o, const EvaluationBounds& bounds) {
  o.validate();  // its errors first: the arithmetic below assumes valid options
  if (o.number > kMaxEvaluatorNumber) {
    refuse(fmt::format("number {} exceeds the server's bound of {} calls per batch", o.number,
                       kMaxEvaluatorNumber));
  }
  const char* repeats_name = o.noise.enabled ? "noise.max_repeats" : "repeat";
  const int64_t repeats = o.noise.enabled ? o.noise.max_repeats : o.repeat;
  if (repeats > kMaxEvaluatorRepeats) {
    refuse(fmt::format("{} {} exceeds the server's bound of {} repeats", repeats_name, repeats,
                       kMaxEvaluatorRepeats));
  }
  // Batches that read 0 ns are measured again up to this many times per repeat.
  if (o.limit_zero_time_iterations > kMaxEvaluatorRepeats) {
    refuse(fmt::format("limit_zero_time_iterations {} exceeds the server's bound of {}",
                       o.limit_zero_time_iterations, kMaxEvaluatorRepeats));
  }
  if (int64_t{o.number} * repeats > kMaxEvaluatorCalls) {
    refuse(fmt::format("number {} x {} {} = {} calls exceeds the server's bound of {} calls",
                       o.number, repeats_name, repeats, int64_t{o.number} * repeats,
                       kMaxEvaluatorCalls));
  }

  const bool timed = bounds.session_timeout_s > 0;
  const double limit_s = timed ? bounds.session_timeout_s : kMaxEvaluationPlanWithoutTimeoutS;
  const std::string limit =
      timed ? fmt::format("the session timeout of {} s", bounds.session_timeout_s)
            : fmt::format("the server's bound of {} s for a session without a timeout",
                          kMaxEvaluationPlanWithoutTimeoutS);
  // `seconds` (what option `name` = `value` alone takes) must leave time within the limit.
  const auto below_limit = [&](const char* name, const std::string& value, double seconds) {
    if (!(seconds < limit_s)) {
      refuse(fmt::format("{} {} is not below {}: the evaluation could not finish", name, value,
                         limit));
    }
  };
  below_limit("cooldown_interval_ms", std::to_string(o.cooldown_interval_ms),
              o.cooldown_interval_ms / 1000.0);
  below_limit("min_repeat_ms", std::to_string(o.min_repeat_ms), o.min_repeat_ms / 1000.0);
  if (o.noise.enabled) {
    below_limit("noise.timeout_s", fmt::format("{}", o.noise.timeout_s), o.noise.timeout_s);
  }
  const double plan = planned_evaluation_seconds(o);
  if (!(plan < limit_s)) {
    refuse(fmt::format(
        "the options plan at least {:.1f} s ({} {} x min_repeat_ms {}, plus a cooldown of "
        "cooldown_interval_ms {} after every repeats_to_cooldown {} repeats{}), not below {}: "
        "the evaluation could not finish",
        plan, repeats_name, repeats, o.min_repeat_ms, o.cooldown_interval_ms, o.repeats_to_cooldown,
        o.noise.enabled ? fmt::format("; or noise.timeout_s {} plus one repeat", o.noise.timeout_s)
                        : std::string(),
        limit));
  }

  // The two flush buffers are allocated for each evaluation, beside what the session holds.
  const uint64_t memory = bounds.max_memory_bytes;
  if (memory > 0 && o.cache_flush_bytes > 0 &&
      static_cast<uint64_t>(o.cache_flush_bytes) > memory / 2) {
    refuse(fmt::format(
        "cache_flush_bytes {} needs two buffers of that size, beyond the session's memory limit "
        "of {} bytes (the server's --max-session-memory)",
        o.cache_flush_bytes, memory));
  }
}

}  // namespace kiln::rpc
