// SPDX-License-Identifier: Apache-2.0
// `kiln profile RUN.yaml` and the `profile:` section of `kiln run`: one warm-up call, then profile
// calls of the run's function with metric collectors into a kiln::profiling::Report.
#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <optional>

#include "cli_checks.h"
#include "commands.h"
#include "crash_note.h"
#include "kiln/config_error.h"
#include "kiln/detail/run_config.h"
#include "kiln/device_backend.h"
#include "kiln/kiln.h"
#include "kiln/profiling/profiler.h"
#include "kiln/vm/virtual_machine.h"
#include "output_file.h"
#include "supervised.h"

namespace kiln::tool {
namespace {

// "float32[4, 4], float32[4]" for the tensor arguments (SPEC.md §3.1's ShapeString).
std::string argument_shapes(const std::vector<Any>& args) {
  std::vector<std::string> parts;
  for (const Any& a : args) {
    if (a.type_code() != KILN_TYPE_TENSOR) continue;
    Tensor t = a.cast<Tensor>();
    parts.push_back(fmt::format("{}[{}]", t.dtype().str(), fmt::join(t.shape(), ", ")));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// The collector `c.name` from its plugin loaded afresh with `c.options_json`; options the
// plugin refuses are a usage error (exit 2), as a malformed configuration is.
std::shared_ptr<profiling::MetricCollector> collector_with_options(
    const run::ProfileSpec::Collector& c, const Runtime& runtime) {
  try {
    return profiling::plugin_collector(c.name, c.options_json, runtime);
  } catch (const ConfigError&) {
    throw;
  } catch (const ValueError& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

profiling::Report profile_run(const run::RunSpec& spec, const run::ProfileSpec& profile,
                              Device device, Runtime& runtime) {
  Module module = runtime.load_module(spec.module);
  const std::string function = spec.function.empty() ? module.entry_name() : spec.function;
  // A VM program gets a VM of its own, whose kernel calls become rows nested in each call.
  std::optional<vm::VirtualMachine> machine;
  if (vm::executable_of(module) != nullptr) machine.emplace(module, std::vector<Device>{device});
  if (!machine && !spec.function.empty()) check_function(module, function, spec);
  Function f = machine ? machine->get_function(function) : module.get_function(function);

  std::vector<Any> args;
  for (const Any& a : run::make_inputs(spec)) {
    if (a.type_code() != KILN_TYPE_TENSOR) {
      args.push_back(a);
      continue;
    }
    Tensor src = a.cast<Tensor>();
    Tensor dst = Tensor::empty(std::vector<int64_t>(src.shape().begin(), src.shape().end()),
                               src.dtype(), device, runtime);
    dst.copy_from(src);
    args.emplace_back(dst);
  }

  std::vector<std::shared_ptr<profiling::MetricCollector>> collectors;
  for (const run::ProfileSpec::Collector& c : profile.collectors) {
    collectors.push_back(c.options_json.empty() ? profiling::plugin_collector(c.name, runtime)
                                                : collector_with_options(c, runtime));
  }
  // One warm-up call, not profiled: a first call may build device code (an OpenCL program takes
  // ~100 ms on PoCL), load a module onto the device or page in its memory, none of which the
  // profiled calls should average in. Synchronized, so that none of its work runs into them.
  const auto warmup_start = std::chrono::steady_clock::now();
  f.call_packed(args);
  runtime.backend(device.type)->synchronize(device.id);
  const double warmup_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - warmup_start)
          .count();
  profiling::MetricMap configuration{
      {std::string(profiling::kWarmupCallsConfig), profiling::Count{1}},
      {std::string(profiling::kWarmupDurationConfig), profiling::Duration{warmup_us}},
      {"Executor", std::string(machine ? "VM" : "kiln run")},
      {"Module", spec.module.string()},
      {"Device", profiling::device_report_name(device, runtime.device_types())},
      {"Timer", std::string(runtime.backend(device.type)->has_timer() ? "device" : "wall")}};
  for (const auto& s : runtime.plugins()) {
    if (s.state == PluginStatus::State::kLoaded) {
      configuration["Plugin " + s.name] = s.version;
    }
  }
  profiling::Profiler profiler({device}, collectors, configuration, runtime);
  const std::string shapes = argument_shapes(args);
  profiler.start();
  if (machine) machine->set_profiler(&profiler);
  for (int32_t i = 0; i < profile.calls; ++i) {
    profiler.start_call(function, device, {{"Argument Shapes", shapes}});
    f.call_packed(args);
    profiler.stop_call();
  }
  if (machine) machine->set_profiler(nullptr);
  profiler.stop();
  profiling::Report report = profiler.report();

  if (profile.table) write_output_file(*profile.table, report.table());
  if (profile.csv) write_output_file(*profile.csv, report.csv());
  if (profile.json) write_output_file(*profile.json, report.json());
  if (profile.trace) write_output_file(*profile.trace, report.chrome_trace());
  return report;
}

int run_profile(const ProfileOptions& options, const GlobalOptions& global) {
  Runtime runtime(runtime_options(global));
  run::RunSpec spec;
  Device device;
  try {
    spec = run::parse_run_config(options.config, runtime.device_types());
    // --device is parsed here, once (an unknown type names its plugin), and replaces the
    // config's device.
    std::optional<Device> device_option;
    if (options.device) device_option = runtime.parse_device(*options.device);
    device = checked_device(runtime, spec, device_option);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  const Ref<DeviceBackend> backend = runtime.find_backend(device.type);
  const std::string what =
      fmt::format("the profiled function{} on {}{} ({})",
                  spec.function.empty() ? std::string() : fmt::format(" '{}'", spec.function),
                  runtime.device_str(device),
                  backend ? fmt::format(" (plugin {})", backend->plugin_name()) : std::string(),
                  spec.file.string());
  if (options.isolation == "process") {
    // The same command in a child that profiles in-process (the later --isolation wins).
    std::vector<std::string> arguments = options.arguments;
    arguments.insert(arguments.end(), {"--isolation", "none"});
    return run_supervised(arguments, what);
  }
  run::ProfileSpec profile = spec.profile.value_or(run::ProfileSpec{});
  for (const auto& c : options.collectors) profile.collectors.push_back({c, ""});
  if (options.calls) profile.calls = *options.calls;
  const CrashNoteScope note(what);
  profiling::Report report = profile_run(spec, profile, device, runtime);
  std::cout << (options.json ? report.json() : report.table()) << "\n";
  return kExitOk;
}

}  // namespace kiln::tool
