// SPDX-License-Identifier: Apache-2.0
// `kiln ab A.yaml B.yaml`: two run configs measured in one run, A and B alternating in a random
// order per round, and the ratio B / A with its confidence interval and a verdict
// (kiln::testing::ab_run, docs/cli.md "kiln ab"). Each side is first run and checked once as
// `kiln run` would (its outputs against what the config expects, its timer against the host
// clock): a side that computes wrong numbers has no speed worth comparing.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "cli_checks.h"
#include "commands.h"
#include "kiln/ab_run.h"
#include "kiln/statistics.h"
#include "run_command.h"
#include "terminal_text.h"

namespace kiln::tool {
namespace {

// One side: its runtime (B's may load another plugin folder), its config and its first run.
struct Side {
  const char* name;
  Runtime runtime;
  std::optional<Prepared> prepared;
};

run::RunSpec read_single_config(const Runtime& runtime, const std::filesystem::path& path,
                                const char* name) {
  run::SweepSpec sweep;
  try {
    sweep = run::parse_sweep_config(path, runtime.device_types());
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (sweep.is_sweep()) {
    throw UsageError(fmt::format(
        "{}: {} is a sweep; kiln ab compares two single runs (compare sweeps point by point with "
        "kiln run --benchmark-out and kiln compare)",
        path.string(), name));
  }
  run::RunSpec spec = std::move(*sweep.points[0].spec);
  if (spec.remote) {
    throw UsageError(fmt::format(
        "{}: {} has a remote: section; kiln ab measures both sides in this process, side by side",
        path.string(), name));
  }
  return spec;
}

// Runs and checks `side` once, as `kiln run` does; a failed check ends the comparison (exit 1).
bool run_and_check(Side& side, Progress& progress) {
  const Prepared& p = *side.prepared;
  const Outcome o = execute(side.runtime, p, progress);
  if (o.check.ok) return true;
  std::cerr << fmt::format("kiln ab: {} ({}) computes wrong results; not compared:\n{}\n",
                           side.name, p.spec.file.string(), o.check.summary);
  return false;
}

nlohmann::json side_json(const Side& side, const std::vector<double>& seconds,
                         const std::vector<double>& pressure, const testing::ModuleIdentity& id) {
  const Prepared& p = *side.prepared;
  nlohmann::json pressures = nlohmann::json::array();
  for (double v : pressure) pressures.push_back(v >= 0 ? nlohmann::json(v) : nlohmann::json());
  return {{"config", p.spec.file.string()},
          {"module", p.spec.module.string()},
          {"module_sha256", id.sha256},
          {"function", p.function},
          {"device", side.runtime.device_str(p.device)},
          {"seconds", seconds},
          {"cpu_pressure", pressures},
          {"median_s", stats::summarize(seconds).median}};
}

// "inputs, plugins": what two sides of one module differ in.
std::string differences_text(const std::vector<std::string>& differences) {
  return fmt::format("{}", fmt::join(differences, ", "));
}

// The shell word for `path` in a suggested command (quoted when it holds a space or quote).
std::string shell_word(const std::string& path) {
  if (path.find_first_of(" '\"$`\\") == std::string::npos) return path;
  std::string out = "'";
  for (char c : path) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

int run_ab(const AbCommandOptions& options, const GlobalOptions& global) {
  const double threshold = parse_threshold(options.threshold);
  Side a{"A", Runtime(runtime_options(global)), std::nullopt};
  GlobalOptions global_b = global;
  if (!options.plugin_path_b.empty()) global_b.plugin_paths = options.plugin_path_b;
  Side b{"B", options.plugin_path_b.empty() ? a.runtime : Runtime(runtime_options(global_b)),
         std::nullopt};
  for (Side* side : {&a, &b}) {
    const auto& path = side == &a ? options.config_a : options.config_b;
    run::RunSpec spec = read_single_config(side->runtime, path, side->name);
    std::optional<Device> device;
    if (options.device) {
      try {
        device = side->runtime.parse_device(*options.device);
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
    }
    side->prepared.emplace(prepare(side->runtime, std::move(spec), device));
  }
  Progress progress(Progress::choose(options.progress, options.json, stderr), a.prepared->function,
                    stderr);
  for (Side* side : {&a, &b}) {
    if (!run_and_check(*side, progress)) return kExitCheckFailed;
  }

  testing::AbOptions ab;
  ab.rounds = options.rounds;
  ab.max_rounds = options.max_rounds;
  ab.threshold = threshold;
  ab.confidence = 1 - options.alpha;
  ab.seed = options.seed;
  if (progress.enabled()) {
    ab.on_round = [&progress](int32_t done, int32_t total) { progress.repeat(done, total, 0); };
  }
  const auto side_of = [](const Side& s) {
    const Prepared& p = *s.prepared;
    testing::AbSide out;
    out.module = p.module;
    out.function = p.function;
    out.device = p.device;
    out.args = p.inputs;
    out.evaluator_config = p.evaluator.config;
    out.evaluator = p.evaluator.options;
    out.context = &s.runtime;
    return out;
  };
  testing::AbResult r;
  try {
    r = testing::ab_run(side_of(a), side_of(b), ab);
  } catch (const ValueError& e) {
    throw UsageError(e.what());
  }
  progress.finish();

  const std::string interval =
      std::isfinite(r.high) ? fmt::format("[{:.3f}, {:.3f}]", r.low, r.high) : "[unbounded]";
  const int32_t rounds = static_cast<int32_t>(r.a_seconds.size());
  // For "could not tell": the command that would decide, when more rounds would.
  std::string suggestion;
  if (r.verdict == "could not tell") {
    if (r.rounds_to_decide > 0) {
      suggestion =
          fmt::format("about {} rounds would decide it: kiln ab --max-rounds {} {} {}",
                      r.rounds_to_decide, r.rounds_to_decide, shell_word(options.config_a.string()),
                      shell_word(options.config_b.string()));
    } else {
      suggestion =
          "more rounds would not decide it: the change sits on the threshold (set --threshold "
          "to the change that matters)";
    }
  }
  if (options.json) {
    nlohmann::json out;
    out["a"] = side_json(a, r.a_seconds, r.a_pressure, r.a_module);
    out["b"] = side_json(b, r.b_seconds, r.b_pressure, r.b_module);
    out["same_module"] = r.same_module;
    out["differences"] = r.differences;
    out["rounds"] = rounds;
    out["looks"] = r.looks;
    out["planned_looks"] = r.planned_looks;
    out["seed"] = r.seed;
    out["b_first"] = r.b_first;
    out["ratio"] = r.ratio;
    out["low"] = r.low;
    out["high"] = std::isfinite(r.high) ? nlohmann::json(r.high) : nlohmann::json(nullptr);
    out["confidence"] = r.confidence;
    out["threshold"] = threshold;
    out["verdict"] = r.verdict;
    out["significant"] = r.significant;
    out["detectable"] =
        std::isfinite(r.detectable) ? nlohmann::json(r.detectable) : nlohmann::json(nullptr);
    out["reason"] = r.reason;
    out["rounds_to_decide"] = r.rounds_to_decide;
    out["suggestion"] = suggestion;
    std::cout << out.dump(2) << "\n";
  } else {
    for (const Side* side : {&a, &b}) {
      const Prepared& p = *side->prepared;
      const auto& seconds = side == &a ? r.a_seconds : r.b_seconds;
      const testing::ModuleIdentity& id = side == &a ? r.a_module : r.b_module;
      // A module's entry name and the paths are not ours: control characters are written out.
      std::cout << fmt::format("{}: {}  {} on {}  median {}\n", side->name,
                               printable(p.spec.file.string()), printable(p.function),
                               side->runtime.device_str(p.device),
                               format_time_ns(stats::summarize(seconds).median * 1e9));
      std::cout << fmt::format("   module {}  sha256 {}\n", printable(p.spec.module.string()),
                               id.sha256.empty() ? "-" : id.sha256);
    }
    if (r.same_module && !r.differences.empty()) {
      std::cout << fmt::format("A and B are the same module (sha256 {}); the sides differ in: {}\n",
                               r.a_module.sha256.empty() ? "not hashed" : r.a_module.sha256,
                               printable(differences_text(r.differences)));
    }
    std::cout << fmt::format("{} rounds, A and B in random order per round (seed {})", rounds,
                             r.seed);
    if (r.looks > 1) {
      std::cout << fmt::format(
          "; {} looks: more rounds were taken while the verdict was could not tell", r.looks);
    }
    std::cout << "\n";
    std::string confidence = fmt::format("{:.1f}% interval", r.confidence * 100);
    if (r.planned_looks > 1) {
      confidence +=
          fmt::format(", {:g}% over up to {} looks", (1 - options.alpha) * 100, r.planned_looks);
    }
    std::cout << fmt::format("B/A {:.3f} {} ({}): {:+.1f}%\n", r.ratio, interval, confidence,
                             (r.ratio - 1) * 100);
    std::string verdict = r.verdict;
    if (r.verdict == "same module") {
      std::cout << r.reason << "\n";  // its own line: what the ratio above is
    } else if (!r.reason.empty()) {
      verdict += fmt::format(" ({})", r.reason);
    }
    std::cout << fmt::format("verdict: {} (threshold {:g}%); ", verdict, threshold * 100);
    if (std::isfinite(r.detectable)) {
      std::cout << fmt::format("these rounds could detect a change of {:.1f}% or more\n",
                               r.detectable * 100);
    } else {
      std::cout << "too few rounds to detect any change\n";
    }
    if (!suggestion.empty()) std::cout << suggestion << "\n";
  }
  if (r.verdict == "same module") return kExitSameModule;
  if (r.verdict == "could not tell") return kExitCouldNotTell;
  return r.verdict == "slower" ? kExitCheckFailed : kExitOk;
}

}  // namespace kiln::tool
