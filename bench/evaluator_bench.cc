// The time evaluator's own cost and its truth.
//  - Overhead: the per-call time the evaluator reports for a no-op kernel (number=1000,
//    repeat=10, median) beside a bare loop of direct calls to the same packed function.
//  - Accuracy: a kernel that spins for 100 us, 1 ms and 10 ms; the evaluator's median beside
//    an independent measure, the process's CPU time (CLOCK_PROCESS_CPUTIME_ID) over the same
//    calls divided by their count.
//  - local_run end to end for vector add of 1M float32, split into its steps.
#include <benchmark/benchmark.h>
#include <time.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>

#include "kiln/kiln.h"

namespace {

const std::string kKernels = KILN_EXAMPLE_KERNEL_DIR;

kiln::Module& calls() {
  static kiln::Module m = kiln::load_module(kKernels + "/libcalls.so");
  return m;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// `calls` direct calls through the packed callable: the same statements as the evaluator's
// timed batch, without the evaluator around them.
[[gnu::noinline]] void bare_batch(const KilnCallable& c, int64_t calls) {
  for (int64_t i = 0; i < calls; ++i) {
    KilnAny ret;
    ret.type_code = KILN_TYPE_NONE;
    ret.flags = 0;
    if (c.call(c.self, nullptr, 0, &ret) != nullptr) [[unlikely]]
      std::abort();
  }
}

// Reports, as its time per iteration, ns per call of a bare loop of 1000 direct calls to the
// same packed function between two clock reads: the floor, structured like one timed batch.
void BM_BareLoopNoop(benchmark::State& state) {
  const KilnCallable c = calls()["noop"].callable();
  constexpr int kCalls = 1000;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    bare_batch(c, kCalls);
    const auto stop = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(stop - start).count() / kCalls);
  }
}

// Reports, as its time per iteration, the evaluator's median seconds per call.
void BM_EvaluatorReportedNoop(benchmark::State& state) {
  kiln::TimeEvaluator e = kiln::time_evaluator(calls(), "noop", kiln::Device::cpu(), 1000, 10);
  for (auto _ : state) {
    const kiln::BenchmarkResult r = e({});
    state.SetIterationTime(r.median());
  }
}

void BM_Accuracy(benchmark::State& state) {
  const int64_t ns = state.range(0);
  kiln::TimeEvaluatorOptions o;
  o.number = ns >= 10'000'000 ? 1 : 10;
  o.repeat = 5;
  kiln::TimeEvaluator e(calls()["spin"], kiln::Device::cpu(), o);
  double error_pct = 0, evaluator_us = 0, cpu_us = 0;
  for (auto _ : state) {
    const double cpu0 = process_cpu_seconds();
    const kiln::BenchmarkResult r = e({kiln::Any(ns)});
    const double cpu = process_cpu_seconds() - cpu0;
    const double calls_made = 1 + static_cast<double>(o.number) * o.repeat;
    cpu_us = cpu / calls_made * 1e6;
    evaluator_us = r.median() * 1e6;
    error_pct = (evaluator_us - cpu_us) / cpu_us * 100;
    state.SetIterationTime(r.median());
  }
  state.counters["evaluator_median_us"] = evaluator_us;
  state.counters["cpu_time_per_call_us"] = cpu_us;
  state.counters["error_pct"] = error_pct;
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

BENCHMARK(BM_BareLoopNoop)->UseManualTime()->Iterations(2000);
BENCHMARK(BM_EvaluatorReportedNoop)->UseManualTime()->Iterations(200);
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
