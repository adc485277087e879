// `kiln compare A.json B.json`: did B get slower than A? Per benchmark the change of a statistic
// of the per-repeat times, a two-sided Mann-Whitney U-test on those times
// (kiln/detail/mann_whitney.h) and a verdict; a regression beyond the threshold that is
// significant fails (exit 1) so that CI can gate on it. Reads Google Benchmark's JSON (its own
// files, `kiln run --benchmark-out`, BenchmarkResult::to_json) and `kiln run --json` (the same
// document under "benchmark"; a sweep's document holds every point, its failed points as entries
// with error_occurred).
#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "kiln/detail/mann_whitney.h"
#include "kiln/statistics.h"
#include "progress.h"

namespace kiln::tool {
namespace {

// One benchmark of one file: its per-repeat times and the aggregates the file carries (a
// Google Benchmark run with --benchmark_report_aggregates_only has only those).
struct Entry {
  std::vector<double> samples_ns;
  std::optional<double> mean_ns, median_ns;
};

struct Document {
  std::vector<std::string> order;  // names in the file's order
  std::map<std::string, Entry> entries;
  // Benchmarks that failed (error_occurred, e.g. a failed point of a `kiln run` sweep) and
  // their error messages.
  std::map<std::string, std::string> errors;
};

double to_ns(const nlohmann::json& b, const std::string& field, const std::string& where) {
  if (!b.contains(field) || !b[field].is_number()) {
    throw UsageError(fmt::format("{}: has no numeric \"{}\"", where, field));
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

// "5%", "5" and "2.5 %" all mean that many percent; returns the fraction.
double parse_threshold(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '%' || t.back() == ' ')) t.pop_back();
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (t.empty() || used != t.size() || !(v >= 0) || !std::isfinite(v)) {
    throw UsageError(
        fmt::format("--threshold: expected a percentage >= 0 such as 5% or 2.5, got '{}'", text));
  }
  return v / 100;
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

struct Row {
  std::string name;
  std::optional<double> a, b, change;
  size_t n_a = 0, n_b = 0;
  std::optional<double> p;
  bool exact = false;
  std::string direction;  // "faster", "slower", "no change" or "" (no metric)
  bool significant = false;
  std::string verdict;
  std::string note;  // why the test cannot decide, when it cannot
};

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
      std::string text = file.order.empty() ? std::string("no results")
                                            : fmt::format("{}", fmt::join(file.order, ", "));
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
    if (r.n_a > 0 && r.n_b > 0) {
      const stats::UTestResult u = stats::mann_whitney_u(ea.samples_ns, eb.samples_ns);
      r.p = u.p_value;
      r.exact = u.exact;
      r.significant = u.p_value < options.alpha;
      const double floor = stats::min_p_value(r.n_a, r.n_b);
      if (!(floor < options.alpha)) {
        r.note = fmt::format(
            "{} and {} repeats cannot reach p < {:g} (the smallest p is {:.3g}); time at least "
            "4 repeats on each side",
            r.n_a, r.n_b, options.alpha, floor);
      }
    } else {
      r.note = "no per-repeat times in both files, so no U-test (a regression here never fails)";
    }
    if (r.change) {
      r.direction = *r.change > threshold    ? "slower"
                    : *r.change < -threshold ? "faster"
                                             : "no change";
      r.verdict = r.direction +
                  (r.p ? (r.significant ? ", significant" : ", not significant") : ", untested");
    } else {
      r.verdict = fmt::format("no {} in both files", options.metric);
    }
    rows.push_back(r);
  }
  std::vector<std::string> regressions;
  for (const Row& r : rows) {
    if (r.direction == "slower" && r.significant) regressions.push_back(r.name);
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
      out["benchmarks"].push_back({{"name", r.name},
                                   {"baseline_ns", opt(r.a)},
                                   {"contender_ns", opt(r.b)},
                                   {"change", opt(r.change)},
                                   {"repeats", {r.n_a, r.n_b}},
                                   {"p_value", opt(r.p)},
                                   {"p_exact", r.exact},
                                   {"direction", r.direction},
                                   {"significant", r.significant},
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
    std::cout << out.dump(2) << "\n";
  } else {
    size_t width = 9;
    for (const Row& r : rows) width = std::max(width, r.name.size());
    std::cout << fmt::format("{:<{}}  {:>11}  {:>11}  {:>8}  {:>8}  {}\n", "benchmark", width,
                             "A " + options.metric, "B " + options.metric, "change", "p-value",
                             "verdict");
    for (const Row& r : rows) {
      std::cout << fmt::format("{:<{}}  {:>11}  {:>11}  {:>8}  {:>8}  {}\n", r.name, width,
                               r.a ? format_time_ns(*r.a) : "-", r.b ? format_time_ns(*r.b) : "-",
                               r.change ? fmt::format("{:+.1f}%", *r.change * 100) : "-",
                               r.p ? fmt::format("{:.3g}", *r.p) : "-", r.verdict);
    }
    for (const Row& r : rows) {
      if (!r.note.empty()) std::cout << fmt::format("note: {}: {}\n", r.name, r.note);
    }
    for (const auto& n : only_a) std::cout << fmt::format("only in A: {}\n", n);
    for (const auto& n : only_b) std::cout << fmt::format("only in B: {}\n", n);
    for (const auto& n : failed_a) {
      std::cout << fmt::format("failed in A: {}: {}\n", n, a.errors.at(n));
    }
    for (const auto& n : failed_b) {
      std::cout << fmt::format("failed in B: {}: {}\n", n, b.errors.at(n));
    }
    std::cout << fmt::format(
        "{} benchmark{} compared by {} (threshold {}, two-sided Mann-Whitney U-test, alpha "
        "{:g}): ",
        rows.size(), rows.size() == 1 ? "" : "s", options.metric, pct, options.alpha);
    if (regressions.empty()) {
      std::cout << "no significant regression\n";
    } else {
      std::cout << fmt::format("{} significant regression{}: {}\n", regressions.size(),
                               regressions.size() == 1 ? "" : "s", fmt::join(regressions, ", "));
    }
    if (!failed_b.empty()) {
      std::cout << fmt::format("{} benchmark{} of A failed in B: {}\n", failed_b.size(),
                               failed_b.size() == 1 ? "" : "s", fmt::join(failed_b, ", "));
    }
  }
  return regressions.empty() && failed_b.empty() ? kExitOk : kExitCheckFailed;
}

}  // namespace kiln::tool
