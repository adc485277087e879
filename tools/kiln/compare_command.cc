// SPDX-License-Identifier: Apache-2.0
// `kiln compare A.json B.json`: did B get slower than A? Per benchmark the change of a statistic
// of the per-repeat times, the interval of B / A that the Mann-Whitney U-test gives
// (kiln/detail/ratio_interval.h), its p-value, and a verdict that weighs the change against the
// noise both files recorded: the CPU pressure of each run (else the machine's load) and, with
// 40 or more repeats on each side, the drift within each run (its repeats in blocks of 5, the
// interval from the blocks' medians). A significant regression beyond that band fails (exit 1)
// so that CI can gate on it; samples that cannot tell a regression from no change exit 4 and
// say what would decide (more repeats, or `kiln ab`). Reads Google Benchmark's JSON (its own
// files, `kiln run --benchmark-out`, BenchmarkResult::to_json) and `kiln run --json` (the same
// document under "benchmark"; a sweep's document holds every point, its failed points as
// entries with error_occurred).
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "kiln/detail/mann_whitney.h"
#include "kiln/detail/noise_verdict.h"
#include "kiln/detail/ratio_interval.h"
#include "kiln/statistics.h"
#include "progress.h"
#include "terminal_text.h"

namespace kiln::tool {
namespace {

// One benchmark of one file: its per-repeat times and the aggregates the file carries (a
// Google Benchmark run with --benchmark_report_aggregates_only has only those).
struct Entry {
  std::vector<double> samples_ns;
  std::optional<double> mean_ns, median_ns;
  // The largest kiln_cpu_pressure of its entries: the share of the run in which a thread of
  // the machine waited for a CPU (BenchmarkResult::to_json writes it; Google Benchmark does not).
  std::optional<double> cpu_pressure;
};

struct Document {
  std::vector<std::string> order;  // names in the file's order
  std::map<std::string, Entry> entries;
  // Benchmarks that failed (error_occurred, e.g. a failed point of a `kiln run` sweep) and
  // their error messages.
  std::map<std::string, std::string> errors;
  // The context's 1-minute load average per CPU (load_avg[0] / num_cpus), when it has both.
  std::optional<double> load_per_cpu;
};

// The time `field` of entry `b` in nanoseconds. A time of 0 or less is refused (UsageError
// naming the entry): no call takes no time, so such a file's timer was broken, and a ratio to
// it would call anything faster or slower.
double to_ns(const nlohmann::json& b, const std::string& field, const std::string& where) {
  if (!b.contains(field) || !b[field].is_number()) {
    throw UsageError(fmt::format("{}: has no numeric \"{}\"", where, field));
  }
  if (!(b[field].get<double>() > 0)) {
    throw UsageError(fmt::format(
        "{} ('{}'): its {} is {}: a time of 0 or less is not a measurement (the timer that "
        "took it is broken); compare refuses it rather than call anything faster or slower",
        where, printable(b["name"].get<std::string>()), field, b[field].dump()));
  }
  const std::string unit = b.value("time_unit", "ns");
  const double scale = unit == "ns"   ? 1.0
                       : unit == "us" ? 1e3
                       : unit == "ms" ? 1e6
                       : unit == "s"  ? 1e9
                                      : 0.0;
  if (scale == 0) {
    throw UsageError(
        fmt::format("{}: unknown time_unit '{}' (expected ns, us, ms or s)", where, unit));
  }
  return b[field].get<double>() * scale;
}

Document read_document(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("{}: cannot read: {}", file, std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{}: not JSON: {}", file, e.what()));
  }
  // `kiln run --json` nests the Google Benchmark document under "benchmark".
  if (doc.is_object() && !doc.contains("benchmarks") && doc.contains("benchmark")) {
    doc = doc["benchmark"];
  }
  if (!doc.is_object() || !doc.contains("benchmarks") || !doc["benchmarks"].is_array()) {
    throw UsageError(fmt::format(
        "{}: no \"benchmarks\" array: expected Google Benchmark JSON (kiln run --benchmark-out, "
        "a benchmark's --benchmark_out) or kiln run --json output",
        file));
  }
  Document out;
  if (doc.contains("context") && doc["context"].is_object()) {
    const auto& context = doc["context"];
    if (context.contains("load_avg") && context["load_avg"].is_array() &&
        !context["load_avg"].empty() && context["load_avg"][0].is_number() &&
        context.contains("num_cpus") && context["num_cpus"].is_number() &&
        context["num_cpus"].get<double>() >= 1) {
      out.load_per_cpu = context["load_avg"][0].get<double>() / context["num_cpus"].get<double>();
    }
  }
  const auto& benchmarks = doc["benchmarks"];
  for (size_t i = 0; i < benchmarks.size(); ++i) {
    const auto& b = benchmarks[i];
    const std::string where = fmt::format("{}: benchmarks[{}]", file, i);
    if (!b.is_object() || !b.contains("name") || !b["name"].is_string()) {
      throw UsageError(fmt::format("{}: not an object with a \"name\"", where));
    }
    const std::string name = b.contains("run_name") && b["run_name"].is_string()
                                 ? b["run_name"].get<std::string>()
                                 : b["name"].get<std::string>();
    if (b.value("error_occurred", false)) {
      out.errors[name] = b.contains("error_message") && b["error_message"].is_string()
                             ? b["error_message"].get<std::string>()
                             : std::string("error_occurred");
      continue;
    }
    if (b.value("skipped", false)) continue;
    const std::string run_type = b.value("run_type", "iteration");
    if (run_type == "iteration") {
      Entry& e = out.entries[name];
      if (e.samples_ns.empty() && !e.mean_ns && !e.median_ns) out.order.push_back(name);
      e.samples_ns.push_back(to_ns(b, "real_time", where));
      if (b.contains("kiln_cpu_pressure") && b["kiln_cpu_pressure"].is_number()) {
        const double pressure = std::clamp(b["kiln_cpu_pressure"].get<double>(), 0.0, 1.0);
        e.cpu_pressure = std::max(e.cpu_pressure.value_or(0.0), pressure);
      }
    } else if (run_type == "aggregate" && b.value("aggregate_unit", "time") == "time") {
      const std::string which = b.value("aggregate_name", "");
      if (which != "mean" && which != "median") continue;
      Entry& e = out.entries[name];
      if (e.samples_ns.empty() && !e.mean_ns && !e.median_ns) out.order.push_back(name);
      (which == "mean" ? e.mean_ns : e.median_ns) = to_ns(b, "real_time", where);
    }
  }
  if (out.order.empty() && out.errors.empty()) {
    throw UsageError(fmt::format("{}: holds no benchmark results", file));
  }
  return out;
}

// The statistic `metric` of an entry, from its samples or else from the file's aggregate.
std::optional<double> metric_of(const Entry& e, const std::string& metric) {
  if (!e.samples_ns.empty()) {
    const stats::Summary s = stats::summarize(e.samples_ns);
    return metric == "mean" ? s.mean : metric == "min" ? s.min : s.median;
  }
  if (metric == "mean") return e.mean_ns;
  if (metric == "median") return e.median_ns;
  return std::nullopt;
}

// How much of a change between two runs made at different times the machine's state could
// explain. A run during which threads waited for a CPU more than kiln run's noise verdict
// allows (NoiseThresholds::max_cpu_pressure, 10% of the run), or whose file records no
// pressure but a load above one runnable thread per CPU, can be slowed by any amount (a
// parallel kernel that shares its CPUs with one busy process takes twice as long): the band is
// unbounded and no change counts. A quieter run allows its pressure. 0 when neither file says.
struct NoiseBand {
  double band = 0;
  std::string source;  // "CPU pressure 31% in B", "load 1.5 per CPU in A", or ""
};
NoiseBand noise_band(const Document& da, const Entry& ea, const Document& db, const Entry& eb) {
  const NoiseThresholds limits;
  const double unbounded = std::numeric_limits<double>::infinity();
  NoiseBand out;
  const auto consider = [&](const Document& d, const Entry& e, const char* which) {
    double band = 0;
    std::string source;
    if (e.cpu_pressure) {
      band = *e.cpu_pressure > limits.max_cpu_pressure ? unbounded : *e.cpu_pressure;
      source = fmt::format("CPU pressure {} in {}", format_percent(*e.cpu_pressure), which);
    } else if (d.load_per_cpu) {
      band = *d.load_per_cpu > limits.max_load_per_core ? unbounded : 0;
      source = fmt::format("load {:.2g} per CPU in {}", *d.load_per_cpu, which);
    }
    if (band > out.band || (out.source.empty() && !source.empty())) out = {band, source};
  };
  consider(da, ea, "A");
  consider(db, eb, "B");
  return out;
}

struct Row {
  std::string name;
  std::optional<double> a, b, change;
  size_t n_a = 0, n_b = 0;
  std::optional<double> p;
  bool exact = false;
  std::optional<stats::RatioInterval> interval;  // of B / A, when both have per-repeat times
  NoiseBand noise;
  // With kMinBlockedRepeats or more repeats on each side: the blocks of each run (kBlockSize
  // repeats each) the interval was computed from, and the drift they showed.
  size_t blocks_a = 0, blocks_b = 0;
  double drift = 0;
  double band = 0;  // the noise band the verdict allowed (+infinity: busy)
  std::optional<stats::ChangeVerdict> judged;
  bool could_not_tell = false;   // counts for exit code kExitCouldNotTell
  size_t repeats_to_decide = 0;  // per side, when more repeats would decide
  std::string verdict;
  std::string note;  // why the test cannot decide, when it cannot
};

// Repeats per block, and the fewest repeats per side for which compare cuts runs into blocks
// and weighs the drift within them: 8 blocks. 4 blocks could bound a 95% interval, but the
// drift they show rests on 3 degrees of freedom; 8 give it 7.
constexpr size_t kBlockSize = 5;
constexpr size_t kMinBlockedRepeats = 8 * kBlockSize;

}  // namespace

int run_compare(const CompareOptions& options) {
  const double threshold = parse_threshold(options.threshold);
  const Document a = read_document(options.baseline);
  const Document b = read_document(options.contender);
  std::vector<Row> rows;
  std::vector<std::string> only_a, only_b;
  // A benchmark with results in A that failed in B (a sweep's point that broke) fails the
  // comparison: B has no time for it at all. One that failed in A only is noted.
  std::vector<std::string> failed_b, failed_a;
  // The names of `from` that `other` has no results for: failed there, or missing.
  const auto unmatched = [](const Document& from, const Document& other,
                            std::vector<std::string>* failed, std::vector<std::string>* only) {
    for (const std::string& name : from.order) {
      if (other.entries.count(name)) continue;
      (other.errors.count(name) ? failed : only)->push_back(name);
    }
  };
  unmatched(a, b, &failed_b, &only_a);
  unmatched(b, a, &failed_a, &only_b);
  if (only_a.size() == a.order.size() && failed_b.empty()) {
    // What a file holds, for the message: its benchmarks, or that it has none (and how many
    // failed, for a sweep whose every point failed).
    auto holds = [](const auto& file) {
      std::string text = file.order.empty()
                             ? std::string("no results")
                             : printable(fmt::format("{}", fmt::join(file.order, ", ")));
      if (!file.errors.empty()) text += fmt::format(" ({} failed)", file.errors.size());
      return text;
    };
    throw UsageError(fmt::format("no benchmark is in both files: {} has {}; {} has {}",
                                 options.baseline.string(), holds(a), options.contender.string(),
                                 holds(b)));
  }
  const std::string pct = fmt::format("{:g}%", threshold * 100);
  for (const std::string& name : a.order) {
    if (!b.entries.count(name)) continue;
    const Entry& ea = a.entries.at(name);
    const Entry& eb = b.entries.at(name);
    Row r;
    r.name = name;
    r.a = metric_of(ea, options.metric);
    r.b = metric_of(eb, options.metric);
    r.n_a = ea.samples_ns.size();
    r.n_b = eb.samples_ns.size();
    if (r.a && r.b && *r.a > 0) r.change = (*r.b - *r.a) / *r.a;
    r.noise = noise_band(a, ea, b, eb);
    r.band = r.noise.band;
    // Every time is > 0 (read_document refuses the others).
    if (r.n_a > 0 && r.n_b > 0 && r.change) {
      // Enough repeats: each run's blocks, so that the drift within a run widens the interval
      // and the band instead of being averaged away. A busy machine (pressure above the noise
      // verdict's threshold) is then judged by what its blocks show; with fewer repeats it can
      // not be judged at all.
      const bool blocked = r.n_a >= kMinBlockedRepeats && r.n_b >= kMinBlockedRepeats;
      const std::vector<double>* xa = &ea.samples_ns;
      const std::vector<double>* xb = &eb.samples_ns;
      stats::Blocks ba, bb;
      double band = r.noise.band;
      if (blocked) {
        ba = stats::block_medians(ea.samples_ns, kBlockSize);
        bb = stats::block_medians(eb.samples_ns, kBlockSize);
        xa = &ba.medians;
        xb = &bb.medians;
        r.blocks_a = ba.medians.size();
        r.blocks_b = bb.medians.size();
        r.drift = std::max(ba.drift, bb.drift);
        band = std::isfinite(band) ? std::max(band, r.drift) : r.drift;
      }
      const stats::UTestResult u = stats::mann_whitney_u(*xa, *xb);
      r.p = u.p_value;
      r.exact = u.exact;
      r.interval = stats::unpaired_ratio(*xa, *xb, 1 - options.alpha);
      // The verdict is about the metric compared; its interval is the U-test's.
      stats::RatioInterval judged = *r.interval;
      judged.ratio = 1 + *r.change;
      r.band = band;
      r.judged = stats::judge_change(judged, threshold, band);
      r.verdict = r.judged->direction;
      if (r.interval->bounded()) {
        r.verdict += r.judged->significant ? ", significant" : ", not significant";
      }
      r.could_not_tell = r.judged->direction == "could not tell";
      std::string source = r.noise.source;
      if (blocked) {
        std::string drift = fmt::format("drift {:.1f}% within the runs", r.drift * 100);
        if (!source.empty()) drift += "; " + source;
        source = std::move(drift);
      }
      if (!r.interval->bounded()) {
        r.note = fmt::format(
            "could not tell: {} and {} repeats cannot bound a {:g}% interval (the smallest p is "
            "{:.3g}); time at least 4 repeats on each side",
            r.n_a, r.n_b, (1 - options.alpha) * 100, stats::min_p_value(r.n_a, r.n_b));
        r.repeats_to_decide = 4;
      } else if (r.could_not_tell && !blocked && !std::isfinite(r.noise.band)) {
        r.note = fmt::format(
            "could not tell: the machine was too busy ({}) for {} and {} repeats: with {} or "
            "more repeats on each side compare weighs the drift within each run; or time both "
            "in one run with kiln ab",
            r.noise.source, r.n_a, r.n_b, kMinBlockedRepeats);
        r.repeats_to_decide = kMinBlockedRepeats;
      } else if (r.could_not_tell) {
        const size_t per_side = r.judged->samples_to_decide * (blocked ? kBlockSize : 1);
        r.repeats_to_decide = per_side;
        r.note = fmt::format("could not tell: {}{}; ", r.judged->reason,
                             source.empty() ? "" : fmt::format(" ({})", source));
        r.note += per_side > 0 ? fmt::format(
                                     "about {} repeats on each side would decide it, or time "
                                     "both in one run with kiln ab",
                                     std::max<size_t>(per_side, blocked ? kMinBlockedRepeats : 4))
                               : "more repeats would not decide it; time both in one run with "
                                 "kiln ab";
      } else if (!r.judged->reason.empty()) {
        r.note = r.judged->reason + (source.empty() ? "" : fmt::format(" ({})", source));
      }
    } else if (r.change) {
      const std::string direction = *r.change > threshold    ? "slower"
                                    : *r.change < -threshold ? "faster"
                                                             : "no change";
      r.verdict = direction + ", untested";
      // A change beyond the threshold that cannot be tested is one the files could not tell.
      r.could_not_tell = direction == "slower";
      r.note =
          "no per-repeat times in both files, so no U-test (a slowdown here is could not tell, "
          "never a regression)";
    } else {
      r.verdict = fmt::format("no {} in both files", options.metric);
    }
    rows.push_back(r);
  }
  std::vector<std::string> regressions, undecided;
  for (const Row& r : rows) {
    if (r.judged && r.judged->direction == "slower") regressions.push_back(r.name);
    if (r.could_not_tell) undecided.push_back(r.name);
  }

  if (options.json) {
    nlohmann::json out;
    out["baseline"] = options.baseline.string();
    out["contender"] = options.contender.string();
    out["metric"] = options.metric;
    out["threshold"] = threshold;
    out["alpha"] = options.alpha;
    out["benchmarks"] = nlohmann::json::array();
    auto opt = [](const std::optional<double>& v) {
      return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
    };
    for (const Row& r : rows) {
      out["benchmarks"].push_back(
          {{"name", r.name},
           {"baseline_ns", opt(r.a)},
           {"contender_ns", opt(r.b)},
           {"change", opt(r.change)},
           {"repeats", {r.n_a, r.n_b}},
           {"p_value", opt(r.p)},
           {"p_exact", r.exact},
           {"ratio_low", r.interval && r.interval->bounded() ? nlohmann::json(r.interval->low)
                                                             : nlohmann::json(nullptr)},
           {"ratio_high", r.interval && r.interval->bounded() ? nlohmann::json(r.interval->high)
                                                              : nlohmann::json(nullptr)},
           {"noise_band", std::isfinite(r.band) ? nlohmann::json(r.band) : nlohmann::json(nullptr)},
           {"noise_source", r.noise.source},
           {"blocks",
            r.blocks_a > 0 ? nlohmann::json({r.blocks_a, r.blocks_b}) : nlohmann::json(nullptr)},
           {"drift", r.blocks_a > 0 ? nlohmann::json(r.drift) : nlohmann::json(nullptr)},
           {"could_not_tell", r.could_not_tell},
           {"repeats_to_decide", r.repeats_to_decide},
           {"detectable", r.judged && std::isfinite(r.judged->detectable)
                              ? nlohmann::json(r.judged->detectable)
                              : nlohmann::json(nullptr)},
           {"direction", r.judged ? r.judged->direction : ""},
           {"significant", r.judged && r.judged->significant},
           {"verdict", r.verdict},
           {"note", r.note}});
    }
    out["only_in_baseline"] = only_a;
    out["only_in_contender"] = only_b;
    const auto failed_json = [](const std::vector<std::string>& names, const Document& where) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& n : names) list.push_back({{"name", n}, {"error", where.errors.at(n)}});
      return list;
    };
    out["failed_in_contender"] = failed_json(failed_b, b);
    out["failed_in_baseline"] = failed_json(failed_a, a);
    out["regressions"] = regressions;
    out["could_not_tell"] = undecided;
    std::cout << out.dump(2) << "\n";
  } else {
    // Names and errors come from the files: their control characters are written out, never
    // sent to the terminal (an ANSI escape in a name would rewrite the report).
    const auto names = [](const std::vector<std::string>& list) {
      return printable(fmt::format("{}", fmt::join(list, ", ")));
    };
    size_t width = 9;
    for (const Row& r : rows) width = std::max(width, printable(r.name).size());
    // B / A's interval, the noise band and the smallest change the data could call.
    const auto interval_text = [](const Row& r) {
      if (!r.interval) return std::string("-");
      if (!r.interval->bounded()) return std::string("unbounded");
      return fmt::format("{:.3f}-{:.3f}", r.interval->low, r.interval->high);
    };
    const auto detectable_text = [](const Row& r) {
      if (!r.judged) return std::string("-");
      if (!std::isfinite(r.judged->detectable)) return std::string("none");
      return fmt::format("{:.1f}%", r.judged->detectable * 100);
    };
    const std::string ci = fmt::format("{:g}% B/A", (1 - options.alpha) * 100);
    std::cout << fmt::format("{:<{}}  {:>11}  {:>11}  {:>8}  {:>13}  {:>8}  {:>6}  {:>10}  {}\n",
                             "benchmark", width, "A " + options.metric, "B " + options.metric,
                             "change", ci, "p-value", "noise", "detectable", "verdict");
    for (const Row& r : rows) {
      std::cout << fmt::format("{:<{}}  {:>11}  {:>11}  {:>8}  {:>13}  {:>8}  {:>6}  {:>10}  {}\n",
                               printable(r.name), width, r.a ? format_time_ns(*r.a) : "-",
                               r.b ? format_time_ns(*r.b) : "-",
                               r.change ? fmt::format("{:+.1f}%", *r.change * 100) : "-",
                               interval_text(r), r.p ? fmt::format("{:.3g}", *r.p) : "-",
                               r.noise.source.empty() && r.blocks_a == 0 ? "-"
                               : std::isfinite(r.band) ? fmt::format("{:.1f}%", r.band * 100)
                                                       : "busy",
                               detectable_text(r), r.verdict);
    }
    for (const Row& r : rows) {
      if (!r.note.empty()) std::cout << fmt::format("note: {}: {}\n", printable(r.name), r.note);
    }
    for (const auto& n : only_a) std::cout << fmt::format("only in A: {}\n", printable(n));
    for (const auto& n : only_b) std::cout << fmt::format("only in B: {}\n", printable(n));
    for (const auto& n : failed_a) {
      std::cout << fmt::format("failed in A: {}: {}\n", printable(n), printable(a.errors.at(n)));
    }
    for (const auto& n : failed_b) {
      std::cout << fmt::format("failed in B: {}: {}\n", printable(n), printable(b.errors.at(n)));
    }
    std::cout << fmt::format(
        "{} benchmark{} compared by {} (threshold {} or the noise band, two-sided Mann-Whitney "
        "U-test, alpha {:g}): ",
        rows.size(), rows.size() == 1 ? "" : "s", options.metric, pct, options.alpha);
    if (regressions.empty() && undecided.empty()) {
      std::cout << "no significant regression\n";
      // Say so when the files, though decided, could not see much.
      double widest = 0;
      for (const Row& r : rows) {
        if (r.judged) widest = std::max(widest, r.judged->detectable);
      }
      if (widest > 2 * threshold) {
        std::cout << fmt::format(
            "these files cannot tell a change smaller than {:.1f}% from noise; time both sides "
            "in one run with kiln ab for a tighter answer\n",
            widest * 100);
      }
    } else if (regressions.empty()) {
      std::cout << fmt::format(
          "could not tell for {} benchmark{}: {} (the notes say what would decide); no "
          "significant regression among the others\n",
          undecided.size(), undecided.size() == 1 ? "" : "s", names(undecided));
    } else {
      std::cout << fmt::format("{} significant regression{}: {}\n", regressions.size(),
                               regressions.size() == 1 ? "" : "s", names(regressions));
      if (!undecided.empty()) {
        std::cout << fmt::format("could not tell for {} more: {}\n", undecided.size(),
                                 names(undecided));
      }
    }
    if (!failed_b.empty()) {
      std::cout << fmt::format("{} benchmark{} of A failed in B: {}\n", failed_b.size(),
                               failed_b.size() == 1 ? "" : "s", names(failed_b));
    }
  }
  if (!regressions.empty() || !failed_b.empty()) return kExitCheckFailed;
  return undecided.empty() ? kExitOk : kExitCouldNotTell;
}

}  // namespace kiln::tool
