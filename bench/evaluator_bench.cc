// SPDX-License-Identifier: Apache-2.0
// The time evaluator's own cost and its truth. Run through bench/interleave.py
// (docs/benchmarks.md, "Evaluator overhead" and "Evaluator accuracy").
//  - Overhead, for libcalls.so's noop (number=1000, repeat=10):
//      BM_Kiln_EvalNoop            the evaluator's reported median, seconds per call
//      BM_Floor_EvalNoop           the floor: the statements of the evaluator's timed batch (a
//                                  call through the packed callable, its error and result
//                                  checks) in a batch of 1000 between two clock reads, the
//                                  fastest of 8 placements of that loop (bench/fastest_loop.h):
//                                  code placement alone moves such a loop by up to ~0.8 ns/call
//      BM_Kiln_EvalNoopOuterClock  a clock around the whole evaluator call over the calls it
//                                  made (1 + number x repeat): what the report leaves out
//    TVM's evaluator on the same body: bench/tvm/tvm_evaluator_bench.py (BM_Tvm_EvalNoop*).
//  - Accuracy: a kernel that spins for 100 us, 1 ms and 10 ms. The independent measure is the
//    thread's CPU time over each repeat alone (read by f_preproc, which runs right before a
//    repeat, and by on_repeat, right after it; the warm-up call is outside), per call; the
//    evaluator's median per call is compared with the median of those, over every repeat of
//    every iteration.
//  - local_run end to end for vector add of 1M float32, split into its steps.
#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "fastest_loop.h"
#include "kiln/kiln.h"

namespace {

const std::string kKernels = KILN_EXAMPLE_KERNEL_DIR;
constexpr int kNumber = 1000;
constexpr int kRepeat = 10;

kiln::Module& calls() {
  static kiln::Module m = kiln::load_module(kKernels + "/libcalls.so");
  return m;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void BM_Floor_EvalNoop(benchmark::State& state) {
  const KilnCallable c = calls()["noop"].callable();
  // The statements of the evaluator's run_batch (core/src/eval/time_evaluator.cc).
  auto call = [c](int64_t) {
    KilnAny ret;
    ret.type_code = KILN_TYPE_NONE;
    ret.flags = kiln::kAnyFlagAcceptsHostObjects;
    if (c.call(c.self, nullptr, 0, &ret) != nullptr) [[unlikely]]
      std::abort();
    if (ret.type_code != KILN_TYPE_NONE) [[unlikely]]
      std::abort();
  };
  for (auto _ : state) {
    state.SetIterationTime(kiln_bench::fastest_batch_seconds(call, kNumber) / kNumber);
  }
}

void BM_Kiln_EvalNoop(benchmark::State& state) {
  kiln::TimeEvaluator e =
      kiln::time_evaluator(calls(), "noop", kiln::Device::cpu(), kNumber, kRepeat);
  for (auto _ : state) state.SetIterationTime(e({}).median());
}

void BM_Kiln_EvalNoopOuterClock(benchmark::State& state) {
  kiln::TimeEvaluator e =
      kiln::time_evaluator(calls(), "noop", kiln::Device::cpu(), kNumber, kRepeat);
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(e({}));
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    state.SetIterationTime(took.count() / (1 + kNumber * kRepeat));
  }
}

// Thread CPU time of each repeat, between f_preproc (before) and on_repeat (after).
struct RepeatClock {
  double started = 0;
  std::vector<double> seconds;
};
RepeatClock g_repeat_clock;

KILN_REGISTER_GLOBAL(accuracy_start, "kiln_bench.accuracy_start",
                     [](int64_t) { g_repeat_clock.started = thread_cpu_seconds(); });

void BM_Accuracy(benchmark::State& state) {
  const int64_t ns = state.range(0);
  kiln::TimeEvaluatorOptions o;
  o.number = ns >= 10'000'000 ? 1 : 10;
  o.repeat = 5;
  o.f_preproc = "kiln_bench.accuracy_start";
  o.on_repeat = [](int32_t, int32_t) {
    g_repeat_clock.seconds.push_back(thread_cpu_seconds() - g_repeat_clock.started);
  };
  kiln::TimeEvaluator e(calls()["spin"], kiln::Device::cpu(), o);
  std::vector<double> evaluator, independent;
  for (auto _ : state) {
    g_repeat_clock.seconds.clear();
    const kiln::BenchmarkResult r = e({kiln::Any(ns)});
    for (size_t i = 0; i < r.results().size(); ++i) {
      evaluator.push_back(r.results()[i]);
      independent.push_back(g_repeat_clock.seconds.at(i) / static_cast<double>(r.numbers[i]));
    }
    state.SetIterationTime(r.median());
  }
  const double evaluator_s = median(evaluator), independent_s = median(independent);
  state.counters["evaluator_median_us"] = evaluator_s * 1e6;
  state.counters["cpu_time_median_us"] = independent_s * 1e6;
  state.counters["error_pct"] = (evaluator_s - independent_s) / independent_s * 100;
}

void BM_LocalRunVectorAdd1M(benchmark::State& state) {
  kiln::Module m = kiln::load_module(kKernels + "/libvector_add.so");
  const int64_t n = 1 << 20;
  std::vector<kiln::Any> args;
  for (int i = 0; i < 3; ++i) {
    kiln::Tensor t = kiln::Tensor::empty({n}, kiln::DataType::Float(32));
    for (float& x : t.host_span<float>()) x = 1.0f;
    args.emplace_back(t);
  }
  args.emplace_back(0.5);
  std::map<std::string, double> steps;
  kiln::testing::RunHooks hooks;
  hooks.on_step = [&](const std::string& step, double seconds) { steps[step] += seconds; };
  kiln::EvaluatorConfig config{10, 3, 0, false};
  const std::string exporter = state.range(0) == 0 ? "tar" : "so";
  for (auto _ : state) kiln::testing::local_run(m, "cpu", args, config, exporter, {}, hooks);
  for (const auto& [step, seconds] : steps) {
    state.counters[step + "_ms"] =
        benchmark::Counter(seconds * 1e3 / static_cast<double>(state.iterations()));
  }
  state.SetLabel(exporter);
}

// Manual time is per call while an iteration makes thousands: fixed iteration counts (~0.1 s),
// since Google Benchmark would size the run by the manual time.
BENCHMARK(BM_Floor_EvalNoop)->UseManualTime()->Iterations(5000);
BENCHMARK(BM_Kiln_EvalNoop)->UseManualTime()->Iterations(5000);
BENCHMARK(BM_Kiln_EvalNoopOuterClock)->UseManualTime()->Iterations(5000);
BENCHMARK(BM_Accuracy)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->Arg(10'000'000)
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LocalRunVectorAdd1M)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
