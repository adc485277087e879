// SPDX-License-Identifier: Apache-2.0
// The conformance suite (docs/conformance.md): what every device backend plugin and every
// metric collector plugin must do, through the same C++ wrappers the core uses. Shared by the
// installed `kiln-conformance` tool and the in-tree `kiln_conformance_tests`; both register the
// tests at run time, after their Runtime has loaded the plugins, so what is under test is
// resolved against the plugins actually loaded.
#ifndef KILN_TOOLS_CONFORMANCE_SUITE_H_
#define KILN_TOOLS_CONFORMANCE_SUITE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"

namespace testing {
class TestInfo;
}  // namespace testing

namespace kiln::conformance {

// A vendor's module with a kernel computing out[i] = a[i] + alpha * b[i] for float32 vectors,
// one thread per element. Its per-kernel metadata (docs/plugin-abi.md §10.2) is the file
// `<path>.json` when that exists, else "{}". When the metadata describes the kernel with five
// arguments, the fifth is the length `n` (int32 or int64) and is passed; else four are.
struct ModuleSpec {
  std::string device_type;
  std::string path;
  std::string format;
  std::string kernel;
};

// Parses "TYPE:PATH:FORMAT:KERNEL" (PATH may itself contain ':'; TYPE, FORMAT and KERNEL may
// not). Throws ValueError naming `flag` (the option it came from), the spec and the missing or
// empty field.
ModuleSpec parse_module_spec(const std::string& spec, const std::string& flag = "--module");

// What the suite found for one device type or metric collector, resolved against a loaded
// Runtime before the tests run; the tests and the report both read it.
struct Target {
  enum class Kind { kDevice, kCollector };
  // How the type's tests start: run them, skip them all (`reason` says why), or fail them all
  // (a plugin that would serve the type failed to load, or --require-device and no device).
  enum class Disposition { kRun, kSkip, kFail };

  Kind kind = Kind::kDevice;
  std::string name;  // the device type or the collector name
  Disposition disposition = Disposition::kRun;
  std::string reason;                  // why skipped or failed; empty for kRun
  std::optional<PluginStatus> plugin;  // the plugin serving (or meant to serve) the type
  std::string library_sha256;          // of plugin->library; empty when unreadable
  Ref<DeviceBackend> backend;          // null unless the plugin is loaded
  int32_t device_count = 0;
  std::string why_none;  // the backend's reason for zero devices
  // Attributes of each device, as text, in the order the plugin visits them.
  std::vector<std::vector<std::pair<std::string, std::string>>> devices;
  std::optional<ModuleSpec> module;
  std::string module_sha256;  // of module->path; empty when unreadable or no module
  // The kernel of known duration for the timer test (--timing-kernel): spin(out, ns) busy-waits
  // ns nanoseconds and writes ns to out[0], an int64 tensor of one element.
  std::optional<ModuleSpec> timing_kernel;
  std::string timing_kernel_sha256;  // of timing_kernel->path, as module_sha256
  // How long WorksFromFourThreads waits for its threads before it fails as a deadlock.
  double thread_deadline_s = 30;

  // The GoogleTest suite of the target's tests: "DeviceConformance/<type>" or
  // "CollectorConformance/<name>".
  std::string suite() const;
};

// How device types without a plugin or without a device are treated.
struct ResolveOptions {
  // A type with zero devices fails instead of skipping.
  bool require_device = false;
  // Kernels of known duration (Target::timing_kernel), at most one per type; the first wins.
  std::vector<ModuleSpec> timing_kernels;
  // Target::thread_deadline_s of every target: keep it below a per-test deadline that kills the
  // test's process (--test-timeout), so that a deadlock fails with the threads' steps.
  double thread_deadline_s = 30;
};

// Resolves each of `device_types` against `runtime` and attaches the module given for it in
// `modules` (at most one per type; the first wins) and its kernel of known duration. A type no
// considered plugin provides and a plugin that is disabled skip with the reason; a plugin that
// failed to load fails the type's tests with the plugin's reason, so a broken plugin never passes
// by skipping.
std::vector<Target> resolve_targets(const Runtime& runtime,
                                    const std::vector<std::string>& device_types,
                                    const std::vector<ModuleSpec>& modules,
                                    const ResolveOptions& options = {});

// Resolves each collector of `names` against `runtime` as resolve_targets does device types: a
// collector no considered plugin provides, or whose plugin is disabled, skips; one whose plugin
// failed to load fails.
std::vector<Target> resolve_collectors(const Runtime& runtime,
                                       const std::vector<std::string>& names);

// The plugins whose manifest could not be read (state failed, nothing declared, so no device
// type or collector names them): one device target each, named "manifest_<file stem>", whose
// tests all fail with the manifest's error (its file, line and column), so that a folder with a
// broken plugin never passes by leaving it out.
std::vector<Target> resolve_broken_manifests(const Runtime& runtime);

// An input the command line could have given a device type, without which one of its tests
// skips. A run in which a test skipped for lack of a required one is `incomplete`, not `pass`
// (docs/conformance.md, "Exit codes and verdicts"); the tool and the reports list what to add.
struct MissingInput {
  std::string flag;      // "--module" or "--timing-kernel"
  std::string add;       // what to add: "--module cpu:PATH:so:KERNEL"
  std::string what;      // what the input is and, for Kiln's own plugins, an example file
  bool required = true;  // false: an optional deeper check; its skip leaves the run complete
};

// The input whose absence makes the test `test` ("ComputesCorrectResults") of `target` skip, or
// nullopt when that test needs no command-line input there: it was given, the test needs none,
// or the backend lacks the slots that would use it (no module slots, no timer slots).
std::optional<MissingInput> missing_input(const Target& target, const std::string& test);

// Registers the suite's tests with GoogleTest, one test suite per target (Target::suite()).
// `runtime` and `targets` are borrowed and must outlive RUN_ALL_TESTS().
void register_tests(const Runtime& runtime, const std::vector<Target>& targets);

// The outcome of one test, read back from GoogleTest after the test ran, or made by the worker
// supervisor (worker_supervisor.h) for a test whose worker process died or hung.
struct TestOutcome {
  std::string suite;   // "DeviceConformance/cpu"
  std::string name;    // "AllocatesAlignedMemory"
  std::string target;  // the device type or collector: "cpu"
  // kCrashed: the process running the test died (a signal, an exit) or passed the per-test
  // deadline before the test ended; only process isolation records it.
  enum class Status { kPassed, kFailed, kSkipped, kCrashed } status = Status::kPassed;
  std::string message;  // the skip reason, the failure messages or the crash; empty when passed
  int64_t elapsed_ms = 0;

  // "DeviceConformance/cpu.AllocatesAlignedMemory", as --gtest_filter names it.
  std::string full_name() const { return suite + "." + name; }
};
// "pass", "fail", "skip", "crash": the word the reports use.
const char* to_string(TestOutcome::Status status);
// The status `text` names (to_string's inverse), or nullopt for any other text.
std::optional<TestOutcome::Status> status_from_string(const std::string& text);

// The outcome of the test `info`, which has ended (from GoogleTest's OnTestEnd on).
TestOutcome outcome_of(const ::testing::TestInfo& info);

// Every test that ran in this process (those the filter excluded are left out).
std::vector<TestOutcome> collect_outcomes();

}  // namespace kiln::conformance

#endif  // KILN_TOOLS_CONFORMANCE_SUITE_H_
