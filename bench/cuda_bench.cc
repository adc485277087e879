// SPDX-License-Identifier: Apache-2.0
// The cuda backend on a GPU (docs/backends/cuda.md, "Benchmarks"). Every case skips with the
// plugin's reason on a machine without a CUDA device.
//  - Launch overhead: an empty kernel launched through Kiln (a device-code module function, as
//    users call it, and the backend's launch slot) beside a raw cuLaunchKernel loop on the same
//    dlopen'ed libcuda, the same context and the same PTX, in the same run. The ratio case
//    interleaves batches of both and reports kiln_us / raw_us (target: within 1.1x).
//  - Bandwidth: vector add of 64M float32 (examples/kernels/cuda/vector_add.ptx) timed by the
//    evaluator with CUDA events; achieved bandwidth = 3 x 4 x 64M bytes / time, as a fraction
//    of the peak 2 x memory clock x bus width / 8 ("peak_memory_bandwidth_bytes_per_s"), hot
//    and with the L2 flushed before every call (f_preproc "cache_flush_device_l2").
// Environment: KILN_CUDA_BENCH_DRIVER, the driver the raw side opens (default libcuda.so.1).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "driver_api.h"
#include "kiln/kiln.h"

namespace {

// An empty kernel taking one pointer (a tensor argument tells Kiln the device), as PTX that
// any driver since CUDA 11 JIT-compiles for its GPU.
constexpr const char* kEmptyPtx =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry kiln_empty(.param .u64 p)\n"
    "{\n"
    "  ret;\n"
    "}\n";
constexpr const char* kEmptyMetadata =
    R"({"kernels": {"kiln_empty": {"args": ["tensor"], "launch": ["blockIdx.x", "threadIdx.x"]}}})";

// Everything the cases share, set up once: the Kiln side and the raw driver side.
struct Env {
  std::string skip;  // non-empty: why the cases skip
  kiln::Ref<kiln::DeviceBackend> backend;
  kiln::Device device{kDLCUDA, 0};
  kiln::Module empty_module;
  kiln::Function empty;
  kiln::Tensor buffer;
  void* backend_module = nullptr;
  void* backend_kernel = nullptr;
  int64_t peak_bytes_per_s = 0;
  // Raw driver API.
  kiln::cuda::DriverApi api;
  CUcontext context = nullptr;
  CUmodule raw_module = nullptr;
  CUfunction raw_kernel = nullptr;
  CUdeviceptr raw_arg = 0;

  Env() {
    try {
      setup();
    } catch (const std::exception& e) {
      skip = std::string("setup failed: ") + e.what();
    }
  }

  void setup() {
    backend = kiln::Runtime::global().find_backend(kDLCUDA);
    if (!backend) {
      skip = "the cuda plugin is not loaded";
      return;
    }
    std::string why;
    if (backend->device_count(&why) == 0) {
      skip = "no CUDA device: " + why;
      return;
    }
    for (const auto& [key, value] : backend->attributes(0)) {
      if (key == "peak_memory_bandwidth_bytes_per_s") peak_bytes_per_s = value.cast<int64_t>();
    }
    kiln::DeviceCode code;
    code.name = "kiln_empty.ptx";
    code.format = "ptx";
    code.target = "cuda";
    code.data.assign(kEmptyPtx, kEmptyPtx + std::char_traits<char>::length(kEmptyPtx));
    code.metadata_json = kEmptyMetadata;
    std::vector<kiln::DeviceCode> blobs;
    blobs.push_back(code);
    empty_module = kiln::make_device_code_module(std::move(blobs), kiln::Runtime::global());
    empty = empty_module["kiln_empty"];
    buffer = kiln::Tensor::empty({256}, kiln::DataType::Float(32), device);
    backend_module =
        backend->module_load(0, code.data.data(), code.data.size(), "ptx", kEmptyMetadata);
    backend_kernel = backend->module_get_kernel(backend_module, "kiln_empty");

    // The raw side opens the same driver as the plugin's default; KILN_CUDA_BENCH_DRIVER
    // overrides it (e.g. with a plugin set whose cuda entry sets driver_library).
    const char* library = std::getenv("KILN_CUDA_BENCH_DRIVER");
    if (!api.open(library != nullptr && *library != '\0' ? library : "libcuda.so.1", &why)) {
      skip = why;
      return;
    }
    CUdevice dev = 0;
    auto check = [&](CUresult r, const char* what) {
      if (r != CUDA_SUCCESS) {
        throw std::runtime_error(std::string(what) + ": " + kiln::cuda::describe_result(&api, r));
      }
    };
    check(api.cuInit(0), "cuInit");
    check(api.cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(api.cuDevicePrimaryCtxRetain(&context, dev), "cuDevicePrimaryCtxRetain");
    check(api.cuCtxSetCurrent(context), "cuCtxSetCurrent");
    check(api.cuModuleLoadDataEx(&raw_module, kEmptyPtx, 0, nullptr, nullptr),
          "cuModuleLoadDataEx");
    check(api.cuModuleGetFunction(&raw_kernel, raw_module, "kiln_empty"), "cuModuleGetFunction");
    check(api.cuMemAlloc(&raw_arg, 1024), "cuMemAlloc");
  }
};

Env& env() {
  static Env* e = new Env;  // never destroyed: the driver outlives every case
  return *e;
}

bool skipped(benchmark::State& state) {
  if (env().skip.empty()) return false;
  state.SkipWithError(env().skip.c_str());
  for (auto _ : state) {
  }
  return true;
}

void raw_launch(Env& e) {
  void* params[] = {&e.raw_arg};
  if (e.api.cuLaunchKernel(e.raw_kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) !=
      CUDA_SUCCESS) [[unlikely]] {
    std::abort();
  }
}

void raw_sync(Env& e) {
  if (e.api.cuCtxSynchronize() != CUDA_SUCCESS) std::abort();
}

// The raw loop: cuLaunchKernel with a prepared parameter array.
void BM_LaunchRaw(benchmark::State& state) {
  if (skipped(state)) return;
  Env& e = env();
  e.api.cuCtxSetCurrent(e.context);
  for (auto _ : state) raw_launch(e);
  raw_sync(e);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LaunchRaw)->UseRealTime();

// Through Kiln as users call it: the module function with a tensor and the two extents.
void BM_LaunchKilnFunction(benchmark::State& state) {
  if (skipped(state)) return;
  Env& e = env();
  for (auto _ : state) e.empty(e.buffer, int64_t{1}, int64_t{1});
  e.backend->synchronize(0);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LaunchKilnFunction)->UseRealTime();

// Through the backend's launch slot with prepared ABI arguments (what the module function
// ends in).
void BM_LaunchKilnBackend(benchmark::State& state) {
  if (skipped(state)) return;
  Env& e = env();
  const KilnAny args[1] = {kiln::Any(e.buffer).to_abi()};
  const uint32_t one[3] = {1, 1, 1};
  for (auto _ : state) e.backend->launch(e.backend_kernel, args, 1, one, one, 0);
  e.backend->synchronize(0);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LaunchKilnBackend)->UseRealTime();

// Batches of `kBatch` launches, raw and through the Kiln function alternately, each ended by
// a synchronize; reports microseconds per launch of both and their ratio.
void BM_LaunchOverheadRatio(benchmark::State& state) {
  if (skipped(state)) return;
  Env& e = env();
  constexpr int kBatch = 2000;
  using Clock = std::chrono::steady_clock;
  double raw_s = 0, kiln_s = 0;
  int64_t batches = 0;
  for (auto _ : state) {
    e.api.cuCtxSetCurrent(e.context);
    auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) raw_launch(e);
    raw_sync(e);
    auto t1 = Clock::now();
    for (int i = 0; i < kBatch; ++i) e.empty(e.buffer, int64_t{1}, int64_t{1});
    e.backend->synchronize(0);
    auto t2 = Clock::now();
    raw_s += std::chrono::duration<double>(t1 - t0).count();
    kiln_s += std::chrono::duration<double>(t2 - t1).count();
    ++batches;
  }
  const double launches = static_cast<double>(batches) * kBatch;
  state.counters["raw_us"] = raw_s / launches * 1e6;
  state.counters["kiln_us"] = kiln_s / launches * 1e6;
  state.counters["ratio"] = kiln_s / raw_s;
}
BENCHMARK(BM_LaunchOverheadRatio)->UseRealTime()->MinTime(2.0);

// Vector add of 64M float32 timed by the evaluator (CUDA events). Arg 0: hot (10 calls per
// batch); arg 1: the L2 flushed before every call (1 call per batch).
void BM_VectorAdd64M(benchmark::State& state) {
  if (skipped(state)) return;
  Env& e = env();
  const bool flushed = state.range(0) == 1;
  if (flushed && !kiln::registry::get("cache_flush_device_l2")) {
    state.SkipWithError("the core has no cache_flush_device_l2 preprocessor");
    for (auto _ : state) {
    }
    return;
  }
  constexpr int64_t n = int64_t{64} << 20;
  kiln::Module m;
  try {
    m = kiln::load_module(std::string(KILN_EXAMPLE_KERNEL_DIR) + "/cuda/vector_add.ptx");
  } catch (const std::exception& ex) {
    state.SkipWithError((std::string("build kiln_cuda_example_kernels: ") + ex.what()).c_str());
    for (auto _ : state) {
    }
    return;
  }
  kiln::Tensor a = kiln::Tensor::empty({n}, kiln::DataType::Float(32), e.device);
  kiln::Tensor b = kiln::Tensor::empty({n}, kiln::DataType::Float(32), e.device);
  kiln::Tensor out = kiln::Tensor::empty({n}, kiln::DataType::Float(32), e.device);
  kiln::TimeEvaluatorOptions options;
  options.number = flushed ? 1 : 10;
  options.repeat = flushed ? 50 : 10;
  options.f_preproc = flushed ? "cache_flush_device_l2" : "";
  kiln::TimeEvaluator evaluator = kiln::time_evaluator(m["vector_add"], e.device, options);
  const std::vector<kiln::Any> args = {a, b, out, 0.5, n, n / 256, int64_t{256}};
  double seconds = 0;
  std::string timer;
  for (auto _ : state) {
    const kiln::BenchmarkResult r = evaluator(args);
    seconds = r.median();
    timer = r.timer;
    state.SetIterationTime(seconds);
  }
  const double bytes = 3.0 * 4.0 * static_cast<double>(n);
  state.counters["GB_per_s"] = bytes / seconds / 1e9;
  state.counters["peak_GB_per_s"] = static_cast<double>(e.peak_bytes_per_s) / 1e9;
  state.counters["fraction_of_peak"] =
      e.peak_bytes_per_s > 0 ? bytes / seconds / static_cast<double>(e.peak_bytes_per_s) : 0;
  state.SetLabel(std::string(flushed ? "L2 flushed" : "hot") + ", timer " + timer);
}
BENCHMARK(BM_VectorAdd64M)
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
