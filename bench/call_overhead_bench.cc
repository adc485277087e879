// SPDX-License-Identifier: Apache-2.0
// Packed-call overhead: a call from C++ into a function a kernel library exports through the
// plugin ABI, with 0 arguments, 3 int64 arguments (the int64 result read back) and 3 tensor
// arguments, and the name lookup, which Kiln pays once per Function, not per call.
//
//   BM_Floor_*  the same body through a plain C function pointer from dlsym (the fastest of 8
//               placements of that loop: bench/fastest_loop.h), or dlsym itself for the lookup
//   BM_Kiln_*   kiln::Function of libcalls.so (examples/kernels/calls.cc)
//   BM_Tvm_*    tvm::ffi::Function of the same bodies built as a tvm-ffi library
//               (bench/tvm/tvm_ffi_calls.cc, TVM_FFI_DLL_EXPORT_TYPED_FUNC), loaded with
//               tvm::ffi::Module::LoadFromFile; built only where the tvm-ffi wheel is found
//
// Like for like: both runtimes call the same C++ body through their own packed convention, the
// int64 result is cast back to int64 on both sides, tensors pass as borrowed DLTensor pointers
// (Kiln: a kiln::Tensor; tvm-ffi: a DLTensor*). Run through bench/interleave.py.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fastest_loop.h"
#include "kiln/kiln.h"

#ifdef KILN_BENCH_TVM_FFI_CALLS
#include <tvm/ffi/container/tensor.h>  // DLTensor* arguments
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#endif

namespace {

const std::string kCalls = std::string(KILN_EXAMPLE_KERNEL_DIR) + "/libcalls.so";
// Calls per timed batch of a floor: clock reads add ~0.005 ns per call.
constexpr int64_t kFloorBatch = 10000;

void* calls_handle() {
  // A second handle to the library the Module loaded: same code, no Kiln in between.
  static void* handle = dlopen(kCalls.c_str(), RTLD_NOW | RTLD_LOCAL);
  return handle;
}

template <typename F>
F plain(const char* symbol) {
  void* f = calls_handle() != nullptr ? dlsym(calls_handle(), symbol) : nullptr;
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

// Reports ns per call of the fastest placement of a batch of body(i) (manual time).
template <typename Body>
void run_floor(benchmark::State& state, const Body& body) {
  for (auto _ : state) {
    state.SetIterationTime(kiln_bench::fastest_batch_seconds(body, kFloorBatch) / kFloorBatch);
  }
}

void BM_Floor_NoArgs(benchmark::State& state) {
  auto f = plain<void (*)()>("kiln_bench_noop_plain");
  run_floor(state, [f](int64_t) { f(); });
}

void BM_Kiln_NoArgs(benchmark::State& state) {
  kiln::Function f = calls()["noop"];
  for (auto _ : state) benchmark::DoNotOptimize(f());
}

void BM_Floor_Int64x3(benchmark::State& state) {
  auto f = plain<int64_t (*)(int64_t, int64_t, int64_t)>("kiln_bench_add3_plain");
  run_floor(state, [f](int64_t i) { benchmark::DoNotOptimize(f(i, 2, 3)); });
}

void BM_Kiln_Int64x3(benchmark::State& state) {
  kiln::Function f = calls()["add3"];
  int64_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f(i++, int64_t{2}, int64_t{3}).cast<int64_t>());
  }
}

void BM_Floor_Tensorx3(benchmark::State& state) {
  auto f = plain<void (*)(DLTensor*, DLTensor*, DLTensor*)>("kiln_bench_touch3_plain");
  kiln::Tensor a = kiln::Tensor::empty({16}, kiln::DataType::Float(32));
  DLTensor* t = const_cast<DLTensor*>(a.dl());
  run_floor(state, [f, t](int64_t) { f(t, t, t); });
}

void BM_Kiln_Tensorx3(benchmark::State& state) {
  kiln::Function f = calls()["touch3"];
  kiln::Tensor a = kiln::Tensor::empty({16}, kiln::DataType::Float(32));
  for (auto _ : state) benchmark::DoNotOptimize(f(a, a, a));
}

void BM_Floor_NameLookup(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(dlsym(calls_handle(), "kiln_bench_add3_plain"));
}

void BM_Kiln_NameLookup(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(calls().get_function("add3"));
}

// A floor's manual time is per call while an iteration makes 8 x kFloorBatch calls: a fixed
// iteration count (~0.1 s), since Google Benchmark would size the run by the manual time.
constexpr int kFloorIterations = 1000;
BENCHMARK(BM_Floor_NoArgs)->UseManualTime()->Iterations(kFloorIterations);
BENCHMARK(BM_Kiln_NoArgs);
BENCHMARK(BM_Floor_Int64x3)->UseManualTime()->Iterations(kFloorIterations);
BENCHMARK(BM_Kiln_Int64x3);
BENCHMARK(BM_Floor_Tensorx3)->UseManualTime()->Iterations(kFloorIterations);
BENCHMARK(BM_Kiln_Tensorx3);
BENCHMARK(BM_Floor_NameLookup);
BENCHMARK(BM_Kiln_NameLookup);

#ifdef KILN_BENCH_TVM_FFI_CALLS
tvm::ffi::Module& tvm_calls() {
  static tvm::ffi::Module m = tvm::ffi::Module::LoadFromFile(KILN_BENCH_TVM_FFI_CALLS);
  return m;
}

tvm::ffi::Function tvm_function(const char* name) { return tvm_calls()->GetFunction(name).value(); }

void BM_Tvm_NoArgs(benchmark::State& state) {
  tvm::ffi::Function f = tvm_function("noop");
  for (auto _ : state) benchmark::DoNotOptimize(f());
}

void BM_Tvm_Int64x3(benchmark::State& state) {
  tvm::ffi::Function f = tvm_function("add3");
  int64_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f(i++, int64_t{2}, int64_t{3}).cast<int64_t>());
  }
}

void BM_Tvm_Tensorx3(benchmark::State& state) {
  tvm::ffi::Function f = tvm_function("touch3");
  kiln::Tensor a = kiln::Tensor::empty({16}, kiln::DataType::Float(32));
  DLTensor* t = const_cast<DLTensor*>(a.dl());
  for (auto _ : state) benchmark::DoNotOptimize(f(t, t, t));
}

void BM_Tvm_NameLookup(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(tvm_calls()->GetFunction("add3"));
}

BENCHMARK(BM_Tvm_NoArgs);
BENCHMARK(BM_Tvm_Int64x3);
BENCHMARK(BM_Tvm_Tensorx3);
BENCHMARK(BM_Tvm_NameLookup);
#endif

}  // namespace

BENCHMARK_MAIN();
