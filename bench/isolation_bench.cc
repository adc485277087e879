// SPDX-License-Identifier: Apache-2.0
// What measuring in a worker process costs (issue 28; docs/benchmarks.md, "Isolated
// measurement workers"): testing::local_run in this process beside MeasurementWorker::run, the
// same module, arguments and EvaluatorConfig. Run through bench/interleave.py, so that the
// in-process case (the floor of its worker case) and the worker case alternate.
//  - BM_InProcess_Run/E, BM_Worker_Run/E: a whole run of vector add on 1024 float32 with
//    exporter E (tar, so) and number=1, repeat=1, min_repeat_ms=0, so that the run's fixed
//    cost dominates. The worker is started and warmed (one run) before the timed loop; the
//    difference between the two is isolation's per-point cost.
//  - BM_Worker_ColdRun/tar: the first run after a worker starts (the worker is closed, untimed,
//    before each iteration): what the first point of a sweep pays.
//  - BM_InProcess_KernelTime, BM_Worker_KernelTime: the median the evaluator reports for
//    vector add on 1M float32 (number=10, repeat=5), as the manual time and as the counter
//    kernel_median_us; equal within noise when the worker adds nothing to the timing itself.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/measurement_worker.h"

namespace {

const std::string kKernels = KILN_EXAMPLE_KERNEL_DIR;
constexpr int64_t kSmall = 1024;
constexpr int64_t kLarge = int64_t{1} << 20;

// vector_add(a, b, out, alpha) on three float32 vectors of `n` ones.
std::vector<kiln::Any> vector_add_args(int64_t n) {
  std::vector<kiln::Any> args;
  for (int i = 0; i < 3; ++i) {
    kiln::Tensor t = kiln::Tensor::empty({n}, kiln::DataType::Float(32));
    for (float& x : t.host_span<float>()) x = 1.0f;
    args.emplace_back(t);
  }
  args.emplace_back(0.5);
  return args;
}

const kiln::Module& vector_add() {
  static const kiln::Module m = kiln::load_module(kKernels + "/libvector_add.so");
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Steps' mean milliseconds per iteration as counters (<step>_ms), as BM_LocalRunVectorAdd1M.
struct StepClock {
  std::map<std::string, double> seconds;
  kiln::testing::RunHooks hooks() {
    kiln::testing::RunHooks h;
    h.on_step = [this](const std::string& step, double s) { seconds[step] += s; };
    return h;
  }
  void report(benchmark::State& state) const {
    for (const auto& [step, s] : seconds) {
      state.counters[step + "_ms"] = s * 1e3 / static_cast<double>(state.iterations());
    }
  }
};

// The fixed cost of a run: both cases make one untimed run first (plugins, the loader, the
// worker's start), then time whole runs.
const kiln::EvaluatorConfig kFixedCostConfig{1, 1, 0, false};

void BM_InProcess_Run(benchmark::State& state, const char* exporter) {
  const std::vector<kiln::Any> args = vector_add_args(kSmall);
  kiln::testing::local_run(vector_add(), "cpu", args, kFixedCostConfig, exporter);
  StepClock steps;
  const kiln::testing::RunHooks hooks = steps.hooks();
  for (auto _ : state) {
    kiln::testing::local_run(vector_add(), "cpu", args, kFixedCostConfig, exporter, {}, hooks);
  }
  steps.report(state);
}

void BM_Worker_Run(benchmark::State& state, const char* exporter) {
  const std::vector<kiln::Any> args = vector_add_args(kSmall);
  kiln::testing::MeasurementWorker worker(kiln::Runtime::global());
  worker.run(vector_add(), "cpu", args, kFixedCostConfig, exporter);
  StepClock steps;
  const kiln::testing::RunHooks hooks = steps.hooks();
  for (auto _ : state) {
    worker.run(vector_add(), "cpu", args, kFixedCostConfig, exporter, {}, hooks);
  }
  steps.report(state);
  if (worker.starts() != 1) state.SkipWithError("the worker restarted during the timed loop");
}

void BM_Worker_ColdRun(benchmark::State& state, const char* exporter) {
  const std::vector<kiln::Any> args = vector_add_args(kSmall);
  kiln::testing::MeasurementWorker worker(kiln::Runtime::global());
  // The caller's side warm, as in the warm case: only the worker starts cold.
  worker.run(vector_add(), "cpu", args, kFixedCostConfig, exporter);
  StepClock steps;
  const kiln::testing::RunHooks hooks = steps.hooks();
  for (auto _ : state) {
    state.PauseTiming();
    worker.close();
    state.ResumeTiming();
    worker.run(vector_add(), "cpu", args, kFixedCostConfig, exporter, {}, hooks);
  }
  steps.report(state);
  if (worker.starts() != 1 + static_cast<int>(state.iterations())) {
    state.SkipWithError("a worker did not start for each iteration");
  }
}

// The evaluator's reported median for vector add of 1M float32, number=10, repeat=5.
const kiln::EvaluatorConfig kKernelConfig{10, 5, 0, false};

// Sets the manual time to each run's reported median and the counter kernel_median_us to
// their median over the repetition.
template <typename RunFn>
void time_kernel(benchmark::State& state, RunFn run) {
  std::vector<double> medians;
  for (auto _ : state) {
    const double s = run().profile.median();
    medians.push_back(s);
    state.SetIterationTime(s);
  }
  state.counters["kernel_median_us"] = median(medians) * 1e6;
}

void BM_InProcess_KernelTime(benchmark::State& state) {
  const std::vector<kiln::Any> args = vector_add_args(kLarge);
  time_kernel(state,
              [&] { return kiln::testing::local_run(vector_add(), "cpu", args, kKernelConfig); });
}

void BM_Worker_KernelTime(benchmark::State& state) {
  const std::vector<kiln::Any> args = vector_add_args(kLarge);
  kiln::testing::MeasurementWorker worker(kiln::Runtime::global());
  worker.run(vector_add(), "cpu", args, kFixedCostConfig);
  time_kernel(state, [&] { return worker.run(vector_add(), "cpu", args, kKernelConfig); });
}

// Whole runs take 10-100 ms: fixed iteration counts keep a repetition near a second.
BENCHMARK_CAPTURE(BM_InProcess_Run, tar, "tar")->Unit(benchmark::kMillisecond)->Iterations(20);
BENCHMARK_CAPTURE(BM_Worker_Run, tar, "tar")->Unit(benchmark::kMillisecond)->Iterations(20);
BENCHMARK_CAPTURE(BM_InProcess_Run, so, "so")->Unit(benchmark::kMillisecond)->Iterations(10);
BENCHMARK_CAPTURE(BM_Worker_Run, so, "so")->Unit(benchmark::kMillisecond)->Iterations(10);
BENCHMARK_CAPTURE(BM_Worker_ColdRun, tar, "tar")->Unit(benchmark::kMillisecond)->Iterations(10);
BENCHMARK(BM_InProcess_KernelTime)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(5);
BENCHMARK(BM_Worker_KernelTime)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
