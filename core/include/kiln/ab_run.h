// SPDX-License-Identifier: Apache-2.0
// kiln::testing::ab_run: times two functions in one run, alternating A and B in a random order
// per round, and says how much slower or faster B is, with a confidence interval and a
// verdict (docs/evaluator.md "Comparing two timings"). Measured side by side, both see the same
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
  // Rounds measured before the first verdict (each times A once and B once); at least 6, the
  // fewest whose 95% interval can be bounded.
  int32_t rounds = 20;
  // While the verdict is "could not tell", more rounds are taken: the count doubles (20, 40,
  // 80, ...) up to max_rounds, and each of these looks is judged at 1 - (1 - confidence) /
  // looks, so that all of them together keep `confidence` (Bonferroni). max_rounds <= rounds:
  // one look, no more rounds.
  int32_t max_rounds = 160;
  // A change within this fraction (0.05: 5%) is "no change".
  double threshold = 0.05;
  // The confidence of the verdict over all looks (0.95: 95%).
  double confidence = 0.95;
  // The seed of the per-round order; nullopt: a random one (reported in AbResult::seed).
  std::optional<uint64_t> seed;
  // Called after each round with (rounds done, rounds planned so far); may throw to stop (e.g.
  // on Ctrl-C), and the exception propagates.
  std::function<void(int32_t, int32_t)> on_round;
};

// What a side's module is: the file it was loaded from and the SHA-256 of its content.
struct ModuleIdentity {
  std::string file;    // Module source (the path it was loaded from), or "" for one built in code
  std::string sha256;  // 64 hex digits, or "" when there is nothing to hash
  // What was hashed: "file" (the file's bytes as the module was loaded from them, which it
  // keeps as its one artifact, else as read now; as sha256sum prints them), "artifacts" (the
  // module's artifacts, for a module whose file is gone), or "" (nothing: such a module is the
  // same only as itself).
  std::string hashed;
};

// The identity of `module`: the SHA-256 of the file it was loaded from (the bytes the module
// keeps of it, so that a file rebuilt after the load is not taken for it; else read now), else
// of its artifacts (name, role, size and bytes of each).
ModuleIdentity module_identity(const Module& module);

struct AbResult {
  // Seconds per call of each side, per round, and whether B ran first in that round.
  std::vector<double> a_seconds, b_seconds;
  std::vector<bool> b_first;
  // The CPU pressure of each side's slot, per round (the share of it in which some thread of
  // the machine waited for a CPU), or -1 where the machine does not record it.
  std::vector<double> a_pressure, b_pressure;
  uint64_t seed = 0;
  // Each side's module file and content hash.
  ModuleIdentity a_module, b_module;
  // A and B are the same module: the same object, or the same content hash.
  bool same_module = false;
  // When they are the same module, what else differs between the sides ("function", "inputs",
  // "device", "evaluator", "plugins": B's context is another Runtime); empty when nothing does:
  // then the verdict is "same module", since B against A is A against itself.
  std::vector<std::string> differences;
  // The verdicts taken (one per look) and the most looks planned (see AbOptions::max_rounds).
  int32_t looks = 0, planned_looks = 0;
  // The median of the per-round ratios B / A and its interval (the sign test's; low = 0,
  // high = +infinity when unbounded), at the last look's confidence or a little above (the
  // exact distribution is discrete).
  double ratio = 1, low = 0, high = 0, confidence = 0;
  // "slower" or "faster" (the interval excludes 1 and the change is beyond the threshold), "no
  // change" (the whole interval is within the threshold), "could not tell" (neither, after the
  // last look), "same module" (identical sides: see `differences`).
  std::string verdict;
  bool significant = false;  // the interval excludes 1
  // The smallest change these rounds could have called slower or faster: the threshold, or
  // the interval's half-width when wider.
  double detectable = 0;
  std::string reason;  // why the change was not counted or could not be told, else ""
  // For "could not tell": about how many rounds would decide (0 when more would not help).
  size_t rounds_to_decide = 0;
};

// Times A and B in `options.rounds` rounds after one warm-up round of each (not counted): in
// each round both run once, in an order drawn from the seed; then, while the verdict is
// "could not tell", in as many rounds again, up to `options.max_rounds`. Throws ValueError for
// bad options (rounds < 6, threshold < 0, confidence outside (0, 1), a missing context), and
// what loading the functions, copying the arguments or a call throws (the message names the
// side).
AbResult ab_run(const AbSide& a, const AbSide& b, const AbOptions& options = {});

}  // namespace kiln::testing

#endif  // KILN_AB_RUN_H_
