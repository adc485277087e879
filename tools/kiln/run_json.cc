// SPDX-License-Identifier: Apache-2.0
// `kiln run --json`: the document of one run, built from what the run measured and checked (the
// values themselves, never text printed for people and read back).
#include <cmath>
#include <cstdint>
#include <vector>

#include "kiln/tensor.h"
#include "kiln/vm/virtual_machine.h"
#include "run_command.h"

namespace kiln::tool {
namespace {

// A returned value for the JSON document: tensors described, scalars as values, tuples as
// arrays.
nlohmann::json value_json(const Any& v) {
  switch (v.type_code()) {
    case KILN_TYPE_NONE:
      return nullptr;
    case KILN_TYPE_BOOL:
      return {{"value", v.cast<bool>()}};
    case KILN_TYPE_INT:
      return {{"value", v.cast<int64_t>()}};
    case KILN_TYPE_FLOAT:
      return {{"value", v.cast<double>()}};
    case KILN_TYPE_TENSOR: {
      const Tensor t = v.cast<Tensor>();
      return {{"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())},
              {"dtype", t.dtype().str()},
              {"summary", run::summarize(t)}};
    }
    default:
      break;
  }
  if (Ref<vm::ArrayObj> tuple = v.as_object<vm::ArrayObj>()) {
    nlohmann::json items = nlohmann::json::array();
    for (const Any& item : tuple->items) items.push_back(value_json(item));
    return {{"tuple", items}};
  }
  return {{"type", v.type_name()}, {"text", v.str()}};
}

// The per-repeat times, their statistics and the noise verdict (docs/evaluator.md).
nlohmann::json timing_json(const BenchmarkResult& timing, const NoiseVerdict& verdict) {
  nlohmann::json out = {{"results_s", timing.results()}, {"mean_s", timing.mean()},
                        {"median_s", timing.median()},   {"min_s", timing.min()},
                        {"max_s", timing.max()},         {"std_s", timing.std()},
                        {"numbers", timing.numbers},     {"stop_reason", timing.stop_reason}};
  // The table's statistics, for scripts.
  const stats::Summary& sum = verdict.summary;
  out["stddev_sample_s"] = sum.stddev;
  out["cv"] = sum.cv;
  out["rse"] = sum.rse;
  out["p50_s"] = sum.p50;
  out["p90_s"] = sum.p90;
  out["p99_s"] = sum.p99;
  return out;
}

nlohmann::json noise_json(const NoiseVerdict& verdict) {
  nlohmann::json noise = {
      {"noisy", verdict.noisy}, {"reasons", verdict.reasons}, {"line", verdict.line()}};
  if (verdict.load) {
    noise["load"] = {{"load1", verdict.load->load1}, {"cores", verdict.load->cores}};
  }
  if (verdict.off_cpu) noise["off_cpu"] = *verdict.off_cpu;
  if (verdict.cpu_pressure) noise["cpu_pressure"] = *verdict.cpu_pressure;
  return noise;
}

nlohmann::json throughput_json(const Throughput& throughput) {
  const bool timed = throughput.seconds > 0 && std::isfinite(throughput.seconds);
  // No rate from no time: null, never 0.
  nlohmann::json tp = {{"bytes", throughput.bytes},
                       {"bytes_derived", throughput.bytes_derived},
                       {"seconds", throughput.seconds},
                       {"gb_per_s", timed ? nlohmann::json(throughput.gb_per_s) : nullptr},
                       {"line", throughput.line()}};
  if (throughput.flops) {
    tp["flops"] = *throughput.flops;
    tp["gflop_per_s"] = timed ? nlohmann::json(*throughput.gflop_per_s) : nullptr;
  }
  if (throughput.fraction_of_peak) {
    tp["peak_bytes_per_s"] = *throughput.peak_bytes_per_s;
    tp["fraction_of_peak"] = *throughput.fraction_of_peak;
  }
  return tp;
}

}  // namespace

nlohmann::json outcome_json(const Runtime& runtime, const Prepared& p, const Outcome& o) {
  const run::RunSpec& spec = p.spec;
  const BenchmarkResult& timing = o.result.profile;
  nlohmann::json out;
  out["config"] = spec.file.string();
  out["module"] = spec.module.string();
  out["function"] = p.function;
  out["device"] = runtime.device_str(p.device);
  out["where"] = o.where;
  if (!o.server.empty()) out["server"] = o.server;
  out["timer"] = timing.timer;
  out["exporter"] = spec.exporter;
  out["outputs"] = nlohmann::json::array();
  for (size_t i = 0; i < o.result.outputs.size(); ++i) {
    const Any& v = o.result.outputs[i];
    nlohmann::json entry{{"name", spec.inputs[i].name}};
    if (v.type_code() == KILN_TYPE_TENSOR) {
      entry.update(value_json(v));  // shape, dtype, summary
    } else {
      entry["value"] = v.str();
    }
    out["outputs"].push_back(entry);
  }
  out["result"] = value_json(o.result.result);
  out["timing"] = timing_json(timing, o.verdict);
  out["noise"] = noise_json(o.verdict);
  if (o.show_throughput) out["throughput"] = throughput_json(o.throughput);
  out["steps_s"] = nlohmann::json::object();
  for (const auto& [step, seconds] : o.steps) out["steps_s"][step] = seconds;
  out["check"] = {{"ok", o.check.ok}, {"summary", o.check.summary}};
  // profiling::Report offers its JSON form only as text (Report::json()): taken in as a value.
  if (o.profile) out["profile"] = nlohmann::json::parse(o.profile->json());
  return out;
}

}  // namespace kiln::tool
