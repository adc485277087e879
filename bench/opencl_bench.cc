// The opencl backend beside the raw OpenCL API, on device opencl:0.
//
//  - Launch overhead of an empty kernel (examples/kernels/opencl/empty.cl, two arguments: a
//    buffer and an int, one work-item), enqueued three ways on in-order queues created the same
//    way (CL_QUEUE_PROFILING_ENABLE):
//      Raw      clSetKernelArg x 2 + clEnqueueNDRangeKernel on a cl_kernel built directly with
//               the OpenCL API, on the Kiln stream's queue;
//      Backend  the backend's launch slot (what the host's kernel functions call), on the same
//               queue (a Kiln stream is a cl_command_queue);
//      Function the kernel as a module function, load_module("empty.cl")["empty"](out, n,
//               grid, block), on the device's default queue.
//    Queue discipline, the same for all: every launch is enqueued back to back and the queue is
//    drained (clFinish / synchronize) after every `batch` launches (the benchmark argument:
//    256, or 1 for a finish after each launch), inside the timed region. An iteration is one
//    batch; the per_launch counter is seconds per launch. BM_LaunchOverheadRatio interleaves Raw
//    and Backend (and Function) batches in one loop and reports their ratio as counters.
//    Raw sets both arguments on every launch; the backend skips clSetKernelArg for values equal
//    to the ones it set last (docs/backends/opencl.md), as the same buffer and n repeat here.
//  - The host's cost of a launch alone (BM_GatedLaunchRatio): Raw and Backend launches enqueued
//    while the stream is held by a marker waiting on a user event, so no kernel runs beside
//    the enqueuing thread; only the enqueues are timed, the release and drain are not.
//  - Vector add of 2^20 float32 timed by kiln::TimeEvaluator (the backend's marker events)
//    beside the host's wall clock around the same batch of calls plus a synchronize, both in
//    the same iteration, as counters: what the device spent between the markers, and what the
//    host waited for, including enqueue cost and the final drain.
//
//   POCL_CACHE_DIR=build/pocl-cache build/bin/kiln_bench_opencl
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

void finish(Setup& s, bool on_stream) { s.backend->synchronize(0, on_stream ? s.stream : nullptr); }

// One launch of the empty kernel through each path.
inline void raw_launch(Setup& s, cl_mem out, cl_int n) {
  const size_t one = 1;
  if (clSetKernelArg(s.raw_kernel, 0, sizeof(cl_mem), &out) != CL_SUCCESS ||
      clSetKernelArg(s.raw_kernel, 1, sizeof(cl_int), &n) != CL_SUCCESS ||
      clEnqueueNDRangeKernel(static_cast<cl_command_queue>(s.stream), s.raw_kernel, 1, nullptr,
                             &one, &one, 0, nullptr, nullptr) != CL_SUCCESS) [[unlikely]] {
    throw std::runtime_error("raw launch failed");
  }
}

inline void backend_launch(Setup& s, const KilnAny* args) {
  static const uint32_t one[3] = {1, 1, 1};
  s.backend->launch(s.kernel, args, 2, one, one, 0, s.stream);
}

// Seconds per launch of `batches` batches of `batch` launches through `path` (0 raw,
// 1 backend, 2 function), each batch followed by a drain of its queue.
double time_path(Setup& s, int path, int64_t batch, int64_t batches) {
  const kiln::Any out(s.out), n(int64_t{1}), one(int64_t{1});
  const KilnAny args[2] = {out.to_abi(), n.to_abi()};
  auto mem = static_cast<cl_mem>(s.out.dl()->data);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t i = 0; i < batch; ++i) {
      if (path == 0) {
        raw_launch(s, mem, 1);
      } else if (path == 1) {
        backend_launch(s, args);
      } else {
        s.function(s.out, int64_t{1}, int64_t{1}, int64_t{1});
      }
    }
    finish(s, path != 2);
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / static_cast<double>(batch * batches);
}

// Seconds per launch of `count` launches through `path` (0 raw, 1 backend) enqueued on the
// stream while it is held by a marker waiting on a user event: the host's cost of a launch
// alone, with no kernel running beside it. The queue is released and drained afterwards,
// outside the timed region.
double time_gated(Setup& s, int path, int64_t count) {
  auto queue = static_cast<cl_command_queue>(s.stream);
  cl_context context = nullptr;
  check(clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof(context), &context, nullptr),
        "clGetCommandQueueInfo");
  cl_int err = CL_SUCCESS;
  cl_event gate = clCreateUserEvent(context, &err);
  check(err, "clCreateUserEvent");
  check(clEnqueueMarkerWithWaitList(queue, 1, &gate, nullptr), "clEnqueueMarkerWithWaitList");
  const kiln::Any out(s.out), n(int64_t{1});
  const KilnAny args[2] = {out.to_abi(), n.to_abi()};
  auto mem = static_cast<cl_mem>(s.out.dl()->data);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < count; ++i) {
    if (path == 0) {
      raw_launch(s, mem, 1);
    } else {
      backend_launch(s, args);
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  check(clSetUserEventStatus(gate, CL_COMPLETE), "clSetUserEventStatus");
  clReleaseEvent(gate);
  finish(s, true);
  return std::chrono::duration<double>(t1 - t0).count() / static_cast<double>(count);
}

// Raw and Backend gated launches interleaved; counters: microseconds per launch and the ratio.
void BM_GatedLaunchRatio(benchmark::State& state) {
  Setup& s = setup();
  if (!s.error.empty()) {
    state.SkipWithError(s.error.c_str());
    return;
  }
  const int64_t count = state.range(0);
  time_gated(s, 0, count);
  time_gated(s, 1, count);
  double raw = 0, backend = 0;
  int64_t rounds = 0;
  for (auto _ : state) {
    raw += time_gated(s, 0, count);
    backend += time_gated(s, 1, count);
    ++rounds;
  }
  state.counters["raw_us"] = raw / static_cast<double>(rounds) * 1e6;
  state.counters["backend_us"] = backend / static_cast<double>(rounds) * 1e6;
  state.counters["backend_vs_raw"] = backend / raw;
}

void launch_case(benchmark::State& state, int path) {
  Setup& s = setup();
  if (!s.error.empty()) {
    state.SkipWithError(s.error.c_str());
    return;
  }
  const int64_t batch = state.range(0);
  time_path(s, path, batch, 4);  // warm: PoCL specialises the kernel on its first launches
  // An iteration is one batch and its drain; "per_launch" divides by the launches.
  for (auto _ : state) {
    state.SetIterationTime(time_path(s, path, batch, 1) * static_cast<double>(batch));
  }
  state.counters["per_launch"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate |
                                                         benchmark::Counter::kInvert);
}

void BM_RawLaunch(benchmark::State& state) { launch_case(state, 0); }
void BM_BackendLaunch(benchmark::State& state) { launch_case(state, 1); }
void BM_FunctionLaunch(benchmark::State& state) { launch_case(state, 2); }

// Raw, Backend and Function batches interleaved in one loop; counters: microseconds per launch
// of each and the ratios to Raw.
void BM_LaunchOverheadRatio(benchmark::State& state) {
  Setup& s = setup();
  if (!s.error.empty()) {
    state.SkipWithError(s.error.c_str());
    return;
  }
  const int64_t batch = state.range(0);
  for (int path = 0; path < 3; ++path) time_path(s, path, batch, 4);
  double raw = 0, backend = 0, function = 0;
  int64_t rounds = 0;
  for (auto _ : state) {
    raw += time_path(s, 0, batch, 1);
    backend += time_path(s, 1, batch, 1);
    function += time_path(s, 2, batch, 1);
    ++rounds;
  }
  state.counters["raw_us"] = raw / static_cast<double>(rounds) * 1e6;
  state.counters["backend_us"] = backend / static_cast<double>(rounds) * 1e6;
  state.counters["function_us"] = function / static_cast<double>(rounds) * 1e6;
  state.counters["backend_vs_raw"] = backend / raw;
  state.counters["function_vs_raw"] = function / raw;
}

// Vector add of 2^20 float32: the evaluator's device timing beside the host's wall clock
// around the same number of calls plus a synchronize. Counters in microseconds per call.
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
    state.SetIterationTime(r.mean() * number);
  }
  state.counters["event_us_per_call"] = event / static_cast<double>(rounds) * 1e6;
  state.counters["wall_us_per_call"] = wall / static_cast<double>(rounds) * 1e6;
  state.counters["wall_vs_event"] = wall / event;
  state.counters["number"] = number;
  state.SetLabel("evaluator timer: " + timer);
}

BENCHMARK(BM_RawLaunch)->Arg(256)->Arg(1)->UseManualTime();
BENCHMARK(BM_BackendLaunch)->Arg(256)->Arg(1)->UseManualTime();
BENCHMARK(BM_FunctionLaunch)->Arg(256)->Arg(1)->UseManualTime();
BENCHMARK(BM_LaunchOverheadRatio)->Arg(256)->Arg(1)->Iterations(100);
BENCHMARK(BM_GatedLaunchRatio)->Arg(256)->Iterations(100);
BENCHMARK(BM_VectorAddEventVsWall)->Arg(20)->UseManualTime()->Iterations(10);

}  // namespace

BENCHMARK_MAIN();
