// SPDX-License-Identifier: Apache-2.0
// What one time evaluator a session creates may plan (docs/rpc.md, "Limits"; issue 27 item 4).
// A client picks every option of a remote evaluator, and the options alone can plan weeks of
// work (cooldown_interval_ms and min_repeat_ms up to 2^31-1 ms each, repeated): the server
// refuses options whose plan cannot finish within the session's bounds before it creates the
// evaluator. The evaluator still polls cancellation (kiln/detail/cancellation.h): bounds refuse
// what cannot finish, cancellation ends what the session outlives.
#ifndef KILN_SRC_RPC_EVALUATION_BOUNDS_H_
#define KILN_SRC_RPC_EVALUATION_BOUNDS_H_

#include <cstdint>

#include "kiln/evaluator.h"

namespace kiln::rpc {

// Calls per batch a client may ask for (the starting `number`; min_repeat_ms may grow it).
inline constexpr int64_t kMaxEvaluatorNumber = 1'000'000;
// Repeats a client may ask for (`repeat`, and noise.max_repeats with the noise rule), and
// limit_zero_time_iterations.
inline constexpr int64_t kMaxEvaluatorRepeats = 10'000;
// number × repeats: calls one evaluation plans (100 s at 1 us a call).
inline constexpr int64_t kMaxEvaluatorCalls = 100'000'000;
// The longest plan a session without a timeout may ask for, in seconds.
inline constexpr double kMaxEvaluationPlanWithoutTimeoutS = 3600;

// The session's bounds the options are checked against.
struct EvaluationBounds {
  double session_timeout_s = 0;   // the session's length; 0: none (then the 1-hour cap)
  uint64_t max_memory_bytes = 0;  // the session's memory limit; 0: none
};

// The least wall-clock time, in seconds, `options` plan whatever the function costs: every
// repeat lasts at least min_repeat_ms, and a cooldown of cooldown_interval_ms follows every
// repeats_to_cooldown-th repeat. With the noise rule: its max_repeats such repeats, or its
// timeout_s plus one repeat when that is shorter.
double planned_evaluation_seconds(const TimeEvaluatorOptions& options);

// Throws ValueError naming the option, its value and the bound when `options` are beyond what
// `bounds` allow: number, repeat (noise.max_repeats), limit_zero_time_iterations and
// number x repeats beyond the constants above; cooldown_interval_ms, min_repeat_ms or
// noise.timeout_s alone, or the whole plan (planned_evaluation_seconds), not below the session
// timeout (the 1-hour cap without one); two cache flush buffers beyond the session's memory limit.
// Runs options.validate() first (its ValueError for invalid values).
void check_evaluation_bounds(const TimeEvaluatorOptions& options, const EvaluationBounds& bounds);

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_EVALUATION_BOUNDS_H_
