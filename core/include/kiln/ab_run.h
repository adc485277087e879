// SPDX-License-Identifier: Apache-2.0
// kiln::testing::ab_run: times two functions in one run, alternating A and B in a random order
// per round, and says how much slower or faster B is, with a confidence interval and a
// verdict (docs/evaluator.md "Interleaved A/B"). Measured side by side, both see the same
// machine: a load that comes and goes, a clock that drifts, a neighbour's job, cancel out of
// the per-round ratios instead of reading as a change, as they do between two runs made at
// different times.
#ifndef KILN_AB_RUN_H_
#define KILN_AB_RUN_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/any.h"
#include "kiln/device.h"
#include "kiln/device_context.h"
#include "kiln/evaluator.h"
#include "kiln/module.h"

namespace kiln::testing {

// One side of the comparison: a function of a loaded module and what it is called with.
struct AbSide {
  Module module;
  std::string function;  // empty: the module's entry function
  Device device;
  // Tensors are copied to `device` once, before the first round; other values pass as they are.
  std::vector<Any> args;
  // How one round times it, as local_run would: the runner's settings (`number`,
  // `min_repeat_ms`, cache flushing; nullopt: EvaluatorConfig's defaults) over `evaluator`'s
  // other options. `repeat` and the noise stopping rule are ignored: each round is one repeat.
  std::optional<EvaluatorConfig> evaluator_config;
  TimeEvaluatorOptions evaluator;
  // The context whose backends run it (a Runtime: A and B may come from two Runtimes, e.g.
  // two builds of one plugin). Must outlive the call.
  const DeviceContext* context = nullptr;
};

struct AbOptions {
  // Rounds measured (each times A once and B once); at least 6, the fewest whose 95% interval
  // can be bounded.
  int32_t rounds = 20;
  // A change within this fraction (0.05: 5%) is "no change".
  double threshold = 0.05;
  // The confidence of the interval (0.95: 95%).
  double confidence = 0.95;
  // The seed of the per-round order; nullopt: a random one (reported in AbResult::seed).
  std::optional<uint64_t> seed;
  // Called after each round with (rounds done, rounds); may throw to stop (e.g. on Ctrl-C),
  // and the exception propagates.
  std::function<void(int32_t, int32_t)> on_round;
};

struct AbResult {
  // Seconds per call of each side, per round, and whether B ran first in that round.
  std::vector<double> a_seconds, b_seconds;
  std::vector<bool> b_first;
  uint64_t seed = 0;
  // The median of the per-round ratios B / A and its interval (the sign test's; low = 0,
  // high = +infinity when unbounded), at `confidence` or a little above (the exact
  // distribution is discrete).
  double ratio = 1, low = 0, high = 0, confidence = 0;
  // "slower" or "faster" (beyond the threshold, and the interval excludes 1), "no change"
  // (within the threshold), "within noise" (beyond it, but the interval includes 1).
  std::string verdict;
  bool significant = false;  // the interval excludes 1
  // The smallest change these rounds could have called slower or faster: the threshold, or
  // the interval's half-width when wider.
  double detectable = 0;
  std::string reason;  // why a change beyond the threshold was not counted, else ""
};

// Times A and B in `options.rounds` rounds after one warm-up round of each (not counted): in
// each round both run once, in an order drawn from the seed. Throws ValueError for bad
// options (rounds < 6, threshold < 0, confidence outside (0, 1), a missing context), and what
// loading the functions, copying the arguments or a call throws (the message names the side).
AbResult ab_run(const AbSide& a, const AbSide& b, const AbOptions& options = {});

}  // namespace kiln::testing

#endif  // KILN_AB_RUN_H_
