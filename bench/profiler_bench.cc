// SPDX-License-Identifier: Apache-2.0
// Profiler overhead per call: a no-op kernel called bare, inside Profiler::start_call /
// stop_call with no collector, and with the perf collector plugin. The difference to the bare
// call is what profiling adds to each call (target: under 1 us with no collector).
#include <benchmark/benchmark.h>

#include <string>

#include "kiln/kiln.h"
#include "kiln/profiling/profiler.h"

namespace {

constexpr int64_t kIterations = 100000;

kiln::Function noop() {
  static kiln::Module m = kiln::load_module(std::string(KILN_EXAMPLE_KERNEL_DIR) + "/libcalls.so");
  return m["noop"];
}

void BM_Unprofiled(benchmark::State& state) {
  kiln::Function f = noop();
  for (auto _ : state) benchmark::DoNotOptimize(f());
}

void profiled(benchmark::State& state,
              std::vector<std::shared_ptr<kiln::profiling::MetricCollector>> collectors) {
  kiln::Function f = noop();
  kiln::profiling::Profiler profiler({kiln::Device::cpu()}, std::move(collectors));
  profiler.start();
  for (auto _ : state) {
    profiler.start_call("noop", kiln::Device::cpu());
    benchmark::DoNotOptimize(f());
    profiler.stop_call();
  }
  profiler.stop();
  state.counters["rows"] = static_cast<double>(profiler.report().calls.size());
}

void BM_ProfiledNoCollector(benchmark::State& state) { profiled(state, {}); }

void BM_ProfiledPerf(benchmark::State& state) {
  std::shared_ptr<kiln::profiling::MetricCollector> perf;
  try {
    perf = kiln::profiling::plugin_collector("perf");
  } catch (const kiln::Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  profiled(state, {perf});
}

BENCHMARK(BM_Unprofiled);
BENCHMARK(BM_ProfiledNoCollector)->Iterations(kIterations);
BENCHMARK(BM_ProfiledPerf)->Iterations(kIterations);

}  // namespace

BENCHMARK_MAIN();
