// SPDX-License-Identifier: Apache-2.0
// Start-up: discovery and load of the default plugin set (configs/plugins.yaml: 7 plugins load
// where they are all built), and a whole `kiln devices` process. Every iteration is a fresh
// process, so that loading is cold. Run through bench/interleave.py (docs/benchmarks.md,
// "Plugin discovery and load").
//
// In-process, as the probe (kiln_bench_startup_probe) times and reports it:
//   BM_Kiln_Load     the default Runtime's construction (manifests, YAML, dlopen, negotiation)
//   BM_Floor_Load    dlopen of the same plugin libraries alone, in the same order
//   BM_Tvm_Load      dlopen of TVM's libtvm_ffi.so and libtvm_runtime.so (they register their
//                    functions and device APIs as they load; TVM has no plugin discovery);
//                    built where apache-tvm was found
// Whole processes, timed from here (spawn to exit, output to /dev/null):
//   BM_Kiln_Process  `kiln devices`: load the default set, enumerate and print every device
//   BM_Floor_Process `kiln --version`: the same executable and libraries, no Runtime
//   BM_Tvm_Process   the probe loading those two (TVM has no device-listing command)
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

extern char** environ;

namespace {

// Runs argv to completion with stdout and stderr on /dev/null; false when it fails.
bool run_quietly(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  return rc == 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

// Runs the probe with `args`; its first line is "<ms> <loaded>", the rest is returned in `rest`.
bool probe(const std::string& args, double* ms, int* loaded, std::vector<std::string>* rest) {
  FILE* pipe = popen((std::string(KILN_STARTUP_PROBE) + " " + args).c_str(), "r");
  if (pipe == nullptr) return false;
  bool ok = std::fscanf(pipe, "%lf %d\n", ms, loaded) == 2;
  char line[4096];
  while (rest != nullptr && std::fgets(line, sizeof line, pipe) != nullptr) {
    std::string s(line);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    rest->push_back(s);
  }
  ok = pclose(pipe) == 0 && ok;
  return ok;
}

void run_probe(benchmark::State& state, const std::string& args) {
  int loaded = 0;
  for (auto _ : state) {
    double ms = 0;
    if (!probe(args, &ms, &loaded, nullptr)) {
      state.SkipWithError(("the startup probe failed: " + args).c_str());
      return;
    }
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["loaded"] = loaded;
}

void run_process(benchmark::State& state, const std::vector<std::string>& argv) {
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    if (!run_quietly(argv)) {
      state.SkipWithError(("failed: " + argv[0]).c_str());
      return;
    }
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

// The plugin libraries the default set loads, as the probe lists them (quoted for popen).
std::string plugin_libraries() {
  double ms = 0;
  int loaded = 0;
  std::vector<std::string> libraries;
  std::string quoted;
  if (!probe("--list", &ms, &loaded, &libraries)) return quoted;
  for (const std::string& l : libraries) quoted += " '" + l + "'";
  return quoted;
}

void BM_Kiln_Load(benchmark::State& state) { run_probe(state, ""); }

void BM_Floor_Load(benchmark::State& state) {
  static const std::string libraries = plugin_libraries();
  if (libraries.empty()) {
    state.SkipWithError("the probe listed no plugin library");
    return;
  }
  run_probe(state, "--dlopen" + libraries);
}

void BM_Kiln_Process(benchmark::State& state) { run_process(state, {KILN_TOOL, "devices"}); }
void BM_Floor_Process(benchmark::State& state) { run_process(state, {KILN_TOOL, "--version"}); }

BENCHMARK(BM_Kiln_Load)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);
BENCHMARK(BM_Floor_Load)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);
BENCHMARK(BM_Kiln_Process)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);
BENCHMARK(BM_Floor_Process)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);

#ifdef KILN_TVM_RUNTIME_LIB
// libtvm_ffi.so first: libtvm_runtime.so needs it and has no path to it (Python loads it first).
void BM_Tvm_Load(benchmark::State& state) {
  run_probe(state,
            std::string("--dlopen '") + KILN_TVM_FFI_LIB + "' '" + KILN_TVM_RUNTIME_LIB + "'");
}
void BM_Tvm_Process(benchmark::State& state) {
  run_process(state, {KILN_STARTUP_PROBE, "--dlopen", KILN_TVM_FFI_LIB, KILN_TVM_RUNTIME_LIB});
}
BENCHMARK(BM_Tvm_Load)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);
BENCHMARK(BM_Tvm_Process)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);
#endif

}  // namespace

BENCHMARK_MAIN();
