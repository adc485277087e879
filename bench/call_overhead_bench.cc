// Packed-call overhead: a call from C++ into a function a kernel library exports through the
// plugin ABI, beside the floor (the same work through a plain C function pointer from dlsym),
// with 0 arguments, 3 int64 arguments and 3 tensor arguments. Also the name lookup, which
// Kiln pays once per Function, not per call.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/kiln.h"

namespace {

const std::string kCalls = std::string(KILN_EXAMPLE_KERNEL_DIR) + "/libcalls.so";

template <typename F>
F plain(const char* symbol) {
  // A second handle to the library the Module loaded: same code, no Kiln in between.
  static void* handle = dlopen(kCalls.c_str(), RTLD_NOW | RTLD_LOCAL);
  void* f = handle != nullptr ? dlsym(handle, symbol) : nullptr;
  if (f == nullptr) {
    std::fprintf(stderr, "cannot find %s in %s\n", symbol, kCalls.c_str());
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

kiln::Module& calls() {
  static kiln::Module m = kiln::load_module(kCalls);
  return m;
}

void BM_Floor_NoArgs(benchmark::State& state) {
  auto f = plain<void (*)()>("kiln_bench_noop_plain");
  for (auto _ : state) f();
}

void BM_Kiln_NoArgs(benchmark::State& state) {
  kiln::Function f = calls()["noop"];
  for (auto _ : state) benchmark::DoNotOptimize(f());
}

void BM_Floor_Int64x3(benchmark::State& state) {
  auto f = plain<int64_t (*)(int64_t, int64_t, int64_t)>("kiln_bench_add3_plain");
  int64_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(f(i++, 2, 3));
}

void BM_Kiln_Int64x3(benchmark::State& state) {
  kiln::Function f = calls()["add3"];
  int64_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(f(i++, int64_t{2}, int64_t{3}));
}

void BM_Floor_Tensorx3(benchmark::State& state) {
  auto f = plain<void (*)(DLTensor*, DLTensor*, DLTensor*)>("kiln_bench_touch3_plain");
  kiln::Tensor a = kiln::Tensor::empty({16}, kiln::DataType::Float(32));
  for (auto _ : state) f(a.dl(), a.dl(), a.dl());
}

void BM_Kiln_Tensorx3(benchmark::State& state) {
  kiln::Function f = calls()["touch3"];
  kiln::Tensor a = kiln::Tensor::empty({16}, kiln::DataType::Float(32));
  for (auto _ : state) benchmark::DoNotOptimize(f(a, a, a));
}

void BM_Kiln_NameLookup(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(calls().get_function("add3"));
}

BENCHMARK(BM_Floor_NoArgs);
BENCHMARK(BM_Kiln_NoArgs);
BENCHMARK(BM_Floor_Int64x3);
BENCHMARK(BM_Kiln_Int64x3);
BENCHMARK(BM_Floor_Tensorx3);
BENCHMARK(BM_Kiln_Tensorx3);
BENCHMARK(BM_Kiln_NameLookup);

}  // namespace

BENCHMARK_MAIN();
