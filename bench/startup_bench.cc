// Discovery + load time of the default plugin set in a cold process: each iteration starts
// kiln_bench_startup_probe, which times its own Runtime construction (manifest discovery,
// YAML parsing, dlopen, negotiation) and prints it; process start-up itself is not counted.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace {

void BM_ColdProcessDiscoveryAndLoad(benchmark::State& state) {
  int loaded = 0;
  for (auto _ : state) {
    FILE* pipe = popen(KILN_STARTUP_PROBE, "r");
    double ms = 0;
    if (pipe == nullptr || std::fscanf(pipe, "%lf %d", &ms, &loaded) != 2) {
      state.SkipWithError("the startup probe did not report");
      if (pipe != nullptr) pclose(pipe);
      return;
    }
    if (pclose(pipe) != 0) {
      state.SkipWithError("the startup probe failed: no plugin loaded");
      return;
    }
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["plugins_loaded"] = loaded;
}

BENCHMARK(BM_ColdProcessDiscoveryAndLoad)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(30);

}  // namespace

BENCHMARK_MAIN();
