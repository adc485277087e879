// `kiln run RUN.yaml`: run a module's function on a device through local_run, print its
// outputs and timing, check them against expected values.
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_checks.h"
#include "commands.h"
#include "kiln/kiln.h"
#include "kiln/noise_verdict.h"
#include "kiln/run_config.h"
#include "kiln/throughput.h"
#include "kiln/timing_table.h"
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

// The peak memory bandwidth the backend reports for `device`, if any (kiln/throughput.h).
std::optional<double> device_peak_bandwidth(const Runtime& runtime, const Device& device) {
  for (const BackendInfo& backend : runtime.backends()) {
    for (const DeviceInfo& d : backend.devices) {
      if (d.device.type == device.type && d.device.id == device.id) {
        return peak_memory_bandwidth(d.attributes);
      }
    }
  }
  return std::nullopt;
}

}  // namespace

int run_run(const RunOptions& options, const GlobalOptions& global) {
  Runtime runtime(runtime_options(global));
  // Everything about the config itself is a usage error (exit 2); what happens when it runs
  // is a runtime error (exit 3).
  run::RunSpec spec;
  std::vector<Any> inputs;
  Device device;
  try {
    spec = run::parse_run_config(options.config, runtime.device_types());
    if (options.device) {
      parse_device_option(runtime, *options.device);
      spec.device = *options.device;
    }
    // Refused here, not replaced by device 0: the run uses and reports the device named.
    device = checked_device(runtime, spec, options.device.has_value());
    check_exporter(runtime, spec);
    inputs = run::make_inputs(spec);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  Module module = runtime.load_module(spec.module);
  const std::string function = spec.function.empty() ? module.entry_name() : spec.function;
  if (function.empty()) {
    throw ValueError(
        fmt::format("{}: the module {} has no entry function; name one with "
                    "`function:`",
                    spec.file.string(), spec.module.string()));
  }
  // Before the export, and naming the module the config gives rather than the exported copy.
  if (!spec.function.empty()) check_function(module, function, spec);

  Progress progress(Progress::choose(options.progress, options.json, stderr), function, stderr);
  testing::RunHooks hooks;
  hooks.function = function;
  hooks.evaluator = spec.extra;
  hooks.device_index = device.id;
  std::vector<std::pair<std::string, double>> steps;
  hooks.on_step = [&](const std::string& step, double seconds) {
    steps.emplace_back(step, seconds);
    progress.step_done();
  };
  if (progress.enabled()) {
    const double timeout_s = spec.extra.noise.timeout_s;
    hooks.on_repeat = [&progress, timeout_s](int32_t done, int32_t total) {
      progress.repeat(done, total, timeout_s);
    };
  }
  testing::RunResult result;
  std::string where = "local";
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
    where = fmt::format("remote, key '{}' via tracker {}:{}", *rpc.tracker_key, *rpc.tracker_host,
                        *rpc.tracker_port);
    progress.note(fmt::format("requesting a '{}' server from {}:{}", *rpc.tracker_key,
                              *rpc.tracker_host, *rpc.tracker_port));
    result = testing::rpc_run(runtime, module, spec.device, inputs, spec.evaluator, rpc,
                              spec.exporter, std::nullopt, hooks);
  } else {
    result = testing::local_run(runtime, module, spec.device, inputs, spec.evaluator, spec.exporter,
                                std::nullopt, hooks);
  }
  progress.finish();
  run::CheckResult check = run::check_outputs(spec, result.outputs);
  const BenchmarkResult& timing = result.profile;
  // This machine's load says nothing about a remote server's measurement.
  const NoiseVerdict verdict = noise_verdict(timing, spec.remote ? std::nullopt : host_load());
  // From the median; a remote server's device attributes are not known here: no peak.
  const Throughput throughput =
      compute_throughput(spec.throughput, argument_bytes(inputs), timing.median(),
                         spec.remote ? std::nullopt : device_peak_bandwidth(runtime, device));
  // Nothing to say for a function of scalars without given bytes or flops.
  const bool show_throughput = throughput.bytes > 0 || throughput.flops.has_value();
  std::optional<profiling::Report> profile;
  if (spec.profile) profile = profile_run(spec, *spec.profile, runtime);

  // Google Benchmark's document, named as its tools expect: in --json under "benchmark", and
  // at the top level in --benchmark-out's file, which compare.py reads as is.
  BenchmarkResult named = timing;
  named.name = benchmark_name(function, inputs, runtime.device_str(device));
  const std::string benchmark_json = named.to_json();
  if (options.benchmark_out) write_output_file(*options.benchmark_out, benchmark_json + "\n");

  if (options.json) {
    nlohmann::json out;
    out["config"] = spec.file.string();
    out["module"] = spec.module.string();
    out["function"] = function;
    out["device"] = runtime.device_str(device);
    out["where"] = where;
    out["timer"] = timing.timer;
    out["exporter"] = spec.exporter;
    out["outputs"] = nlohmann::json::array();
    for (size_t i = 0; i < result.outputs.size(); ++i) {
      const Any& v = result.outputs[i];
      nlohmann::json o{{"name", spec.inputs[i].name}};
      if (v.type_code() == KILN_TYPE_TENSOR) {
        Tensor t = v.cast<Tensor>();
        o["shape"] = std::vector<int64_t>(t.shape().begin(), t.shape().end());
        o["dtype"] = t.dtype().str();
        o["summary"] = run::summarize(t);
      } else {
        o["value"] = v.str();
      }
      out["outputs"].push_back(o);
    }
    out["timing"] = {{"results_s", timing.results()}, {"mean_s", timing.mean()},
                     {"median_s", timing.median()},   {"min_s", timing.min()},
                     {"max_s", timing.max()},         {"std_s", timing.std()},
                     {"numbers", timing.numbers},     {"stop_reason", timing.stop_reason}};
    // The table's statistics and the noise verdict (docs/evaluator.md), for scripts.
    const stats::Summary& sum = verdict.summary;
    out["timing"]["stddev_sample_s"] = sum.stddev;
    out["timing"]["cv"] = sum.cv;
    out["timing"]["rse"] = sum.rse;
    out["timing"]["p50_s"] = sum.p50;
    out["timing"]["p90_s"] = sum.p90;
    out["timing"]["p99_s"] = sum.p99;
    nlohmann::json noise = {
        {"noisy", verdict.noisy}, {"reasons", verdict.reasons}, {"line", verdict.line()}};
    if (verdict.load)
      noise["load"] = {{"load1", verdict.load->load1}, {"cores", verdict.load->cores}};
    if (verdict.off_cpu) noise["off_cpu"] = *verdict.off_cpu;
    if (verdict.cpu_pressure) noise["cpu_pressure"] = *verdict.cpu_pressure;
    out["noise"] = std::move(noise);
    if (show_throughput) {
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
    out["benchmark"] = nlohmann::json::parse(benchmark_json);
    out["steps_s"] = nlohmann::json::object();
    for (const auto& [step, seconds] : steps) out["steps_s"][step] = seconds;
    out["check"] = {{"ok", check.ok}, {"summary", check.summary}};
    if (profile) out["profile"] = nlohmann::json::parse(profile->json());
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << fmt::format(
        "module:   {}\nfunction: {}\ndevice:   {} ({}, timer: {})\nexport:   {}\n",
        spec.module.string(), function, runtime.device_str(device), where, timing.timer,
        spec.exporter);
    std::cout << "outputs:\n";
    for (size_t i = 0; i < result.outputs.size(); ++i) {
      const Any& v = result.outputs[i];
      std::cout << fmt::format(
          "  {:<8} {}\n", spec.inputs[i].name,
          v.type_code() == KILN_TYPE_TENSOR ? run::summarize(v.cast<Tensor>()) : v.str());
    }
    // A noise rule's run says where the RSE got to, beside its target.
    const std::string noise_stop =
        fmt::format(", stopped: {} at RSE {} (target {})", timing.stop_reason,
                    verdict.summary.n >= 2 ? format_percent(verdict.summary.rse) : "-",
                    format_percent(spec.extra.noise.target_rse));
    std::cout << fmt::format("timing ({} repeat{} of {} call{}{}):\n", timing.results().size(),
                             timing.results().size() == 1 ? "" : "s",
                             timing.numbers.empty() ? 0 : timing.numbers.back(),
                             timing.numbers.empty() || timing.numbers.back() == 1 ? "" : "s",
                             timing.stop_reason.empty() ? "" : noise_stop);
    std::cout << timing_table(timing) << "\n";
    if (verdict.noisy) std::cout << verdict.line() << "\n";
    if (show_throughput) std::cout << throughput.line() << "\n";
    std::cout << "steps:";
    for (const auto& [step, seconds] : steps) {
      std::cout << fmt::format(" {} {:.1f} ms", step, seconds * 1e3);
    }
    std::cout << "\n";
    if (!check.summary.empty()) std::cout << "checks:\n" << check.summary << "\n";
  }
  if (profile && !options.json) std::cout << "profile:\n" << profile->table() << "\n";
  return check.ok ? kExitOk : kExitCheckFailed;
}

}  // namespace kiln::tool
