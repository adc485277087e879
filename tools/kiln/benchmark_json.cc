// SPDX-License-Identifier: Apache-2.0
// Google Benchmark's documents of `kiln run` (`--benchmark-out`, and "benchmark" in --json): a
// single run's as BenchmarkResult::to_json writes it, a sweep's gathered from its points.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "kiln/tensor.h"
#include "run_command.h"

namespace kiln::tool {
namespace {

// `value` appended to `seen` unless it is there already (first-seen order).
void add_once(std::vector<std::string>* seen, const std::string& value) {
  if (std::find(seen->begin(), seen->end(), value) == seen->end()) seen->push_back(value);
}

// The entry of a point that has no timing, as Google Benchmark writes a benchmark that failed.
nlohmann::json failed_entry(const std::string& name, const std::string& error) {
  return {{"name", name},      {"run_name", name},       {"run_type", "iteration"},
          {"repetitions", 0},  {"repetition_index", 0},  {"threads", 1},
          {"iterations", 0},   {"real_time", 0},         {"cpu_time", 0},
          {"time_unit", "ns"}, {"error_occurred", true}, {"error_message", error}};
}

}  // namespace

std::string benchmark_name(const std::string& function, const std::vector<Any>& inputs,
                           const std::string& device) {
  for (const Any& v : inputs) {
    if (v.type_code() != KILN_TYPE_TENSOR) continue;
    const Tensor t = v.cast<Tensor>();
    return fmt::format("{}/{}/{}/{}", function, t.numel(), t.dtype().str(), device);
  }
  return fmt::format("{}/{}", function, device);
}

BenchmarkDocument benchmark_document(const BenchmarkResult& timing, const std::string& name) {
  BenchmarkResult named = timing;
  named.name = name;
  BenchmarkDocument doc;
  // BenchmarkResult gives its document (with the machine's context) only as text: written once,
  // and taken in as a value once, here.
  doc.text = named.to_json();
  doc.value = nlohmann::json::parse(doc.text);
  return doc;
}

nlohmann::json sweep_benchmark_document(const Runtime& runtime, const std::vector<PointRun>& runs) {
  nlohmann::json benchmark;
  nlohmann::json entries = nlohmann::json::array();
  // The context names one device and timer; a sweep's points may have used several: all of
  // them, from the points' results, in the order first seen.
  std::vector<std::string> devices, timers;
  // Numbered as Google Benchmark numbers its own: a family per function (the name up to its
  // first '/', in first-seen order), and each point an instance of its family.
  std::vector<std::string> families;
  std::map<std::string, int64_t> instances;
  const auto numbered = [&](nlohmann::json entry, const PointRun& r) {
    const std::string family = r.name.substr(0, r.name.find('/'));
    add_once(&families, family);
    entry["family_index"] = std::find(families.begin(), families.end(), family) - families.begin();
    entry["per_family_instance_index"] = instances[family];
    return entry;
  };
  for (const PointRun& r : runs) {
    if (!r.outcome) {
      entries.push_back(numbered(failed_entry(r.name, r.error), r));
      ++instances[r.name.substr(0, r.name.find('/'))];
      continue;
    }
    const BenchmarkResult& timing = r.outcome->result.profile;
    nlohmann::json doc = benchmark_document(timing, r.name).value;
    if (!benchmark.contains("context")) benchmark["context"] = doc["context"];
    add_once(&devices, timing.device.str());  // what to_json names in kiln_device
    add_once(&timers, timing.timer);
    const std::string device = runtime.device_str(r.prepared->device);
    for (auto b : doc["benchmarks"]) {
      b["kiln_device"] = device;  // each entry says where it ran
      if (!r.outcome->server.empty()) b["kiln_server"] = r.outcome->server;  // and on which server
      entries.push_back(numbered(std::move(b), r));
    }
    ++instances[r.name.substr(0, r.name.find('/'))];
  }
  if (!benchmark.contains("context")) {
    benchmark["context"] = benchmark_document(BenchmarkResult{}, "").value["context"];
  }
  if (!devices.empty()) {
    benchmark["context"]["kiln_device"] = fmt::format("{}", fmt::join(devices, ", "));
    benchmark["context"]["kiln_timer"] = fmt::format("{}", fmt::join(timers, ", "));
  }
  benchmark["benchmarks"] = std::move(entries);
  return benchmark;
}

}  // namespace kiln::tool
