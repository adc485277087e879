// SPDX-License-Identifier: Apache-2.0
// The cuda backend on a real GPU: enumeration, memory, streams, timers, every module format
// through the backend and through kiln::load_module, local_run with the tar exporter, the run
// configs against the CPU examples, and the error paths. Every test skips with the plugin's
// reason on a machine without a CUDA device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.h"
#include "kiln/detail/run_config.h"
#include "kiln/kiln.h"
#include "kiln/testing.h"
#include "nvrtc_compiler.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

using cuda_test::read_bytes;
using cuda_test::read_text;

class CudaGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = cuda_test::no_device_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    backend_ = Runtime::global().backend(kDLCUDA);
    for (const auto& [key, value] : backend_->attributes(0)) {
      if (key == "compute_capability_major") cc_major_ = value.cast<int64_t>();
      if (key == "compute_capability_minor") cc_minor_ = value.cast<int64_t>();
      if (key == "max_shared_memory_per_block_optin_bytes") optin_shared_ = value.cast<int64_t>();
      if (key == "name") fake_ = value.str().rfind("Kiln Fake GPU", 0) == 0;
    }
    examples_missing_ = cuda_test::examples_missing();
    cuda::NvrtcApi nvrtc;
    if (!nvrtc.open(cuda::NvrtcApi::default_libraries(), &nvrtc_missing_)) {
      std::printf("  cuda_source cases left out: %s\n", nvrtc_missing_.c_str());
    }
  }

  // The source variant when NVRTC is there, else `fallback`.
  std::string source_or(const std::string& kernel, const std::string& fallback) const {
    return nvrtc_missing_.empty() ? kernel + ".cu" : fallback;
  }

  // The example files of `kernel` this device can run: PTX, the cubin of its architecture
  // family (sm_80 machine code runs on 8.x, sm_90 on 9.0), the fat binary and the source.
  std::vector<std::string> variants(const std::string& kernel) const {
    std::vector<std::string> files = {kernel + ".ptx", kernel + ".fatbin"};
    if (nvrtc_missing_.empty()) files.push_back(kernel + ".cu");
    if (cc_major_ == 8) files.push_back(kernel + ".sm_80.cubin");
    if (cc_major_ == 9 && cc_minor_ == 0) files.push_back(kernel + ".sm_90.cubin");
    return files;
  }

  Ref<DeviceBackend> backend_;
  const Device device_{kDLCUDA, 0};
  int64_t cc_major_ = 0;
  int64_t cc_minor_ = 0;
  int64_t optin_shared_ = 0;
  std::string nvrtc_missing_;  // why NVRTC cannot be loaded; empty when it can
  // Why the example kernels were not built; empty when they were. Tests that load them skip.
  std::string examples_missing_;
  // The fake driver of cuda_fake_driver_test.cc, which runs only the example kernels.
  bool fake_ = false;
};

// Host inputs of the conformance kernel and the expected output (computed as the CPU example
// does: the product rounded, then the sum).
struct VectorAddCase {
  explicit VectorAddCase(int64_t n) : a(n), b(n), expected(n) {
    for (int64_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(i) * 0.5f;
      b[i] = static_cast<float>(n - i) * 0.25f;
      const float product = alpha * b[i];
      expected[i] = a[i] + product;
    }
  }
  float alpha = 1.5f;
  std::vector<float> a, b, expected;
};

TEST_F(CudaGpu, AttributesDescribeTheDevice) {
  std::map<std::string, Any> attrs;
  for (const auto& [key, value] : backend_->attributes(0)) attrs.emplace(key, value);
  EXPECT_FALSE(attrs.at("name").str().empty());
  EXPECT_EQ(attrs.at("vendor").str(), "NVIDIA");
  EXPECT_EQ(attrs.at("arch").str(), "sm_" + std::to_string(cc_major_) + std::to_string(cc_minor_));
  EXPECT_EQ(attrs.at("compute_capability").str(),
            std::to_string(cc_major_) + "." + std::to_string(cc_minor_));
  EXPECT_GE(cc_major_, 7);
  for (const char* key : {"compute_units", "memory_bytes", "l2_cache_bytes", "clock_rate_khz",
                          "memory_clock_rate_khz", "memory_bus_width_bits",
                          "peak_memory_bandwidth_bytes_per_s", "max_threads_per_block"}) {
    EXPECT_GT(attrs.at(key).cast<int64_t>(), 0) << key;
  }
  EXPECT_FALSE(attrs.at("pci_bus_id").str().empty());
  for (const auto& [key, value] : attrs)
    std::printf("  %s = %s\n", key.c_str(), value.str().c_str());
}

TEST_F(CudaGpu, MemoryCopiesStreamsAndTimers) {
  // Alignments above the driver's 256 bytes are honoured.
  for (size_t alignment : {64u, 256u, 4096u, 65536u}) {
    void* p = backend_->alloc(0, 1000, alignment);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignment, 0u) << alignment;
    backend_->free(0, p);
  }
  constexpr size_t n = 1 << 20;
  std::vector<uint8_t> src(n), back(n, 0);
  std::iota(src.begin(), src.end(), 3);
  void* a = backend_->alloc(0, n + 256, 4096);
  void* b = backend_->alloc(0, n + 256, 64);
  void* stream = backend_->stream_create(0);
  void* timer = backend_->timer_create(0);
  backend_->timer_start(timer, stream);
  backend_->copy_to_device(0, src.data(), a, 64, n, stream);
  backend_->copy_on_device(0, a, 64, b, 128, n, stream);
  backend_->copy_to_host(0, b, 128, back.data(), n, stream);
  backend_->timer_stop(timer, stream);
  backend_->synchronize(0, stream);
  EXPECT_EQ(src, back);
  const int64_t ns = backend_->timer_elapsed_ns(timer);
  EXPECT_GT(ns, 0);
  backend_->timer_destroy(timer);
  backend_->stream_destroy(0, stream);
  backend_->free(0, a);
  backend_->free(0, b);
  void* unstarted = backend_->timer_create(0);
  EXPECT_THROW(backend_->timer_elapsed_ns(unstarted), ValueError);
  backend_->timer_destroy(unstarted);
}

TEST_F(CudaGpu, OutOfMemoryIsAnOutOfMemoryError) {
  const size_t pib = size_t{1} << 50;
  try {
    backend_->alloc(0, pib, 64);
    ADD_FAILURE() << "1 PiB was allocated";
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot allocate 1125899906842624 bytes on cuda:0"));
    EXPECT_THAT(e.what(), HasSubstr("CUDA_ERROR_OUT_OF_MEMORY"));
  }
  EXPECT_THROW(Tensor::empty({int64_t{1} << 48}, DataType::Float(32), device_), OutOfMemoryError);
  // The device is still usable afterwards.
  Tensor t = Tensor::empty({4}, DataType::Float(32), device_);
  const float v[4] = {1, 2, 3, 4};
  t.copy_from(v, sizeof(v));
  float back[4] = {};
  t.copy_to(back, sizeof(back));
  EXPECT_EQ(back[3], 4.0f);
}

TEST_F(CudaGpu, BackendLaunchesEveryFormat) {
  if (!examples_missing_.empty()) GTEST_SKIP() << examples_missing_;
  constexpr int64_t n = 10000;
  const VectorAddCase c(n);
  Tensor a = Tensor::empty({n}, DataType::Float(32), device_);
  Tensor b = Tensor::empty({n}, DataType::Float(32), device_);
  Tensor out = Tensor::empty({n}, DataType::Float(32), device_);
  a.copy_from(c.a.data(), n * 4);
  b.copy_from(c.b.data(), n * 4);
  const uint32_t block[3] = {256, 1, 1};
  const uint32_t grid[3] = {static_cast<uint32_t>((n + 255) / 256), 1, 1};
  for (const std::string& file : variants("vector_add")) {
    SCOPED_TRACE(file);
    const std::vector<uint8_t> bytes = read_bytes(cuda_test::examples() + "/" + file);
    const std::string metadata = read_text(cuda_test::examples() + "/" + file + ".json");
    ASSERT_FALSE(bytes.empty());
    const std::string format = nlohmann::json::parse(metadata).at("format").get<std::string>();
    void* mod = backend_->module_load(0, bytes.data(), bytes.size(), format, metadata);
    void* kernel = backend_->module_get_kernel(mod, "vector_add");
    std::vector<float> zeros(n, 0.0f), got(n);
    out.copy_from(zeros.data(), n * 4);
    KilnAny args[5] = {Any(a).to_abi(), Any(b).to_abi(), Any(out).to_abi(),
                       Any(static_cast<double>(c.alpha)).to_abi(), Any(n).to_abi()};
    backend_->launch(kernel, args, 5, grid, block, 0);
    backend_->synchronize(0);
    out.copy_to(got.data(), n * 4);
    EXPECT_EQ(got, c.expected);
    EXPECT_THROW(backend_->module_get_kernel(mod, "no_such_kernel"), NotFoundError);
    EXPECT_THROW(backend_->launch(kernel, args, 4, grid, block, 0), ValueError);
    const Tensor host_tensor = Tensor::empty({n}, DataType::Float(32));  // outlives the call
    KilnAny host_arg[5] = {Any(host_tensor).to_abi(), args[1], args[2], args[3], args[4]};
    EXPECT_THROW(backend_->launch(kernel, host_arg, 5, grid, block, 0), ValueError);
    backend_->module_unload(mod);
  }
}

TEST_F(CudaGpu, ModuleFunctionsRunEveryFormat) {
  if (!examples_missing_.empty()) GTEST_SKIP() << examples_missing_;
  constexpr int64_t n = 100003;  // not a multiple of the block
  const VectorAddCase c(n);
  for (const std::string& file : variants("vector_add")) {
    SCOPED_TRACE(file);
    Module m = load_module(cuda_test::examples() + "/" + file);
    Tensor a = Tensor::empty({n}, DataType::Float(32), device_);
    Tensor b = Tensor::empty({n}, DataType::Float(32), device_);
    Tensor out = Tensor::empty({n}, DataType::Float(32), device_);
    a.copy_from(c.a.data(), n * 4);
    b.copy_from(c.b.data(), n * 4);
    m["vector_add"](a, b, out, static_cast<double>(c.alpha), n, (n + 255) / 256, 256);
    std::vector<float> got(n);
    out.copy_to(got.data(), n * 4);
    EXPECT_EQ(got, c.expected);
    // Wrong argument count and kinds are refused by the host before the launch.
    EXPECT_THROW(m["vector_add"](a, b, out, 1.0, n), TypeError);
    EXPECT_THROW(m["vector_add"](a, b, 2.0, out, n, 1, 256), Error);
  }
}

TEST_F(CudaGpu, LocalRunWithTheTarExporter) {
  if (!examples_missing_.empty()) GTEST_SKIP() << examples_missing_;
  constexpr int64_t n = 4096;
  const VectorAddCase c(n);
  Tensor a = Tensor::empty({n}, DataType::Float(32));
  Tensor b = Tensor::empty({n}, DataType::Float(32));
  Tensor out = Tensor::empty({n}, DataType::Float(32));
  a.copy_from(c.a.data(), n * 4);
  b.copy_from(c.b.data(), n * 4);
  for (const std::string& file :
       {std::string("vector_add.ptx"), source_or("vector_add", "vector_add.fatbin")}) {
    SCOPED_TRACE(file);
    Module m = load_module(cuda_test::examples() + "/" + file);
    testing::RunHooks hooks;
    hooks.function = "vector_add";
    EvaluatorConfig config;
    config.number = 2;
    config.repeat = 2;
    config.min_repeat_ms = 0;
    testing::RunResult result =
        testing::local_run(m, "cuda", {a, b, out, static_cast<double>(c.alpha), n, n / 256, 256},
                           config, std::string("tar"), std::nullopt, hooks);
    ASSERT_EQ(result.outputs.size(), 7u);
    Tensor got = result.outputs[2].cast<Tensor>();
    EXPECT_EQ(got.device().type, kDLCPU);
    auto span = got.host_span<float>();
    EXPECT_TRUE(std::equal(span.begin(), span.end(), c.expected.begin()));
    EXPECT_EQ(result.profile.timer, "device") << "timed with CUDA events";
    EXPECT_EQ(result.profile.results().size(), 2u);
  }
}

// The run configs configs/runs/<name>.yaml (CPU) and cuda_<name>.yaml give the same outputs.
void expect_same_outputs(const std::string& name, int output, double rtol, double atol) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/configs/runs/";
  std::vector<Tensor> results;
  for (const std::string& file : {name + ".yaml", "cuda_" + name + ".yaml"}) {
    SCOPED_TRACE(file);
    run::RunSpec spec = run::parse_run_config(dir + file);
    spec.evaluator.number = 1;
    spec.evaluator.repeat = 1;
    spec.evaluator.min_repeat_ms = 0;
    testing::RunHooks hooks;
    hooks.function = spec.function;
    testing::RunResult r =
        testing::local_run(load_module(spec.module), spec.device, run::make_inputs(spec),
                           spec.evaluator, spec.exporter, std::nullopt, hooks);
    results.push_back(r.outputs.at(output).cast<Tensor>());
  }
  ASSERT_TRUE(std::ranges::equal(results[0].shape(), results[1].shape()));
  auto cpu = results[0].host_span<float>();
  auto gpu = results[1].host_span<float>();
  ASSERT_EQ(cpu.size(), gpu.size());
  size_t mismatches = 0;
  double max_diff = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(cpu[i]) - gpu[i]);
    max_diff = std::max(max_diff, diff);
    if (diff > atol + rtol * std::fabs(static_cast<double>(cpu[i]))) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0u) << name << ": max abs diff " << max_diff;
  std::printf("  %s: %zu elements, max abs diff cpu vs cuda %g\n", name.c_str(), cpu.size(),
              max_diff);
}

TEST_F(CudaGpu, RunConfigsMatchTheCpuExamples) {
  if (!examples_missing_.empty()) GTEST_SKIP() << examples_missing_;
  expect_same_outputs("vector_add", 2, 0, 0);  // same rounding: bit for bit
  expect_same_outputs("relu", 1, 0, 0);
  expect_same_outputs("matmul", 2, 1e-5, 1e-5);  // same summation order; allow for libm-free fp
}

TEST_F(CudaGpu, MatmulUsesDynamicSharedMemory) {
  if (!examples_missing_.empty()) GTEST_SKIP() << examples_missing_;
  constexpr int64_t m = 37, k = 50, n = 29;  // ragged edges
  std::vector<float> ha(m * k), hb(k * n), expected(m * n, 0.0f);
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = static_cast<float>(i % 7) - 3.0f;
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = static_cast<float>(i % 5) * 0.5f;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t col = 0; col < n; ++col)
        expected[r * n + col] += ha[r * k + kk] * hb[kk * n + col];
    }
  }
  Module mod = load_module(cuda_test::examples() + "/matmul.ptx");
  Tensor a = Tensor::empty({m, k}, DataType::Float(32), device_);
  Tensor b = Tensor::empty({k, n}, DataType::Float(32), device_);
  Tensor c = Tensor::empty({m, n}, DataType::Float(32), device_);
  a.copy_from(ha.data(), ha.size() * 4);
  b.copy_from(hb.data(), hb.size() * 4);
  for (int64_t t : {8, 16, 32}) {
    SCOPED_TRACE(t);
    mod["matmul"](a, b, c, m, n, k, (n + t - 1) / t, (m + t - 1) / t, t, t, 2 * t * t * 4);
    std::vector<float> got(m * n);
    c.copy_to(got.data(), got.size() * 4);
    EXPECT_EQ(got, expected);  // small integers and halves: exact in float32
  }
}

TEST_F(CudaGpu, BadPtxCarriesTheJitLog) {
  const std::string ptx =
      ".version 7.0\n.target sm_70\n.address_size 64\n"
      ".visible .entry broken(.param .u64 p)\n{\n  kiln_not_an_instruction;\n  ret;\n}\n";
  const std::string meta = R"({"kernels": {"broken": {"args": ["tensor"]}}})";
  try {
    backend_->module_load(0, ptx.data(), ptx.size(), "ptx", meta);
    ADD_FAILURE() << "bad PTX was loaded";
  } catch (const ValueError& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, HasSubstr("cannot load the ptx module on cuda:0"));
    EXPECT_THAT(message, HasSubstr("CUDA_ERROR_INVALID_PTX"));
    EXPECT_THAT(message, HasSubstr("JIT error log:"));
    EXPECT_THAT(message, HasSubstr("kiln_not_an_instruction"));
  }
  const std::string garbage = "this is not device code";
  EXPECT_THROW(backend_->module_load(0, garbage.data(), garbage.size(), "ptx", "{}"), Error);
  EXPECT_THROW(backend_->module_load(0, garbage.data(), garbage.size(), "cubin", "{}"), ValueError);
  EXPECT_THROW(backend_->module_load(0, garbage.data(), garbage.size(), "no-such-format", "{}"),
               ValueError);
}

TEST_F(CudaGpu, MetadataMustMatchTheModule) {
  if (!examples_missing_.empty()) GTEST_SKIP() << examples_missing_;
  const std::vector<uint8_t> cubin_or_fatbin = read_bytes(cuda_test::examples() + "/relu.fatbin");
  const std::string meta = R"({"kernels": {"relu": {"args": ["tensor", "tensor", "int32"]},
                                           "gelu": {"args": ["tensor"]}}})";
  try {
    backend_->module_load(0, cubin_or_fatbin.data(), cubin_or_fatbin.size(), "fatbin", meta);
    ADD_FAILURE() << "a kernel the module lacks was accepted";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("lacks kernels the metadata describes: gelu"));
  }
  EXPECT_THROW(backend_->module_load(0, cubin_or_fatbin.data(), cubin_or_fatbin.size(), "fatbin",
                                     R"({"kernels": {"relu": {"args": ["vector"]}}})"),
               ValueError);
}

TEST_F(CudaGpu, NvrtcErrorsReachTheCaller) {
  if (!nvrtc_missing_.empty()) GTEST_SKIP() << nvrtc_missing_;
  const std::string source = "extern \"C\" __global__ void k(float* p) { p[0] = nope; }\n";
  try {
    backend_->module_load(0, source.data(), source.size(), "cuda_source",
                          R"({"kernels": {"k": {"args": ["tensor"]}}})");
    ADD_FAILURE() << "bad CUDA source was loaded";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("NVRTC_ERROR_COMPILATION"));
    EXPECT_THAT(e.what(), HasSubstr("identifier \"nope\" is undefined"));
  }
  // build_options from the metadata reach NVRTC.
  const std::string define =
      "extern \"C\" __global__ void k(float* p) { p[threadIdx.x] = VALUE; }\n";
  void* mod = backend_->module_load(
      0, define.data(), define.size(), "cuda_source",
      R"({"build_options": "-DVALUE=7.5f", "kernels": {"k": {"args": ["tensor"]}}})");
  if (fake_) {
    backend_->module_unload(mod);
    GTEST_SKIP() << "the fake driver does not run kernel 'k'";
  }
  Tensor t = Tensor::empty({32}, DataType::Float(32), device_);
  KilnAny args[1] = {Any(t).to_abi()};
  const uint32_t one[3] = {1, 1, 1};
  const uint32_t block[3] = {32, 1, 1};
  backend_->launch(backend_->module_get_kernel(mod, "k"), args, 1, one, block, 0);
  std::vector<float> got(32);
  t.copy_to(got.data(), 128);
  EXPECT_EQ(got, std::vector<float>(32, 7.5f));
  backend_->module_unload(mod);
}

TEST_F(CudaGpu, LaunchErrorsNameTheExtents) {
  if (!examples_missing_.empty()) GTEST_SKIP() << examples_missing_;
  Module m = load_module(cuda_test::examples() + "/relu.ptx");
  Tensor in = Tensor::empty({64}, DataType::Float(32), device_);
  Tensor out = Tensor::empty({64}, DataType::Float(32), device_);
  try {
    m["relu"](in, out, 64, 1, 4096);  // more threads per block than any device allows
    backend_->synchronize(0);
    ADD_FAILURE() << "a block of 4096 threads was launched";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cuLaunchKernel of 'relu' on cuda:0 with grid (1, 1, 1), "
                                    "block (4096, 1, 1)"));
  }
  // Dynamic shared memory above the default 48 KiB is enabled per kernel; above the device's
  // opt-in limit it is refused.
  void* mod = nullptr;
  const std::vector<uint8_t> ptx = read_bytes(cuda_test::examples() + "/relu.ptx");
  mod = backend_->module_load(0, ptx.data(), ptx.size(), "ptx",
                              read_text(cuda_test::examples() + "/relu.ptx.json"));
  void* kernel = backend_->module_get_kernel(mod, "relu");
  KilnAny args[3] = {Any(in).to_abi(), Any(out).to_abi(), Any(int64_t{64}).to_abi()};
  const uint32_t grid[3] = {1, 1, 1};
  const uint32_t block[3] = {64, 1, 1};
  if (optin_shared_ > 64 * 1024) {
    backend_->launch(kernel, args, 3, grid, block, 64 * 1024);
    backend_->synchronize(0);
  }
  EXPECT_THROW(
      backend_->launch(kernel, args, 3, grid, block, static_cast<uint32_t>(optin_shared_ + 1024)),
      ValueError);
  backend_->module_unload(mod);
}

TEST_F(CudaGpu, ThreadsLaunchConcurrently) {
  if (!examples_missing_.empty()) GTEST_SKIP() << examples_missing_;
  Module m = load_module(cuda_test::examples() + "/" + source_or("vector_add", "vector_add.ptx"));
  Function f = m["vector_add"];
  constexpr int64_t n = 1 << 16;
  const VectorAddCase c(n);
  std::vector<int> ok(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Tensor a = Tensor::empty({n}, DataType::Float(32), device_);
      Tensor b = Tensor::empty({n}, DataType::Float(32), device_);
      Tensor out = Tensor::empty({n}, DataType::Float(32), device_);
      a.copy_from(c.a.data(), n * 4);
      b.copy_from(c.b.data(), n * 4);
      for (int i = 0; i < 50; ++i) f(a, b, out, static_cast<double>(c.alpha), n, n / 256, 256);
      std::vector<float> got(n);
      out.copy_to(got.data(), n * 4);
      ok[t] = got == c.expected ? 1 : 0;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok, std::vector<int>(4, 1));
}

TEST_F(CudaGpu, DeviceL2FlushRunsOnCudaTensors) {
  if (!examples_missing_.empty()) GTEST_SKIP() << examples_missing_;
  auto flush = registry::get("cache_flush_device_l2");
  if (!flush) GTEST_SKIP() << "the core has no cache_flush_device_l2 preprocessor";
  Tensor t = Tensor::empty({1024}, DataType::Float(32), device_);
  EXPECT_NO_THROW((*flush)(t));
  Module m = load_module(cuda_test::examples() + "/relu.ptx");
  TimeEvaluatorOptions options;
  options.number = 1;
  options.repeat = 3;
  options.f_preproc = "cache_flush_device_l2";
  Tensor out = Tensor::empty({1024}, DataType::Float(32), device_);
  BenchmarkResult r = time_evaluator(m["relu"], device_, options)(
      std::vector<Any>{t, out, int64_t{1024}, int64_t{4}, int64_t{256}});
  EXPECT_EQ(r.results().size(), 3u);
  EXPECT_EQ(r.timer, "device");
}

}  // namespace
}  // namespace kiln
