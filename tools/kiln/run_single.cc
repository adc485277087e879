// SPDX-License-Identifier: Apache-2.0
// `kiln run RUN.yaml` without a `sweep:` section: one run, reported as text (module, device,
// outputs, returned value, the timing table, noise, throughput, steps, checks, profile) or as
// one JSON document, and written as Google Benchmark's document with --benchmark-out.
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <utility>

#include "kiln/detail/timing_table.h"
#include "kiln/tensor.h"
#include "output_file.h"
#include "run_command.h"

namespace kiln::tool {
namespace {

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
                  format_percent(p.evaluator.options.noise.target_rse));
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

}  // namespace

int run_single(Runtime& runtime, run::RunSpec spec, const std::optional<Device>& device_option,
               const RunOptions& options) {
  const Prepared p = prepare(runtime, std::move(spec), device_option);
  Progress progress(Progress::choose(options.progress, options.json, stderr), p.function, stderr);
  // In this process by default (docs/isolation.md): one run has nothing to lose to a crash but
  // itself, and a debugger or profiler attached to kiln sees the kernel.
  std::optional<testing::MeasurementWorker> worker;
  if (options.isolation.value_or("none") == "process" && !p.spec.remote) {
    testing::WorkerOptions worker_options;
    worker_options.timeout_s = options.point_timeout_s;
    worker.emplace(runtime, worker_options);
  }
  const Outcome o =
      execute(runtime, p, progress, worker ? &*worker : nullptr, options.point_timeout_s);

  // Google Benchmark's document, named as its tools expect: in --json under "benchmark", and
  // at the top level in --benchmark-out's file, which compare.py reads as is.
  const BenchmarkDocument benchmark = benchmark_document(
      o.result.profile, benchmark_name(p.function, p.inputs, runtime.device_str(p.device)));
  if (options.benchmark_out) write_output_file(*options.benchmark_out, benchmark.text + "\n");

  if (options.json) {
    nlohmann::json out = outcome_json(runtime, p, o);
    out["benchmark"] = benchmark.value;
    std::cout << out.dump(2) << "\n";
  } else {
    print_outcome(runtime, p, o);
  }
  if (o.profile && !options.json) std::cout << "profile:\n" << o.profile->table() << "\n";
  return o.check.ok ? kExitOk : kExitCheckFailed;
}

}  // namespace kiln::tool
