#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "kiln/error.h"
#include "kiln/evaluator.h"

namespace kiln {
namespace {

// Python's repr of a float: the shortest text that reads back the same, with ".0" on
// integral values ("1.0", "1e-05", "2.5e+16", "nan", "inf").
std::string python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// Python's str.format centring ("^"): extra padding goes to the right.
std::string centered(const std::string& text, size_t width) {
  if (text.size() >= width) return text;
  const size_t left = (width - text.size()) / 2;
  return std::string(left, ' ') + text + std::string(width - text.size() - left, ' ');
}

}  // namespace

BenchmarkResult::BenchmarkResult(std::vector<double> results) : results_(std::move(results)) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (results_.empty()) {
    // numpy gives NaN for the mean of nothing; min and max raise there. Kiln reports NaN for
    // all five so that repeat = 0 stays printable (apache/tvm#12858).
    mean_ = median_ = min_ = max_ = std_ = nan;
    return;
  }
  const double n = static_cast<double>(results_.size());
  mean_ = std::accumulate(results_.begin(), results_.end(), 0.0) / n;
  double squares = 0;
  for (double r : results_) squares += (r - mean_) * (r - mean_);
  std_ = std::sqrt(squares / n);
  std::vector<double> sorted = results_;
  std::sort(sorted.begin(), sorted.end());
  const size_t mid = sorted.size() / 2;
  median_ = sorted.size() % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  min_ = sorted.front();
  max_ = sorted.back();
}

std::string BenchmarkResult::to_string() const {
  std::string out = "Execution time summary:\n";
  const char* headers[] = {"mean (ms)", "median (ms)", "max (ms)", "min (ms)", "std (ms)"};
  const double values[] = {mean_, median_, max_, min_, std_};
  for (int i = 0; i < 5; ++i) out += (i ? " " : "") + centered(headers[i], 12);
  out += "\n";
  for (int i = 0; i < 5; ++i) {
    out += (i ? " " : "") + centered(fmt::format("{:.4f}", values[i] * 1000), 12);
  }
  out += std::string(15, ' ');
  return out;
}

std::string BenchmarkResult::repr() const {
  std::string tuple = "(";
  for (size_t i = 0; i < results_.size(); ++i) {
    tuple += (i ? ", " : "") + python_float(results_[i]);
  }
  tuple += results_.size() == 1 ? ",)" : ")";
  return fmt::format("BenchmarkResult(min={}, mean={}, median={}, max={}, std={}, results={})",
                     python_float(min_), python_float(mean_), python_float(median_),
                     python_float(max_), python_float(std_), tuple);
}

std::string BenchmarkResult::to_json() const {
  using nlohmann::json;
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S%z", std::localtime(&now));
  const std::string run_name = name.empty() ? "function" : name;
  const auto repetitions = static_cast<int64_t>(results_.size());
  json out;
  out["context"] = {
      {"date", date},
      {"host_name", host},
      {"executable", "kiln"},
      {"num_cpus", static_cast<int64_t>(std::thread::hardware_concurrency())},
      {"mhz_per_cpu", 0},
      {"cpu_scaling_enabled", false},
      {"caches", json::array()},
      {"load_avg", json::array()},
      {"library_build_type", "release"},
      {"kiln_timer", timer},
      {"kiln_device", device.str()},
      {"kiln_time_source", "real_time and cpu_time both hold the measured time per call"},
  };
  json benchmarks = json::array();
  for (int64_t i = 0; i < repetitions; ++i) {
    const double ns = results_[i] * 1e9;
    benchmarks.push_back({{"name", run_name},
                          {"family_index", 0},
                          {"per_family_instance_index", 0},
                          {"run_name", run_name},
                          {"run_type", "iteration"},
                          {"repetitions", repetitions},
                          {"repetition_index", i},
                          {"threads", 1},
                          {"iterations", i < static_cast<int64_t>(numbers.size()) ? numbers[i] : 1},
                          {"real_time", ns},
                          {"cpu_time", ns},
                          {"time_unit", "ns"}});
  }
  if (repetitions > 0) {
    auto aggregate = [&](const char* which, double seconds) {
      benchmarks.push_back({{"name", run_name + "_" + which},
                            {"family_index", 0},
                            {"per_family_instance_index", 0},
                            {"run_name", run_name},
                            {"run_type", "aggregate"},
                            {"repetitions", repetitions},
                            {"threads", 1},
                            {"aggregate_name", which},
                            {"aggregate_unit", "time"},
                            {"iterations", repetitions},
                            {"real_time", seconds * 1e9},
                            {"cpu_time", seconds * 1e9},
                            {"time_unit", "ns"}});
    };
    aggregate("mean", mean_);
    aggregate("median", median_);
    aggregate("stddev", std_);
  }
  out["benchmarks"] = benchmarks;
  return out.dump(2);
}

BenchmarkResult BenchmarkResult::from_json(const std::string& text) {
  using nlohmann::json;
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw ValueError(fmt::format("not a benchmark JSON document: {}", e.what()));
  }
  if (!doc.is_object() || !doc.contains("benchmarks") || !doc["benchmarks"].is_array()) {
    throw ValueError("not a benchmark JSON document: no \"benchmarks\" array");
  }
  std::vector<double> results;
  std::vector<int64_t> numbers;
  std::string name;
  for (const auto& b : doc["benchmarks"]) {
    if (!b.is_object() || b.value("run_type", "") != "iteration") continue;
    if (!b.contains("real_time") || !b["real_time"].is_number()) {
      throw ValueError("benchmark JSON: an iteration entry has no numeric real_time");
    }
    const std::string unit = b.value("time_unit", "ns");
    const double scale = unit == "ns" ? 1e-9 : unit == "us" ? 1e-6 : unit == "ms" ? 1e-3 : 1.0;
    if (unit != "ns" && unit != "us" && unit != "ms" && unit != "s") {
      throw ValueError(fmt::format("benchmark JSON: unknown time_unit '{}'", unit));
    }
    results.push_back(b["real_time"].get<double>() * scale);
    numbers.push_back(b.value("iterations", int64_t{1}));
    name = b.value("run_name", b.value("name", ""));
  }
  BenchmarkResult r(std::move(results));
  r.numbers = std::move(numbers);
  r.name = name;
  if (doc.contains("context") && doc["context"].is_object()) {
    r.timer = doc["context"].value("kiln_timer", "");
  }
  return r;
}

EvaluatorConfig EvaluatorConfig::normalized(const std::optional<EvaluatorConfig>& config) {
  return config ? *config : EvaluatorConfig{};
}

TimeEvaluatorOptions EvaluatorConfig::to_options() const {
  TimeEvaluatorOptions o;
  o.number = number;
  o.repeat = repeat;
  o.min_repeat_ms = min_repeat_ms;
  o.f_preproc = enable_cpu_cache_flush ? "cache_flush_cpu_non_first_arg" : "";
  return o;
}

}  // namespace kiln
