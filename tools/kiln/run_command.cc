// `kiln run RUN.yaml`: run a module's function on a device through local_run, print its
// outputs, return value and timing, check them against expected values. A config with a
// `sweep:` section runs every point of its cross product, with one progress display, one
// table and one JSON document.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_checks.h"
#include "commands.h"
#include "kiln/kiln.h"
#include "kiln/noise_verdict.h"
#include "kiln/run_config.h"
#include "kiln/throughput.h"
#include "kiln/timing_table.h"
#include "kiln/vm/virtual_machine.h"
#include "output_file.h"
#include "progress.h"

namespace kiln::tool {
namespace {

// The Google Benchmark name of a run: function / elements of the first tensor argument / its
// dtype / device ("relu/4194304/float32/opencl:0"), so one kernel at two sizes, dtypes or
// devices are told apart; without a tensor argument, function / device.
std::string benchmark_name(const std::string& function, const std::vector<Any>& inputs,
                           const std::string& device) {
  for (const Any& v : inputs) {
    if (v.type_code() != KILN_TYPE_TENSOR) continue;
    const Tensor t = v.cast<Tensor>();
    return fmt::format("{}/{}/{}/{}", function, t.numel(), t.dtype().str(), device);
  }
  return fmt::format("{}/{}", function, device);
}

// The peak memory bandwidth the backend reports for `device`, if any (kiln/throughput.h). Asks
// the one backend that runs, so a CPU run starts no GPU driver.
std::optional<double> device_peak_bandwidth(const Runtime& runtime, const Device& device) {
  const Ref<DeviceBackend> backend = runtime.find_backend(device.type);
  if (!backend) return std::nullopt;
  try {
    if (device.id < 0 || device.id >= backend->device_count()) return std::nullopt;
    return peak_memory_bandwidth(backend->attributes(device.id));
  } catch (const Error&) {
    return std::nullopt;  // no figure; the run itself reports why the device fails
  }
}

// A config checked against the runtime, with its arguments built and its module loaded.
struct Prepared {
  run::RunSpec spec;
  std::vector<Any> inputs;
  Device device;
  Module module;
  std::string function;
};

// Checks `spec` against `runtime` (device, exporter, function) and builds the arguments. What is
// wrong with the config is a UsageError (exit 2); a module that fails to load throws the
// runtime's error (exit 3).
Prepared prepare(Runtime& runtime, run::RunSpec spec, const RunOptions& options) {
  Prepared p;
  try {
    if (options.device) {
      runtime.parse_device(*options.device);  // validates; an unknown type names its plugin
      spec.device = *options.device;
    }
    // Refused here, not replaced by device 0: the run uses and reports the device named.
    p.device = checked_device(runtime, spec, options.device.has_value());
    check_exporter(runtime, spec);
    p.inputs = run::make_inputs(spec);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  p.module = runtime.load_module(spec.module);
  p.function = spec.function.empty() ? p.module.entry_name() : spec.function;
  if (p.function.empty()) {
    throw ValueError(
        fmt::format("{}: the module {} has no entry function; name one with "
                    "`function:`",
                    spec.file.string(), spec.module.string()));
  }
  // Before the export, and naming the module the config gives rather than the exported copy.
  if (!spec.function.empty()) {
    try {
      check_function(p.module, p.function, spec);
    } catch (const ConfigError& e) {
      throw UsageError(e.what());
    }
  }
  p.spec = std::move(spec);
  return p;
}

// What one run measured and checked.
struct Outcome {
  testing::RunResult result;
  std::string where = "local";
  run::CheckResult check;  // outputs and result together
  std::vector<std::pair<std::string, double>> steps;
  NoiseVerdict verdict;
  Throughput throughput;
  bool show_throughput = false;
  std::optional<profiling::Report> profile;
};

Outcome execute(Runtime& runtime, const Prepared& p, Progress& progress) {
  const run::RunSpec& spec = p.spec;
  Outcome o;
  testing::RunHooks hooks;
  hooks.function = p.function;
  hooks.evaluator = spec.extra;
  hooks.device_index = p.device.id;
  hooks.on_step = [&](const std::string& step, double seconds) {
    o.steps.emplace_back(step, seconds);
    progress.step_done();
  };
  if (progress.enabled()) {
    const double timeout_s = spec.extra.noise.timeout_s;
    hooks.on_repeat = [&progress, timeout_s](int32_t done, int32_t total) {
      progress.repeat(done, total, timeout_s);
    };
  }
  if (spec.remote) {
    rpc::RPCConfig rpc;
    rpc.tracker_host = spec.remote->tracker_host;
    rpc.tracker_port = spec.remote->tracker_port;
    rpc.tracker_key = spec.remote->key;
    rpc.session_priority = spec.remote->priority;
    rpc.session_timeout_sec = spec.remote->session_timeout;
    rpc.request_wait_sec = spec.remote->wait;
    rpc.token = spec.remote->token;
    try {
      rpc = rpc::RPCConfig::normalized(rpc);  // missing tracker settings are usage errors
    } catch (const ValueError& e) {
      throw UsageError(fmt::format("{}: remote: {}", spec.file.string(), e.what()));
    }
    o.where = fmt::format("remote, key '{}' via tracker {}:{}", *rpc.tracker_key, *rpc.tracker_host,
                          *rpc.tracker_port);
    progress.note(fmt::format("requesting a '{}' server from {}:{}", *rpc.tracker_key,
                              *rpc.tracker_host, *rpc.tracker_port));
    o.result = testing::rpc_run(runtime, p.module, spec.device, p.inputs, spec.evaluator, rpc,
                                spec.exporter, std::nullopt, hooks);
  } else {
    o.result = testing::local_run(runtime, p.module, spec.device, p.inputs, spec.evaluator,
                                  spec.exporter, std::nullopt, hooks);
  }
  progress.finish();
  o.check = run::check_outputs(spec, o.result.outputs);
  const run::CheckResult result_check = run::check_result(spec, o.result.result);
  o.check.ok = o.check.ok && result_check.ok;
  if (!result_check.summary.empty()) {
    o.check.summary += (o.check.summary.empty() ? "" : "\n") + result_check.summary;
  }
  const BenchmarkResult& timing = o.result.profile;
  // This machine's load says nothing about a remote server's measurement.
  o.verdict = noise_verdict(timing, spec.remote ? std::nullopt : host_load());
  // From the median; a remote server's device attributes are not known here: no peak.
  o.throughput =
      compute_throughput(spec.throughput, argument_bytes(p.inputs), timing.median(),
                         spec.remote ? std::nullopt : device_peak_bandwidth(runtime, p.device));
  // Nothing to say for a function of scalars without given bytes or flops.
  o.show_throughput = o.throughput.bytes > 0 || o.throughput.flops.has_value();
  if (spec.profile) o.profile = profile_run(spec, *spec.profile, runtime);
  return o;
}

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

// The document of one run, without its "benchmark" (a sweep gathers those).
nlohmann::json outcome_json(const Runtime& runtime, const Prepared& p, const Outcome& o) {
  const run::RunSpec& spec = p.spec;
  const BenchmarkResult& timing = o.result.profile;
  nlohmann::json out;
  out["config"] = spec.file.string();
  out["module"] = spec.module.string();
  out["function"] = p.function;
  out["device"] = runtime.device_str(p.device);
  out["where"] = o.where;
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
  out["timing"] = {{"results_s", timing.results()}, {"mean_s", timing.mean()},
                   {"median_s", timing.median()},   {"min_s", timing.min()},
                   {"max_s", timing.max()},         {"std_s", timing.std()},
                   {"numbers", timing.numbers},     {"stop_reason", timing.stop_reason}};
  // The table's statistics and the noise verdict (docs/evaluator.md), for scripts.
  const NoiseVerdict& verdict = o.verdict;
  const stats::Summary& sum = verdict.summary;
  out["timing"]["stddev_sample_s"] = sum.stddev;
  out["timing"]["cv"] = sum.cv;
  out["timing"]["rse"] = sum.rse;
  out["timing"]["p50_s"] = sum.p50;
  out["timing"]["p90_s"] = sum.p90;
  out["timing"]["p99_s"] = sum.p99;
  nlohmann::json noise = {
      {"noisy", verdict.noisy}, {"reasons", verdict.reasons}, {"line", verdict.line()}};
  if (verdict.load) {
    noise["load"] = {{"load1", verdict.load->load1}, {"cores", verdict.load->cores}};
  }
  if (verdict.off_cpu) noise["off_cpu"] = *verdict.off_cpu;
  if (verdict.cpu_pressure) noise["cpu_pressure"] = *verdict.cpu_pressure;
  out["noise"] = std::move(noise);
  if (o.show_throughput) {
    const Throughput& throughput = o.throughput;
    nlohmann::json tp = {{"bytes", throughput.bytes},
                         {"bytes_derived", throughput.bytes_derived},
                         {"seconds", throughput.seconds},
                         {"gb_per_s", throughput.gb_per_s},
                         {"line", throughput.line()}};
    if (throughput.flops) {
      tp["flops"] = *throughput.flops;
      tp["gflop_per_s"] = *throughput.gflop_per_s;
    }
    if (throughput.fraction_of_peak) {
      tp["peak_bytes_per_s"] = *throughput.peak_bytes_per_s;
      tp["fraction_of_peak"] = *throughput.fraction_of_peak;
    }
    out["throughput"] = std::move(tp);
  }
  out["steps_s"] = nlohmann::json::object();
  for (const auto& [step, seconds] : o.steps) out["steps_s"][step] = seconds;
  out["check"] = {{"ok", o.check.ok}, {"summary", o.check.summary}};
  if (o.profile) out["profile"] = nlohmann::json::parse(o.profile->json());
  return out;
}

// A value on one line of the report: a tensor's summary, anything else as Any::str() gives it.
std::string value_text(const Any& v) {
  return v.type_code() == KILN_TYPE_TENSOR ? run::summarize(v.cast<Tensor>()) : v.str();
}

void print_outcome(const Runtime& runtime, const Prepared& p, const Outcome& o) {
  const run::RunSpec& spec = p.spec;
  const BenchmarkResult& timing = o.result.profile;
  std::cout << fmt::format(
      "module:   {}\nfunction: {}\ndevice:   {} ({}, timer: {})\nexport:   {}\n",
      spec.module.string(), p.function, runtime.device_str(p.device), o.where, timing.timer,
      spec.exporter);
  std::cout << "outputs:\n";
  for (size_t i = 0; i < o.result.outputs.size(); ++i) {
    const Any& v = o.result.outputs[i];
    std::cout << fmt::format("  {:<8} {}\n", spec.inputs[i].name, value_text(v));
  }
  const auto leaves = run::result_leaves(o.result.result);
  if (!leaves.empty()) {
    std::cout << "returned:\n";
    for (const auto& [name, v] : leaves) {
      std::cout << fmt::format("  {:<8} {}\n", name, value_text(v));
    }
  }
  // A noise rule's run says where the RSE got to, beside its target.
  const std::string noise_stop =
      fmt::format(", stopped: {} at RSE {} (target {})", timing.stop_reason,
                  o.verdict.summary.n >= 2 ? format_percent(o.verdict.summary.rse) : "-",
                  format_percent(spec.extra.noise.target_rse));
  std::cout << fmt::format("timing ({} repeat{} of {} call{}{}):\n", timing.results().size(),
                           timing.results().size() == 1 ? "" : "s",
                           timing.numbers.empty() ? 0 : timing.numbers.back(),
                           timing.numbers.empty() || timing.numbers.back() == 1 ? "" : "s",
                           timing.stop_reason.empty() ? "" : noise_stop);
  std::cout << timing_table(timing) << "\n";
  if (o.verdict.noisy) std::cout << o.verdict.line() << "\n";
  if (o.show_throughput) std::cout << o.throughput.line() << "\n";
  std::cout << "steps:";
  for (const auto& [step, seconds] : o.steps) {
    std::cout << fmt::format(" {} {:.1f} ms", step, seconds * 1e3);
  }
  std::cout << "\n";
  if (!o.check.summary.empty()) std::cout << "checks:\n" << o.check.summary << "\n";
}

int run_single(Runtime& runtime, run::RunSpec spec, const RunOptions& options) {
  const Prepared p = prepare(runtime, std::move(spec), options);
  Progress progress(Progress::choose(options.progress, options.json, stderr), p.function, stderr);
  const Outcome o = execute(runtime, p, progress);

  // Google Benchmark's document, named as its tools expect: in --json under "benchmark", and
  // at the top level in --benchmark-out's file, which compare.py reads as is.
  BenchmarkResult named = o.result.profile;
  named.name = benchmark_name(p.function, p.inputs, runtime.device_str(p.device));
  const std::string benchmark_json = named.to_json();
  if (options.benchmark_out) write_output_file(*options.benchmark_out, benchmark_json + "\n");

  if (options.json) {
    nlohmann::json out = outcome_json(runtime, p, o);
    out["benchmark"] = nlohmann::json::parse(benchmark_json);
    std::cout << out.dump(2) << "\n";
  } else {
    print_outcome(runtime, p, o);
  }
  if (o.profile && !options.json) std::cout << "profile:\n" << o.profile->table() << "\n";
  return o.check.ok ? kExitOk : kExitCheckFailed;
}

// One point of a sweep, however far it got.
struct PointRun {
  const run::SweepPoint* point = nullptr;
  std::optional<Prepared> prepared;
  std::optional<Outcome> outcome;
  int exit_code = kExitOk;
  std::string status = "ok";  // ok, check_failed, invalid (exit 2), error (exit 3)
  std::string error;
  std::string name;  // the benchmark name, unique in the sweep
};

// Names every point: the Google Benchmark name of its run, and where two points would share
// one (points that differ only in an evaluator setting, a scalar argument, a second input's
// shape), "/axis=value" for each axis whose value differs among them, so that `kiln compare`
// matches points one to one.
void name_points(Runtime& runtime, const run::SweepSpec& sweep, std::vector<PointRun>* runs) {
  // "/shape=[1024,1024]": axis a's value in a name, without spaces.
  const auto name_part = [&](const PointRun& r, size_t a) {
    std::string value = r.point->values[a];
    value.erase(std::remove(value.begin(), value.end(), ' '), value.end());
    return fmt::format("/{}={}", sweep.axes[a].name, value);
  };
  std::map<std::string, std::vector<size_t>> by_base;
  std::vector<std::string> base(runs->size());
  for (size_t i = 0; i < runs->size(); ++i) {
    PointRun& r = (*runs)[i];
    if (r.prepared) {
      base[i] = benchmark_name(r.prepared->function, r.prepared->inputs,
                               runtime.device_str(r.prepared->device));
    } else if (r.point->spec) {
      const run::RunSpec& spec = *r.point->spec;
      base[i] = fmt::format("{}/{}", spec.function.empty() ? "entry" : spec.function, spec.device);
    } else {
      // No run to name it after: every axis, so that the name still says which point it is.
      base[i] = "invalid";
      for (size_t a = 0; a < sweep.axes.size(); ++a) base[i] += name_part(r, a);
    }
    by_base[base[i]].push_back(i);
  }
  for (const auto& [name, members] : by_base) {
    std::vector<size_t> differing;
    for (size_t a = 0; a < sweep.axes.size(); ++a) {
      std::set<std::string> values;
      for (size_t i : members) values.insert((*runs)[i].point->values[a]);
      if (values.size() > 1) differing.push_back(a);
    }
    for (size_t i : members) {
      std::string full = name;
      for (size_t a : differing) full += name_part((*runs)[i], a);
      (*runs)[i].name = full;
    }
  }
}

int run_sweep(Runtime& runtime, const run::SweepSpec& sweep, const RunOptions& options) {
  for (const run::SweepAxis& axis : sweep.axes) {
    if (options.device && axis.name == "device") {
      throw UsageError(fmt::format(
          "--device {}: {} sweeps the device (sweep.device); leave --device out or the axis",
          *options.device, sweep.file.string()));
    }
  }
  // A bad --device is the command line's fault, not each point's.
  if (options.device) {
    try {
      runtime.parse_device(*options.device);  // validates; an unknown type names its plugin
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  const size_t total = sweep.points.size();
  Progress progress(Progress::choose(options.progress, options.json, stderr), "", stderr);
  std::vector<PointRun> runs(total);
  for (size_t i = 0; i < total; ++i) {
    PointRun& r = runs[i];
    r.point = &sweep.points[i];
    if (!r.point->spec) {
      r.exit_code = kExitUsage;
      r.status = "invalid";
      r.error = r.point->error;
      progress.note(fmt::format("point {}/{} is invalid: {}", i + 1, total, r.error));
      continue;
    }
    // A failing point is reported and the sweep goes on.
    try {
      r.prepared = prepare(runtime, *r.point->spec, options);
      progress.start_point(i + 1, total, r.point->label, r.prepared->function);
      r.outcome = execute(runtime, *r.prepared, progress);
      if (!r.outcome->check.ok) {
        r.exit_code = kExitCheckFailed;
        r.status = "check_failed";
      }
    } catch (const UsageError& e) {
      r.exit_code = kExitUsage;
      r.status = "invalid";
      r.error = e.what();
    } catch (const std::exception& e) {
      r.exit_code = kExitRuntime;
      r.status = "error";
      r.error = e.what();
    }
    progress.finish();
    if (!r.error.empty())
      progress.note(fmt::format("point {}/{} failed: {}", i + 1, total, r.error));
  }
  name_points(runtime, sweep, &runs);

  // One Google Benchmark document for every point; a failed point is an entry with
  // error_occurred, as Google Benchmark writes a benchmark that failed.
  nlohmann::json benchmark;
  nlohmann::json entries = nlohmann::json::array();
  std::map<std::string, std::vector<std::string>> context_values;
  for (const PointRun& r : runs) {
    if (r.outcome) {
      BenchmarkResult named = r.outcome->result.profile;
      named.name = r.name;
      nlohmann::json doc = nlohmann::json::parse(named.to_json());
      if (!benchmark.contains("context") && doc.contains("context")) {
        benchmark["context"] = doc["context"];
      }
      // The context names one device and timer; a sweep's points may have used several.
      for (const char* key : {"kiln_device", "kiln_timer", "kiln_time_source"}) {
        if (doc["context"].contains(key) && doc["context"][key].is_string()) {
          const std::string value = doc["context"][key].get<std::string>();
          std::vector<std::string>& seen = context_values[key];
          if (std::find(seen.begin(), seen.end(), value) == seen.end()) seen.push_back(value);
        }
      }
      const std::string device = runtime.device_str(r.prepared->device);
      for (auto b : doc["benchmarks"]) {
        b["kiln_device"] = device;  // each entry says where it ran
        entries.push_back(std::move(b));
      }
    } else {
      entries.push_back({{"name", r.name},
                         {"run_name", r.name},
                         {"run_type", "iteration"},
                         {"repetitions", 0},
                         {"repetition_index", 0},
                         {"threads", 1},
                         {"iterations", 0},
                         {"real_time", 0},
                         {"cpu_time", 0},
                         {"time_unit", "ns"},
                         {"error_occurred", true},
                         {"error_message", r.error}});
    }
  }
  if (!benchmark.contains("context")) {
    benchmark["context"] = nlohmann::json::parse(BenchmarkResult{}.to_json())["context"];
  }
  for (const auto& [key, values] : context_values) {
    benchmark["context"][key] = fmt::format("{}", fmt::join(values, ", "));
  }
  benchmark["benchmarks"] = std::move(entries);
  if (options.benchmark_out) write_output_file(*options.benchmark_out, benchmark.dump(2) + "\n");

  int exit_code = kExitOk;
  size_t failed = 0;
  for (const PointRun& r : runs) {
    exit_code = std::max(exit_code, r.exit_code);
    if (r.exit_code != kExitOk) ++failed;
  }
  if (options.json) {
    nlohmann::json out;
    out["config"] = sweep.file.string();
    nlohmann::json axes = nlohmann::json::array();
    for (const run::SweepAxis& axis : sweep.axes) {
      axes.push_back({{"name", axis.name}, {"values", axis.values}});
    }
    out["sweep"] = {{"axes", axes}, {"points", total}, {"failed", failed}};
    out["points"] = nlohmann::json::array();
    for (const PointRun& r : runs) {
      nlohmann::json point;
      if (r.prepared && r.outcome) {
        point = outcome_json(runtime, *r.prepared, *r.outcome);
      } else if (r.prepared) {
        // It failed while running: still say what ran where.
        point["config"] = sweep.file.string();
        point["module"] = r.prepared->spec.module.string();
        point["function"] = r.prepared->function;
        point["device"] = runtime.device_str(r.prepared->device);
      } else if (r.point->spec) {
        point["config"] = sweep.file.string();
        point["module"] = r.point->spec->module.string();
        point["function"] = r.point->spec->function;
        point["device"] = r.point->spec->device;  // as configured: it was not checked
      }
      point["index"] = r.point->index;
      point["point"] = r.point->label;
      nlohmann::json settings = nlohmann::json::object();
      for (size_t a = 0; a < sweep.axes.size(); ++a) {
        settings[sweep.axes[a].name] = r.point->values[a];
      }
      point["settings"] = settings;
      point["name"] = r.name;
      point["status"] = r.status;
      point["exit_code"] = r.exit_code;
      if (!r.error.empty()) point["error"] = r.error;
      out["points"].push_back(std::move(point));
    }
    out["exit_code"] = exit_code;
    out["benchmark"] = benchmark;
    std::cout << out.dump(2) << "\n";
    return exit_code;
  }

  std::vector<std::string> sizes;
  for (const run::SweepAxis& axis : sweep.axes) {
    sizes.push_back(fmt::format("{} {}", axis.values.size(), axis.name));
  }
  std::cout << fmt::format("sweep:    {}: {} point{} ({})\n", sweep.file.string(), total,
                           total == 1 ? "" : "s", fmt::join(sizes, " x "));
  // One row per point: what ran where, how fast, how noisy, and whether it held. Numbers are
  // right-aligned, text left-aligned.
  struct Column {
    std::string name;
    bool numeric;
  };
  const std::vector<Column> columns = {{"#", true},      {"point", false}, {"benchmark", false},
                                       {"median", true}, {"CV", true},     {"RSE", true},
                                       {"noise", false}, {"GB/s", true},   {"GFLOP/s", true},
                                       {"timer", false}, {"status", false}};
  std::vector<std::vector<std::string>> rows;
  for (const PointRun& r : runs) {
    std::vector<std::string> row = {std::to_string(r.point->index + 1), r.point->label, r.name};
    if (r.outcome) {
      const Outcome& o = *r.outcome;
      const stats::Summary& sum = o.verdict.summary;
      row.push_back(format_time_ns(o.result.profile.median() * 1e9));
      row.push_back(sum.n >= 2 ? format_percent(sum.cv) : "-");
      row.push_back(sum.n >= 2 ? format_percent(sum.rse) : "-");
      row.emplace_back(o.verdict.noisy ? "noisy" : "ok");
      row.push_back(o.show_throughput ? fmt::format("{:.3g}", o.throughput.gb_per_s) : "-");
      row.push_back(o.throughput.gflop_per_s ? fmt::format("{:.3g}", *o.throughput.gflop_per_s)
                                             : "-");
      row.push_back(o.result.profile.timer);
    } else {
      row.resize(columns.size() - 1, "-");  // nothing measured
    }
    row.push_back(r.status == "ok" ? "ok" : fmt::format("{} (exit {})", r.status, r.exit_code));
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(columns.size());
  for (size_t c = 0; c < columns.size(); ++c) {
    width[c] = columns[c].name.size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  const auto print_row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) line += "  ";
      if (c + 1 == cells.size()) {
        line += cells[c];  // the last column unpadded
      } else if (columns[c].numeric) {
        line += fmt::format("{:>{}}", cells[c], width[c]);
      } else {
        line += fmt::format("{:<{}}", cells[c], width[c]);
      }
    }
    std::cout << line << "\n";
  };
  std::vector<std::string> header;
  for (const Column& column : columns) header.push_back(column.name);
  print_row(header);
  for (const auto& row : rows) print_row(row);
  // Beneath the table: what a row cannot hold. An error several points share (one that does not
  // depend on the swept values, e.g. a missing module) is printed once, with the points named.
  std::vector<std::pair<std::string, std::vector<const PointRun*>>> errors;
  for (const PointRun& r : runs) {
    if (r.error.empty()) continue;
    auto same = std::find_if(errors.begin(), errors.end(),
                             [&](const auto& e) { return e.first == r.error; });
    if (same == errors.end()) {
      errors.push_back({r.error, {&r}});
    } else {
      same->second.push_back(&r);
    }
  }
  for (const auto& [error, points] : errors) {
    if (points.size() == 1) {
      std::cout << fmt::format("point {} ({}): {}\n", points[0]->point->index + 1,
                               points[0]->point->label, error);
      continue;
    }
    if (points.size() == total) {
      std::cout << fmt::format("every point: {}\n", error);
      continue;
    }
    std::vector<size_t> numbers;
    for (const PointRun* r : points) numbers.push_back(r->point->index + 1);
    std::cout << fmt::format("points {}: {}\n", fmt::join(numbers, ", "), error);
  }
  for (const PointRun& r : runs) {
    const std::string which = fmt::format("point {} ({})", r.point->index + 1, r.point->label);
    if (!r.outcome) continue;
    if (r.outcome->verdict.noisy)
      std::cout << fmt::format("{}: {}\n", which, r.outcome->verdict.line());
    if (!r.outcome->check.summary.empty()) {
      std::cout << fmt::format("{}: checks{}:\n", which, r.outcome->check.ok ? "" : " FAILED");
      std::cout << r.outcome->check.summary << "\n";
    }
  }
  std::cout << fmt::format("{} of {} point{} ok", total - failed, total, total == 1 ? "" : "s");
  if (failed > 0) {
    std::vector<std::string> which;
    for (const PointRun& r : runs) {
      if (r.exit_code != kExitOk) which.push_back(std::to_string(r.point->index + 1));
    }
    std::cout << fmt::format("; failed: {} (exit {})", fmt::join(which, ", "), exit_code);
  }
  std::cout << "\n";
  return exit_code;
}

}  // namespace

int run_run(const RunOptions& options, const GlobalOptions& global) {
  Runtime runtime(runtime_options(global));
  // Everything about the config itself is a usage error (exit 2); what happens when it runs
  // is a runtime error (exit 3).
  run::SweepSpec sweep;
  try {
    sweep = run::parse_sweep_config(options.config, runtime.device_types());
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (!sweep.is_sweep()) return run_single(runtime, std::move(*sweep.points[0].spec), options);
  return run_sweep(runtime, sweep, options);
}

}  // namespace kiln::tool
