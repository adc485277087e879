// SPDX-License-Identifier: Apache-2.0
// `kiln run RUN.yaml`: what its jobs share. run_command.cc reads the config and --device and
// picks the job; run_execute.cc prepares and runs one configuration (a single run or one point
// of a sweep); run_single.cc reports a single run; run_sweep.cc runs a sweep and writes its JSON
// document; sweep_table.cc prints a sweep's table; run_json.cc is the JSON document of one run;
// benchmark_json.cc builds Google Benchmark's documents.
#ifndef KILN_TOOLS_KILN_RUN_COMMAND_H_
#define KILN_TOOLS_KILN_RUN_COMMAND_H_

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "kiln/detail/noise_verdict.h"
#include "kiln/detail/run_config.h"
#include "kiln/detail/throughput.h"
#include "kiln/device.h"
#include "kiln/measurement_worker.h"
#include "kiln/module.h"
#include "kiln/profiling/report.h"
#include "kiln/runtime.h"
#include "kiln/testing.h"
#include "progress.h"

namespace kiln::tool {

// A config checked against the runtime, with its device, its evaluator settings, its arguments
// and its module loaded.
struct Prepared {
  run::RunSpec spec;
  // The device the run uses: --device (parsed once by run_run) when given, else the config's,
  // parsed once by checked_device. Everything after prepare() takes it from here.
  Device device;
  run::EvaluatorSettings evaluator;  // how it is timed (run::evaluator_settings)
  std::vector<Any> inputs;
  Module module;
  std::string function;
};

// Checks `spec` against `runtime` (device, exporter, function) and builds the arguments.
// `device_option`: --device, already parsed. What is wrong with the config is a UsageError
// (exit 2); a module that fails to load throws the runtime's error (exit 3).
Prepared prepare(Runtime& runtime, run::RunSpec spec, const std::optional<Device>& device_option);

// What one run measured and checked.
struct Outcome {
  testing::RunResult result;
  std::string where = "local";
  std::string server;      // "host:port" of the server that measured a remote run
  run::CheckResult check;  // outputs and result together
  std::vector<std::pair<std::string, double>> steps;
  NoiseVerdict verdict;
  Throughput throughput;
  bool show_throughput = false;
  std::optional<profiling::Report> profile;
};

// A remote run that went on past --point-timeout (counted from its server's grant): it
// ends as `hung` (exit 3), as a local worker past it does. Its session is closed.
class RemoteTimeoutError : public RuntimeError {
 public:
  explicit RemoteTimeoutError(const std::string& message) : RuntimeError(message) {}
};

// Runs `p` through local_run (or rpc_run for a `remote:` section), then checks its outputs and
// result, judges the noise, computes the throughput and profiles it when the config asks.
// `worker`: where a local run is measured instead of this process (nullptr: here); its
// testing::WorkerError (a crash, hang or kill) propagates. A config's `profile:` section still
// runs here. `remote_timeout_s` (--point-timeout; 0: none) bounds a remote run from its
// server's grant to its end, whatever the server does (a server that drips its replies or
// never answers): past it every wait ends and RemoteTimeoutError is thrown.
Outcome execute(Runtime& runtime, const Prepared& p, Progress& progress,
                testing::MeasurementWorker* worker = nullptr, double remote_timeout_s = 0);

// What a run is, for crash notes: "'relu' on cpu:0 (plugin cpu) (runs/relu.yaml)".
std::string running_what(const Runtime& runtime, const Prepared& p);

// The JSON document of one run (`kiln run --json`), without its "benchmark" (a sweep gathers
// those).
nlohmann::json outcome_json(const Runtime& runtime, const Prepared& p, const Outcome& o);

// One point of a sweep, however far it got.
struct PointRun {
  const run::SweepPoint* point = nullptr;
  std::optional<Prepared> prepared;
  std::optional<Outcome> outcome;
  int exit_code = kExitOk;
  // ok, check_failed, invalid (exit 2), error (exit 3), and for an isolated point whose worker
  // died: crashed, hung, killed or exited (exit 3).
  std::string status = "ok";
  std::string error;
  std::string name;  // the benchmark name, unique in the sweep
  // Kept once the point is measured, when its tensors are let go: the benchmark name from its
  // function, first tensor and device (before the sweep makes names unique), and its JSON
  // document (outcome_json).
  std::string base_name;
  std::optional<nlohmann::json> document;
  // A remote point: the attempts made (more than 1 when a server was lost) and why each retry.
  int attempts = 0;
  std::vector<std::string> retried;
};

// How a sweep's points are measured (RunOptions, resolved).
struct SweepExecution {
  bool isolated = true;        // local points in worker processes
  double point_timeout_s = 0;  // an isolated or remote point's deadline (0: none)
  int jobs = 1;                // remote points at once
  int retries = 2;             // a lost server's point tried again this many times
};

// The Google Benchmark name of a run: function / elements of the first tensor argument / its
// dtype / device ("relu/4194304/float32/opencl:0"), so one kernel at two sizes, dtypes or
// devices are told apart; without a tensor argument, function / device.
std::string benchmark_name(const std::string& function, const std::vector<Any>& inputs,
                           const std::string& device);

// One run's timing as Google Benchmark's document, its entries named `name`: `text` exactly as
// BenchmarkResult::to_json writes it (what --benchmark-out gets), `value` the same document as
// JSON for the documents the tool builds around it.
struct BenchmarkDocument {
  std::string text;
  nlohmann::json value;
};
BenchmarkDocument benchmark_document(const BenchmarkResult& timing, const std::string& name);

// One Google Benchmark document for every point of a sweep, each entry named after its point
// and saying its device; a failed point is an entry with error_occurred, as Google Benchmark
// writes a benchmark that failed.
nlohmann::json sweep_benchmark_document(const Runtime& runtime, const std::vector<PointRun>& runs);

// The single run's report: text, or with `options.json` the JSON document with its benchmark.
int run_single(Runtime& runtime, run::RunSpec spec, const std::optional<Device>& device_option,
               const RunOptions& options);

// Refuses --device (`device_text`) for a sweep whose axes include the device (exit 2).
void refuse_swept_device(const run::SweepSpec& sweep, const std::string& device_text);

// Runs every point of `sweep`, a failing point reported and the others run; prints the table
// (sweep_table.cc) or the JSON document. Returns the largest exit code of the points.
int run_sweep(Runtime& runtime, const run::SweepSpec& sweep,
              const std::optional<Device>& device_option, const RunOptions& options);

// The text report of a sweep: a line naming it, one row per point, what a row cannot hold
// (errors, noise verdicts, check summaries) beneath, and "<n> of <total> points ok".
// `exit_code` and `failed`: the sweep's exit code and its count of points that failed.
void print_sweep_table(const run::SweepSpec& sweep, const std::vector<PointRun>& runs,
                       int exit_code, size_t failed);

}  // namespace kiln::tool

#endif  // KILN_TOOLS_KILN_RUN_COMMAND_H_
