// SPDX-License-Identifier: Apache-2.0
// kiln-conformance: runs the device conformance suite (docs/conformance.md) against the device
// plugins in any plugin folder, with the vendor's own module, and writes a report a vendor can
// attach to a release. Exit codes: 0 pass (or nothing ran), 1 a test failed or crashed, 2 bad
// usage or configuration, 3 an unexpected error, 4 incomplete (no failure, but a test skipped
// for lack of an input such as --module), 128+N stopped by signal N (SIGINT, SIGTERM).
//
// By default the tests run in worker processes (worker_supervisor.h): this executable started
// again with the hidden option `--worker PID`, which runs the tests and streams their events
// to fd 3 instead of writing reports.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "kiln/config_error.h"
#include "kiln/detail/wait_status.h"
#include "kiln/kiln.h"
#include "kiln/sdk/support/atomic_file.hpp"
#include "kiln/version.h"
#include "report.h"
#include "suite.h"
#include "worker_events.h"
#include "worker_supervisor.h"

namespace {

constexpr int kExitPass = 0;
constexpr int kExitFail = 1;
constexpr int kExitUsage = 2;
constexpr int kExitError = 3;
// Nothing failed, but a test skipped for lack of an input the command could have given.
constexpr int kExitIncomplete = 4;
// Stopped by SIGINT or SIGTERM: 128 + the signal, as a shell reports a process it killed.
constexpr int kExitSignalBase = 128;

struct Options {
  std::vector<std::filesystem::path> plugin_paths;
  std::optional<std::filesystem::path> plugin_set;
  std::vector<std::string> devices;
  std::vector<std::string> collectors;
  std::vector<std::string> modules;
  std::vector<std::string> timing_kernels;
  std::string report;
  std::string report_json;
  bool require_device = false;
  std::string isolation = "process";
  double test_timeout_s = 60;
  std::optional<int> worker_of;  // --worker PID: this process is a worker of PID
};

// A usage error: printed with the program name, exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_of(" \t'\"\\$`;&|<>()*?") == std::string::npos) return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `loaded` followed by every name a considered plugin declares as `prefix`NAME in its manifest
// ("device:", "collector:"), each once, in search order: plugins that failed or are disabled
// count too, so that a broken vendor plugin shows up as a failure instead of disappearing.
std::vector<std::string> with_declared(std::vector<std::string> loaded,
                                       const kiln::Runtime& runtime, const std::string& prefix) {
  for (const kiln::PluginStatus& s : runtime.plugins()) {
    for (const std::string& p : s.provides) {
      if (p.rfind(prefix, 0) != 0) continue;
      const std::string name = p.substr(prefix.size());
      if (std::find(loaded.begin(), loaded.end(), name) == loaded.end()) loaded.push_back(name);
    }
  }
  return loaded;
}

// Every device type a considered plugin serves or would serve, from the manifests and the plugin
// set alone (Runtime::declared_device_types): listing them loads no plugin and starts no driver.
std::vector<std::string> all_device_types(const kiln::RuntimeOptions& options) {
  std::vector<std::string> types;
  for (const kiln::DeclaredDeviceType& d : kiln::Runtime::declared_device_types(options)) {
    types.push_back(d.type_name);
  }
  return types;
}

// Every collector a considered plugin provides or would provide: loaded ones first.
std::vector<std::string> all_collectors(const kiln::Runtime& runtime) {
  return with_declared(runtime.collector_names(), runtime, "collector:");
}

// Throws UsageError for a `flag` ("--module", "--timing-kernel") among `modules` that repeats a
// type, names a type not under test (`types`) or a file that does not exist.
void check_modules(const char* flag, const std::vector<kiln::conformance::ModuleSpec>& modules,
                   const std::vector<std::string>& types) {
  std::set<std::string> seen;
  for (const auto& m : modules) {
    if (!seen.insert(m.device_type).second) {
      throw UsageError(
          fmt::format("{}: more than one given for device type '{}'", flag, m.device_type));
    }
    if (std::find(types.begin(), types.end(), m.device_type) == types.end()) {
      throw UsageError(fmt::format(
          "{} {}:...: device type '{}' is not under test ({})", flag, m.device_type, m.device_type,
          types.empty() ? "none" : fmt::format("{}", fmt::join(types, ", "))));
    }
    std::error_code ec;
    if (!std::filesystem::is_regular_file(m.path, ec)) {
      throw UsageError(
          fmt::format("{} {}:{}:...: no such file '{}'", flag, m.device_type, m.path, m.path));
    }
  }
}

// Throws UsageError for a --device or --collector no plugin found provides (naming `broken`,
// the manifests that could not be read, as where it may be; `known_types`,
// `known_collectors`: all_device_types, all_collectors) and for a --module or --timing-kernel
// that check_modules refuses.
void check_usage(const Options& options, const std::vector<kiln::conformance::ModuleSpec>& modules,
                 const std::vector<kiln::conformance::ModuleSpec>& timing_kernels,
                 const std::vector<std::string>& types, const std::vector<std::string>& known,
                 const std::vector<std::string>& collectors,
                 const std::vector<std::string>& broken) {
  const std::string known_text = known.empty()
                                     ? "none: no device plugin was found in the search paths"
                                     : fmt::format("{}", fmt::join(known, ", "));
  for (const std::string& type : options.devices) {
    if (std::find(known.begin(), known.end(), type) == known.end()) {
      // The truth about where to look: a manifest that did not parse may be the one.
      std::string hint = "add its folder with --plugin-path";
      if (!broken.empty()) {
        hint = fmt::format(
            "a plugin manifest found could not be read and may be the one "
            "serving it: {}",
            fmt::join(broken, "; "));
      }
      throw UsageError(fmt::format(
          "--device {}: no plugin found serves device type '{}' (device types found: {}); {}", type,
          type, known_text, hint));
    }
  }
  for (const std::string& name : options.collectors) {
    if (std::find(collectors.begin(), collectors.end(), name) == collectors.end()) {
      throw UsageError(fmt::format(
          "--collector {}: no plugin found provides collector '{}' (collectors found: {}); add "
          "its folder with --plugin-path",
          name, name,
          collectors.empty() ? "none" : fmt::format("{}", fmt::join(collectors, ", "))));
    }
  }
  check_modules("--module", modules, types);
  check_modules("--timing-kernel", timing_kernels, types);
}

int run(int argc, char** argv) {
  // GoogleTest's own flags (--gtest_filter, --gtest_repeat, ...) go to GoogleTest; the rest are
  // this tool's. Split first: GoogleTest would take --help for its own.
  std::vector<char*> gtest_argv = {argv[0]};
  std::vector<std::string> own_args;
  // A worker's command line: all arguments but the filter, which each worker gets its own of.
  std::vector<std::string> worker_argv = {argv[0]};
  std::string command_line = quote(argv[0]);
  for (int i = 1; i < argc; ++i) {
    command_line += " " + quote(argv[i]);
    const std::string arg = argv[i];
    if (arg.rfind("--gtest_", 0) == 0) {
      gtest_argv.push_back(argv[i]);
    } else {
      own_args.push_back(arg);
    }
    if (arg.rfind("--gtest_filter", 0) != 0) worker_argv.push_back(arg);
  }

  CLI::App app{
      "kiln-conformance: run the device conformance suite against device plugins and write a "
      "report to attach to a release (docs/conformance.md).\nExit codes: 0 pass (or nothing "
      "ran), 1 a test failed or crashed, 2 usage or configuration error, 3 unexpected error, 4 "
      "incomplete (a test skipped for lack of input, e.g. --module; the output says what to "
      "add), 130/143 interrupted (SIGINT/SIGTERM).",
      "kiln-conformance"};
  app.set_version_flag("--version", std::string("kiln-conformance ") + kiln::version() +
                                        " (plugin ABI " + kiln::abi_version() + ")");
  app.footer(
      "GoogleTest flags pass through (--gtest_filter=PATTERN, --gtest_list_tests, "
      "--gtest_repeat=N, --gtest_output=xml:FILE, ...); tests are named "
      "DeviceConformance/<type>.<Test>.");
  Options options;
  app.add_option("--plugin-path", options.plugin_paths,
                 "Directory to search for plugin manifests; its plugins join the active set "
                 "(repeatable; searched before $KILN_PLUGIN_PATH; default: none)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--plugin-set", options.plugin_set,
                 "Plugin set YAML to use (default: $KILN_PLUGIN_SET, else "
                 "<prefix>/share/kiln/plugins.yaml)");
  app.add_option("--device", options.devices,
                 "Device type to test (repeatable; default: with neither --device nor "
                 "--collector, every device type a plugin found serves or would serve; else none)");
  app.add_option("--collector", options.collectors,
                 "Metric collector to test (repeatable; default: with neither --device nor "
                 "--collector, every collector a plugin found provides; else none)");
  app.add_option("--module", options.modules,
                 "TYPE:PATH:FORMAT:KERNEL: the module whose KERNEL computes out[i] = a[i] + "
                 "alpha*b[i] on TYPE, metadata from PATH.json if present (repeatable, one per "
                 "type; default: none, the module tests skip and the run is incomplete)");
  app.add_option("--timing-kernel", options.timing_kernels,
                 "TYPE:PATH:FORMAT:KERNEL: a kernel of known duration on TYPE for the timer test: "
                 "KERNEL(out, ns) busy-waits ns nanoseconds and writes ns to out[0] (int64), "
                 "metadata from PATH.json if present (repeatable, one per type; default: none, "
                 "the test skips; the timer is still judged around device copies)");
  app.add_option("--report", options.report,
                 "Write the Markdown report to this file (default: not written)");
  app.add_option("--report-json", options.report_json,
                 "Write the JSON report to this file (default: not written)");
  app.add_flag("--require-device", options.require_device,
               "Fail a device type that has no device instead of skipping it (default: off)");
  app.add_option("--isolation", options.isolation,
                 "process: run the tests in a worker process, so that a test that crashes or "
                 "hangs is recorded as crashed and the run goes on in a fresh worker; none: run "
                 "them in this process, where a crash ends the run without a report (default: "
                 "process)")
      ->check(CLI::IsMember({"process", "none"}));
  app.add_option("--test-timeout", options.test_timeout_s,
                 "Seconds a test may run before its worker is killed and the test recorded as "
                 "crashed; 0: no limit; process isolation only (default: 60)")
      ->check(CLI::NonNegativeNumber);
  // Internal: set by the parent on the command line of each worker it starts.
  app.add_option("--worker", options.worker_of, "")->group("");
  std::vector<std::string> reversed(own_args.rbegin(), own_args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitPass : kExitUsage;
  }

  if (options.worker_of) {
    // Die with the parent: a crash of the parent must not leave a worker running tests. A
    // parent that died before the prctl has already left this worker to another parent.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != *options.worker_of) {
      std::fprintf(stderr, "kiln-conformance: --worker %d: that process is not this one's parent\n",
                   *options.worker_of);
      return kExitError;
    }
    if (::fcntl(kiln::conformance::kWorkerEventFd, F_SETFD, FD_CLOEXEC) != 0) {
      throw UsageError(
          fmt::format("--worker: no event pipe on fd {}", kiln::conformance::kWorkerEventFd));
    }
    // Each line reaches the output before a crash can lose what a buffer held.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
  }

  // GoogleTest moves the argv entries it consumes, terminating NULL included (as argv[argc]).
  int gtest_argc = static_cast<int>(gtest_argv.size());
  gtest_argv.push_back(nullptr);
  ::testing::InitGoogleTest(&gtest_argc, gtest_argv.data());

  std::vector<kiln::conformance::ModuleSpec> modules;
  for (const std::string& spec : options.modules) {
    modules.push_back(kiln::conformance::parse_module_spec(spec));
  }
  std::vector<kiln::conformance::ModuleSpec> timing_kernels;
  for (const std::string& spec : options.timing_kernels) {
    timing_kernels.push_back(kiln::conformance::parse_module_spec(spec, "--timing-kernel"));
  }
  kiln::RuntimeOptions runtime_options;
  runtime_options.plugin_set = options.plugin_set;
  runtime_options.search_paths = options.plugin_paths;
  // Neither --device nor --collector: everything found. Naming either tests only what is named.
  // With devices alone, only the plugins that serve one of them (or no device type at all:
  // loaders, collectors) are loaded, so that `--device cpu` starts no GPU driver. (A named
  // collector may come from a plugin that also serves devices: then every plugin loads.)
  const std::vector<std::string> known_types = all_device_types(runtime_options);
  const bool everything = options.devices.empty() && options.collectors.empty();
  if (options.collectors.empty() && !options.devices.empty()) {
    runtime_options.only_device_types = options.devices;
  }
  kiln::Runtime runtime(runtime_options);

  const std::vector<std::string> known_collectors = all_collectors(runtime);
  const std::vector<std::string>& types = everything ? known_types : options.devices;
  const std::vector<std::string>& collectors = everything ? known_collectors : options.collectors;
  // Manifests that could not be read: "<manifest>: <error at file:line:column>".
  std::vector<std::string> broken;
  for (const kiln::PluginStatus& s : runtime.plugins()) {
    if (s.state == kiln::PluginStatus::State::kFailed && s.provides.empty()) {
      broken.push_back(fmt::format("plugin {}: {}", s.name, s.reason));
    }
  }
  check_usage(options, modules, timing_kernels, types, known_types, known_collectors, broken);
  kiln::conformance::ResolveOptions resolve;
  resolve.require_device = options.require_device;
  resolve.timing_kernels = timing_kernels;
  // Half the per-test deadline, so that WorksFromFourThreads names a deadlock's stuck threads
  // before the worker is killed for it.
  if (options.isolation == "process" && options.test_timeout_s > 0) {
    resolve.thread_deadline_s = std::min(resolve.thread_deadline_s, options.test_timeout_s / 2);
  }
  std::vector<kiln::conformance::Target> targets =
      kiln::conformance::resolve_targets(runtime, types, modules, resolve);
  for (auto& t : kiln::conformance::resolve_collectors(runtime, collectors)) {
    targets.push_back(std::move(t));
  }
  // A plugin whose manifest cannot be read serves nothing anyone could name: it fails the run
  // whatever was asked for, never leaves it by omission.
  for (auto& t : kiln::conformance::resolve_broken_manifests(runtime)) {
    targets.push_back(std::move(t));
  }

  if (options.worker_of) {
    kiln::conformance::stream_test_events(kiln::conformance::kWorkerEventFd);
    kiln::conformance::register_tests(runtime, targets);
    const int status = RUN_ALL_TESTS();
    kiln::conformance::write_done_event(kiln::conformance::kWorkerEventFd);
    return status == 0 ? kExitPass : kExitFail;
  }

  kiln::conformance::ReportContext context;
  context.command_line = command_line;
  context.gtest_filter = GTEST_FLAG_GET(filter);
  context.isolation = options.isolation;
  std::vector<kiln::conformance::TestOutcome> outcomes;
  int gtest_status = 0;
  // Listing runs no plugin code: no worker needed.
  if (options.isolation == "none" || GTEST_FLAG_GET(list_tests)) {
    kiln::conformance::register_tests(runtime, targets);
    gtest_status = RUN_ALL_TESTS();
    if (GTEST_FLAG_GET(list_tests)) return gtest_status == 0 ? kExitPass : kExitFail;
    outcomes = kiln::conformance::collect_outcomes();
  } else {
    kiln::conformance::WorkerOptions worker;
    worker.argv = worker_argv;
    worker.gtest_filter = context.gtest_filter;
    worker.test_timeout_s = options.test_timeout_s;
    kiln::conformance::WorkerRun run = kiln::conformance::run_tests_in_workers(worker, targets);
    outcomes = std::move(run.outcomes);
    context.run_errors = std::move(run.run_errors);
    context.interrupted_by = run.interrupted_by;
  }

  for (const auto& p : runtime.search_paths()) context.search_paths.push_back(p.string());
  if (auto set = runtime.plugin_set_path()) context.plugin_set = set->string();
  if (!options.report.empty()) {
    kiln::sdk::write_file_atomically(
        options.report, kiln::conformance::markdown_report(context, targets, outcomes));
  }
  if (!options.report_json.empty()) {
    kiln::sdk::write_file_atomically(options.report_json,
                                     kiln::conformance::json_report(context, targets, outcomes));
  }

  const kiln::conformance::Summary summary =
      kiln::conformance::summarize_run(context, outcomes, targets);
  std::printf("\nkiln-conformance %s: %s (%d passed, %d failed, %d skipped, %d crashed)\n",
              kiln::version(), summary.verdict.c_str(), summary.passed, summary.failed,
              summary.skipped, summary.crashed);
  for (const std::string& error : context.run_errors) std::printf("run error: %s\n", error.c_str());
  for (const auto& t : targets) {
    std::printf("  %-10s %-12s %s%s%s\n",
                t.kind == kiln::conformance::Target::Kind::kDevice ? "device" : "collector",
                t.name.c_str(),
                t.plugin ? (t.plugin->name + " " + t.plugin->version).c_str() : "(no plugin)",
                t.reason.empty() ? "" : ": ", t.reason.c_str());
  }
  if (summary.verdict == "nothing ran") {
    std::printf(
        "nothing ran: no test passed or failed (use --require-device to fail a device "
        "type without devices)\n");
  }
  const std::vector<kiln::conformance::MissingInputEntry> inputs =
      kiln::conformance::missing_inputs(outcomes, targets);
  bool optional_heading = false;
  for (const auto& e : inputs) {
    if (e.input.required && &e == &inputs.front()) {
      std::printf("incomplete: %d test(s) skipped for lack of input; to run them, add:\n",
                  summary.incomplete);
    }
    if (!e.input.required && !optional_heading) {
      std::printf("optional (skipped; the run is complete without it):\n");
      optional_heading = true;
    }
    std::printf("  %s  (%s: %s): %s\n", e.input.add.c_str(), e.target.c_str(),
                fmt::format("{}", fmt::join(e.tests, ", ")).c_str(), e.input.what.c_str());
  }
  if (!options.report.empty()) std::printf("report: %s\n", options.report.c_str());
  if (!options.report_json.empty()) std::printf("JSON report: %s\n", options.report_json.c_str());
  if (context.interrupted_by != 0) {
    std::printf("interrupted by %s: the tests that had not ended are not in the report\n",
                kiln::detail::signal_name(context.interrupted_by).c_str());
    return kExitSignalBase + context.interrupted_by;
  }
  if (summary.verdict == "fail" || gtest_status != 0) return kExitFail;
  return summary.verdict == "incomplete" ? kExitIncomplete : kExitPass;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "kiln-conformance: %s\n", e.what());
    return kExitUsage;
  } catch (const kiln::ValueError& e) {  // bad --module spec, malformed plugin set (ConfigError)
    std::fprintf(stderr, "kiln-conformance: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-conformance: %s\n", e.what());
    return kExitError;
  }
}
