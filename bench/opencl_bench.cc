// SPDX-License-Identifier: Apache-2.0
// The opencl backend beside the raw OpenCL API, on device opencl:0. Run through
// bench/interleave.py (docs/benchmarks.md, "OpenCL launch overhead and event timing"); cases are
// named BM_<path>_<what> so that --versus pairs each path with BM_Raw_<what>.
//
//  - Launch of an empty kernel (examples/kernels/opencl/empty.cl, two arguments: a buffer and
//    an int, one work-item), BM_<path>_Launch/<batch>: `batch` launches enqueued back to back,
//    then the queue drained (clFinish / synchronize), inside the timed region; the reported
//    time is per launch. The paths:
//      Raw           clEnqueueNDRangeKernel on a cl_kernel built directly with the OpenCL API,
//                    setting an argument (clSetKernelArg) only when its value differs from the
//                    one set last, as the backend does (docs/backends/opencl.md): the same
//                    buffer and n repeat here, so neither sets any after the first launch;
//      Kiln          the backend's launch slot (what the host's kernel functions call) with
//                    prepared ABI arguments, on the same queue as Raw (a Kiln stream is a
//                    cl_command_queue);
//      KilnDefault   the launch slot on the device's default queue (stream NULL);
//      KilnFunction  the kernel as a module function, load_module("empty.cl")["empty"](out, n,
//                    grid, block), which always launches on the default queue.
//    The default queue is the plugin's own and no API reaches its cl_command_queue, so Raw
//    cannot run on it; it is made by the same clCreateCommandQueue call, in the same context,
//    as the stream Raw uses. KilnDefault beside Kiln shows what the queue itself changes.
//  - The host's cost of a launch alone, BM_<path>_HostCost/<count> (Raw, Kiln): `count`
//    launches enqueued while the stream is held by a marker waiting on a user event, so no
//    kernel runs beside the enqueuing thread; only the enqueues are timed (per launch), the
//    release and the drain are not.
//  - Vector add of 2^20 float32 timed by kiln::TimeEvaluator (the backend's marker events)
//    beside the host's wall clock around the same batch of calls plus a synchronize, both in
//    the same iteration, as counters: what the device spent between the markers, and what the
//    host waited for, including enqueue cost and the final drain.
//
//   POCL_CACHE_DIR=build/pocl-cache python3 bench/interleave.py
//     --versus 'raw:^BM_[A-Za-z]+_=>BM_Raw_' --cmd build/bin/kiln_bench_opencl
#include <CL/cl.h>
#include <benchmark/benchmark.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>

#include "kiln/kiln.h"

namespace {

const std::string kExamples = KILN_OPENCL_EXAMPLES_DIR;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void check(cl_int err, const char* what) {
  if (err != CL_SUCCESS)
    throw std::runtime_error(std::string(what) + " returned " + std::to_string(err));
}

// Everything the launch cases share, made once.
struct Setup {
  kiln::Ref<kiln::DeviceBackend> backend;
  kiln::Device device{kDLOpenCL, 0};
  void* stream = nullptr;  // a Kiln stream: the cl_command_queue both Raw and Backend use
  kiln::Tensor out;
  // Raw OpenCL.
  cl_program raw_program = nullptr;
  cl_kernel raw_kernel = nullptr;
  // Kiln.
  void* module = nullptr;
  void* kernel = nullptr;
  kiln::Module function_module;
  kiln::Function function;
  std::string error;  // why the cases cannot run

  Setup() {
    try {
      backend = kiln::Runtime::global().find_backend(kDLOpenCL);
      if (!backend) throw std::runtime_error("the opencl plugin is not loaded");
      std::string why;
      if (backend->device_count(&why) == 0) throw std::runtime_error("no OpenCL device: " + why);
      stream = backend->stream_create(0);
      out = kiln::Tensor::empty({1}, kiln::DataType::Float(32), device);
      const std::string source = read_file(kExamples + "/empty.cl");
      const std::string metadata = read_file(kExamples + "/empty.cl.json");

      auto queue = static_cast<cl_command_queue>(stream);
      cl_context context = nullptr;
      cl_device_id dev = nullptr;
      check(clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof(context), &context, nullptr),
            "clGetCommandQueueInfo");
      check(clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof(dev), &dev, nullptr),
            "clGetCommandQueueInfo");
      const char* text = source.c_str();
      const size_t length = source.size();
      cl_int err = CL_SUCCESS;
      raw_program = clCreateProgramWithSource(context, 1, &text, &length, &err);
      check(err, "clCreateProgramWithSource");
      check(clBuildProgram(raw_program, 1, &dev, "", nullptr, nullptr), "clBuildProgram");
      raw_kernel = clCreateKernel(raw_program, "empty", &err);
      check(err, "clCreateKernel");

      module = backend->module_load(0, source.data(), source.size(), "opencl_c", metadata);
      kernel = backend->module_get_kernel(module, "empty");
      function_module = kiln::load_module(kExamples + "/empty.cl");
      function = function_module["empty"];
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
};

Setup& setup() {
  static Setup s;
  return s;
}

// The paths of a launch.
enum class Path { kRaw, kKiln, kKilnDefault, kKilnFunction };

// Raw OpenCL with the backend's bookkeeping: an argument is set only when its value differs
// from the one last set on the cl_kernel.
struct RawArgs {
  cl_mem mem = nullptr;
  cl_int n = 0;
  bool set = false;
};

inline void raw_launch(Setup& s, RawArgs& last, cl_mem mem, cl_int n) {
  const size_t one = 1;
  bool ok = true;
  if (!last.set || last.mem != mem) {
    ok = clSetKernelArg(s.raw_kernel, 0, sizeof(cl_mem), &mem) == CL_SUCCESS;
    last.mem = mem;
  }
  if (!last.set || last.n != n) {
    ok = ok && clSetKernelArg(s.raw_kernel, 1, sizeof(cl_int), &n) == CL_SUCCESS;
    last.n = n;
  }
  last.set = ok;
  if (!ok || clEnqueueNDRangeKernel(static_cast<cl_command_queue>(s.stream), s.raw_kernel, 1,
                                    nullptr, &one, &one, 0, nullptr, nullptr) != CL_SUCCESS)
      [[unlikely]] {
    throw std::runtime_error("raw launch failed");
  }
}

// `count` launches of the empty kernel through `path`.
void launches(Setup& s, Path path, int64_t count) {
  static RawArgs raw_args;
  static const uint32_t one[3] = {1, 1, 1};
  const kiln::Any out(s.out), n(int64_t{1});
  const KilnAny args[2] = {out.to_abi(), n.to_abi()};
  auto mem = static_cast<cl_mem>(s.out.dl()->data);
  for (int64_t i = 0; i < count; ++i) {
    switch (path) {
      case Path::kRaw:
        raw_launch(s, raw_args, mem, 1);
        break;
      case Path::kKiln:
        s.backend->launch(s.kernel, args, 2, one, one, 0, s.stream);
        break;
      case Path::kKilnDefault:
        s.backend->launch(s.kernel, args, 2, one, one, 0, nullptr);
        break;
      case Path::kKilnFunction:
        s.function(s.out, int64_t{1}, int64_t{1}, int64_t{1});
        break;
    }
  }
}

// Drains the queue `path` launches on.
void finish(Setup& s, Path path) {
  const bool on_stream = path == Path::kRaw || path == Path::kKiln;
  s.backend->synchronize(0, on_stream ? s.stream : nullptr);
}

// Seconds per launch of `batch` launches through `path` and the drain of their queue.
double time_batch(Setup& s, Path path, int64_t batch) {
  const auto t0 = std::chrono::steady_clock::now();
  launches(s, path, batch);
  finish(s, path);
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / static_cast<double>(batch);
}

// Seconds per launch of `count` launches through `path` (Raw or Kiln, both on the stream)
// enqueued while the stream is held by a marker waiting on a user event: the host's cost of a
// launch alone, with no kernel running beside it. The queue is released and drained
// afterwards, outside the timed region.
double time_gated(Setup& s, Path path, int64_t count) {
  auto queue = static_cast<cl_command_queue>(s.stream);
  cl_context context = nullptr;
  check(clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof(context), &context, nullptr),
        "clGetCommandQueueInfo");
  cl_int err = CL_SUCCESS;
  cl_event gate = clCreateUserEvent(context, &err);
  check(err, "clCreateUserEvent");
  check(clEnqueueMarkerWithWaitList(queue, 1, &gate, nullptr), "clEnqueueMarkerWithWaitList");
  const auto t0 = std::chrono::steady_clock::now();
  launches(s, path, count);
  const auto t1 = std::chrono::steady_clock::now();
  check(clSetUserEventStatus(gate, CL_COMPLETE), "clSetUserEventStatus");
  clReleaseEvent(gate);
  finish(s, path);
  return std::chrono::duration<double>(t1 - t0).count() / static_cast<double>(count);
}

template <Path path>
void BM_Launch(benchmark::State& state) {
  Setup& s = setup();
  if (!s.error.empty()) {
    state.SkipWithError(s.error.c_str());
    return;
  }
  const int64_t batch = state.range(0);
  for (int i = 0; i < 4; ++i) time_batch(s, path, batch);  // PoCL specialises on first launches
  // An iteration is one batch and its drain; the time reported is per launch.
  for (auto _ : state) state.SetIterationTime(time_batch(s, path, batch));
}

template <Path path>
void BM_HostCost(benchmark::State& state) {
  Setup& s = setup();
  if (!s.error.empty()) {
    state.SkipWithError(s.error.c_str());
    return;
  }
  const int64_t count = state.range(0);
  time_gated(s, path, count);
  for (auto _ : state) state.SetIterationTime(time_gated(s, path, count));
}

// Vector add of 2^20 float32: the evaluator's device timing beside the host's wall clock
// around the same number of calls plus a synchronize. The time reported is the event time per call;
// counters in microseconds per call, and their ratio.
void BM_VectorAddEventVsWall(benchmark::State& state) {
  Setup& s = setup();
  if (!s.error.empty()) {
    state.SkipWithError(s.error.c_str());
    return;
  }
  constexpr int64_t n = 1 << 20;
  const int32_t number = static_cast<int32_t>(state.range(0));
  kiln::Module m = kiln::load_module(kExamples + "/vector_add.cl");
  kiln::Function f = m["vector_add"];
  kiln::Tensor a = kiln::Tensor::empty({n}, kiln::DataType::Float(32), s.device);
  kiln::Tensor b = kiln::Tensor::empty({n}, kiln::DataType::Float(32), s.device);
  kiln::Tensor out = kiln::Tensor::empty({n}, kiln::DataType::Float(32), s.device);
  const std::vector<kiln::Any> args = {kiln::Any(a),           kiln::Any(b), kiln::Any(out),
                                       kiln::Any(0.5),         kiln::Any(n), kiln::Any(n / 256),
                                       kiln::Any(int64_t{256})};
  kiln::TimeEvaluatorOptions o;
  o.number = number;
  o.repeat = 1;
  kiln::TimeEvaluator evaluator = kiln::time_evaluator(f, s.device, o);
  f(a, b, out, 0.5, n, n / 256, int64_t{256});  // build and specialise before measuring
  s.backend->synchronize(0);
  double event = 0, wall = 0;
  int64_t rounds = 0;
  std::string timer;
  for (auto _ : state) {
    const kiln::BenchmarkResult r = evaluator(args);
    timer = r.timer;
    const auto t0 = std::chrono::steady_clock::now();
    for (int32_t i = 0; i < number; ++i) f(a, b, out, 0.5, n, n / 256, int64_t{256});
    s.backend->synchronize(0);
    const auto t1 = std::chrono::steady_clock::now();
    event += r.mean();
    wall += std::chrono::duration<double>(t1 - t0).count() / number;
    ++rounds;
    state.SetIterationTime(r.mean());  // the event time per call
  }
  state.counters["event_us_per_call"] = event / static_cast<double>(rounds) * 1e6;
  state.counters["wall_us_per_call"] = wall / static_cast<double>(rounds) * 1e6;
  state.counters["wall_vs_event"] = wall / event;
  state.counters["number"] = number;
  state.SetLabel("evaluator timer: " + timer);
}

// Names pair with --versus 'raw:^BM_[A-Za-z]+_=>BM_Raw_' (BM_Kiln_Launch/256 with
// BM_Raw_Launch/256, ...). The reported time is per launch, an iteration is a whole batch and
// its drain, so iteration counts are fixed (about 0.2 s a case): from the per-launch time,
// Google Benchmark would run hundreds of times more iterations than its minimum time asks.
#define KILN_LAUNCH_CASE(path, name)                                                  \
  BENCHMARK(BM_Launch<path>)->Name(name)->Arg(256)->Iterations(400)->UseManualTime(); \
  BENCHMARK(BM_Launch<path>)->Name(name)->Arg(1)->Iterations(8000)->UseManualTime()
KILN_LAUNCH_CASE(Path::kRaw, "BM_Raw_Launch");
KILN_LAUNCH_CASE(Path::kKiln, "BM_Kiln_Launch");
KILN_LAUNCH_CASE(Path::kKilnDefault, "BM_KilnDefault_Launch");
KILN_LAUNCH_CASE(Path::kKilnFunction, "BM_KilnFunction_Launch");
BENCHMARK(BM_HostCost<Path::kRaw>)
    ->Name("BM_Raw_HostCost")
    ->Arg(256)
    ->Iterations(300)
    ->UseManualTime();
BENCHMARK(BM_HostCost<Path::kKiln>)
    ->Name("BM_Kiln_HostCost")
    ->Arg(256)
    ->Iterations(300)
    ->UseManualTime();
BENCHMARK(BM_VectorAddEventVsWall)->Arg(20)->UseManualTime()->Iterations(10);

}  // namespace

BENCHMARK_MAIN();
