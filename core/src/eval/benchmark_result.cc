// SPDX-License-Identifier: Apache-2.0
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "kiln/error.h"
#include "kiln/evaluator.h"
#include "kiln/statistics.h"

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

// The first line of a small sysfs / procfs file, or "" when it cannot be read.
std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// sysfs cache sizes: "32K", "1024K", "16M".
int64_t cache_size_bytes(const std::string& text) {
  if (text.empty()) return 0;
  int64_t v = 0;
  try {
    v = std::stoll(text);
  } catch (const std::exception&) {
    return 0;
  }
  switch (text.back()) {
    case 'K':
      return v * 1024;
    case 'M':
      return v * 1024 * 1024;
    case 'G':
      return v * 1024 * 1024 * 1024;
    default:
      return v;
  }
}

// CPUs in a sysfs shared_cpu_map ("00000003", "ffffffff,ffffffff").
int64_t cpus_in_map(const std::string& map) {
  int64_t n = 0;
  for (char c : map) {
    if (std::isxdigit(static_cast<unsigned char>(c))) {
      n += __builtin_popcount(static_cast<unsigned>(std::stoi(std::string(1, c), nullptr, 16)));
    }
  }
  return n;
}

// Google Benchmark's "context", filled as its own sysinfo.cc fills it on Linux: caches from
// sysfs cpu0, the clock from cpufreq's maximum (else /proc/cpuinfo), scaling enabled when a
// governor other than "performance" is set, the load average from getloadavg.
nlohmann::ordered_json machine_context() {
  using json = nlohmann::ordered_json;
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char date[64];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S%z", &local);
  std::string iso_date = date;
  // ISO 8601 offset with a colon, as Google Benchmark writes it: +0000 -> +00:00.
  if (iso_date.size() >= 5) iso_date.insert(iso_date.size() - 2, ":");
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const int64_t num_cpus = static_cast<int64_t>(std::thread::hardware_concurrency());

  json caches = json::array();
  const std::string cache_dir = "/sys/devices/system/cpu/cpu0/cache/";
  for (int i = 0;; ++i) {
    const std::string dir = cache_dir + "index" + std::to_string(i) + "/";
    const std::string type = read_line(dir + "type");
    if (type.empty()) break;
    if (type == "Data" || type == "Instruction" || type == "Unified") {
      int64_t level = 0;
      try {
        level = std::stoll(read_line(dir + "level"));
      } catch (const std::exception&) {
      }
      caches.push_back({{"type", type},
                        {"level", level},
                        {"size", cache_size_bytes(read_line(dir + "size"))},
                        {"num_sharing", cpus_in_map(read_line(dir + "shared_cpu_map"))}});
    }
  }

  double mhz = 0;
  try {
    const std::string khz = read_line("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
    if (!khz.empty()) mhz = std::stod(khz) / 1000;
  } catch (const std::exception&) {
  }
  if (mhz == 0) {
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);) {
      if (line.rfind("cpu MHz", 0) == 0 && line.find(':') != std::string::npos) {
        try {
          mhz = std::stod(line.substr(line.find(':') + 1));
        } catch (const std::exception&) {
        }
        break;
      }
    }
  }

  bool scaling = false;
  for (int64_t cpu = 0; cpu < num_cpus; ++cpu) {
    const std::string governor = read_line("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                                           "/cpufreq/scaling_governor");
    if (!governor.empty() && governor != "performance") scaling = true;
  }

  json load = json::array();
  double avg[3];
  if (getloadavg(avg, 3) == 3) load = {avg[0], avg[1], avg[2]};

  return {
      {"date", iso_date},
      {"host_name", host},
      {"executable", ec ? std::string("kiln") : exe.string()},
      {"num_cpus", num_cpus},
      {"mhz_per_cpu", static_cast<int64_t>(std::llround(mhz))},
      {"cpu_scaling_enabled", scaling},
      {"caches", caches},
      {"load_avg", load},
#ifdef NDEBUG
      {"library_build_type", "release"},
#else
      {"library_build_type", "debug"},
#endif
  };
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
  // In Google Benchmark's order: context first, keys as its JSON reporter writes them.
  using json = nlohmann::ordered_json;
  const std::string run_name = name.empty() ? "function" : name;
  const auto repetitions = static_cast<int64_t>(results_.size());
  json out;
  out["context"] = machine_context();
  out["context"]["kiln_timer"] = timer;
  out["context"]["kiln_device"] = device.str();
  out["context"]["kiln_time_source"] =
      "real_time and cpu_time both hold the measured time per call";
  // Google Benchmark gives its aggregates the iterations of one repetition.
  const int64_t iterations = numbers.empty() ? 1 : numbers.back();
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
    // The share of the measurement in which a runnable thread of the machine waited for a CPU
    // (PSI): what `kiln compare` weighs a change against. A user counter to Google
    // Benchmark's tools.
    if (cpu_pressure_s >= 0 && wall_time_s > 0) {
      benchmarks.back()["kiln_cpu_pressure"] = std::min(1.0, cpu_pressure_s / wall_time_s);
    }
  }
  if (repetitions > 0) {
    // As Google Benchmark's ComputeStats: mean, median, sample (n - 1) stddev, and cv as a
    // fraction with aggregate_unit "percentage" (its JSON writes that value unscaled).
    const stats::Summary s = stats::summarize(results_);
    auto aggregate = [&](const char* which, double value, bool is_time) {
      const double v = is_time ? value * 1e9 : value;
      benchmarks.push_back({{"name", run_name + "_" + which},
                            {"family_index", 0},
                            {"per_family_instance_index", 0},
                            {"run_name", run_name},
                            {"run_type", "aggregate"},
                            {"repetitions", repetitions},
                            {"threads", 1},
                            {"aggregate_name", which},
                            {"aggregate_unit", is_time ? "time" : "percentage"},
                            {"iterations", iterations},
                            {"real_time", v},
                            {"cpu_time", v},
                            {"time_unit", "ns"}});
    };
    aggregate("mean", s.mean, true);
    aggregate("median", s.median, true);
    aggregate("stddev", s.stddev, true);
    aggregate("cv", s.cv, false);
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
  // `kiln run --json` nests the Google Benchmark document under "benchmark".
  if (doc.is_object() && !doc.contains("benchmarks") && doc.contains("benchmark")) {
    doc = doc["benchmark"];
  }
  if (!doc.is_object() || !doc.contains("benchmarks") || !doc["benchmarks"].is_array()) {
    throw ValueError("not a benchmark JSON document: no \"benchmarks\" array");
  }
  std::vector<double> results;
  std::vector<int64_t> numbers;
  std::string name;
  bool named = false;
  for (const auto& b : doc["benchmarks"]) {
    if (!b.is_object() || b.value("run_type", "") != "iteration") continue;
    // One result: the first benchmark's repetitions (a Google Benchmark file may hold more).
    const std::string run_name = b.value("run_name", b.value("name", ""));
    if (named && run_name != name) continue;
    name = run_name;
    named = true;
    if (!b.contains("real_time") || !b["real_time"].is_number()) {
      throw ValueError("benchmark JSON: an iteration entry has no numeric real_time");
    }
    const std::string unit = b.value("time_unit", "ns");
    if (unit != "ns" && unit != "us" && unit != "ms" && unit != "s") {
      throw ValueError(fmt::format("benchmark JSON: unknown time_unit '{}'", unit));
    }
    const double scale = unit == "ns" ? 1e-9 : unit == "us" ? 1e-6 : unit == "ms" ? 1e-3 : 1.0;
    results.push_back(b["real_time"].get<double>() * scale);
    numbers.push_back(b.value("iterations", int64_t{1}));
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
