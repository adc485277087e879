// SPDX-License-Identifier: Apache-2.0
// The cuda plugin's device paths against a fake driver (fake_libcuda.cc, loaded through the
// driver_library option): enumeration, memory, copies, streams, timers, every module format,
// launches with their arguments checked by the fake, the error paths, concurrency, and that
// shutdown releases everything. Runs on any machine. The last test reruns the whole GPU suite
// (CudaGpu.*) in a child process whose runtime uses the fake driver.
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "kiln/kiln.h"
#include "nvrtc_compiler.h"

#ifndef KILN_CUDA_FAKE_DRIVER
#error \
    "KILN_CUDA_FAKE_DRIVER (the fake driver's path) must be defined by plugins/cuda/CMakeLists.txt"
#endif

namespace kiln {
namespace {

using ::testing::HasSubstr;

using cuda_test::read_bytes;
using cuda_test::read_text;

// Live objects in the fake driver ("retains", "allocations", "modules", "streams", "events").
long live(const char* what) {
  void* handle = ::dlopen(KILN_CUDA_FAKE_DRIVER, RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return 0;  // not loaded: nothing is live
  auto* fn = reinterpret_cast<long (*)(const char*)>(::dlsym(handle, "kiln_fake_cuda_live"));
  const long n = fn != nullptr ? fn(what) : -1;
  ::dlclose(handle);
  return n;
}

class FakeDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime_ = std::make_unique<cuda_test::PrivateRuntime>(std::string("{driver_library: '") +
                                                           KILN_CUDA_FAKE_DRIVER + "'}");
    ASSERT_EQ(runtime_->status()->state, PluginStatus::State::kLoaded)
        << runtime_->status()->reason;
    backend_ = runtime_->runtime().backend(kDLCUDA);
    std::string why;
    ASSERT_EQ(backend_->device_count(&why), 1) << why;
  }
  void TearDown() override {
    backend_ = Ref<DeviceBackend>();
    runtime_.reset();
    // Shutdown released the primary context; the test freed what it made.
    EXPECT_EQ(live("retains"), 0);
    EXPECT_EQ(live("allocations"), 0);
    EXPECT_EQ(live("modules"), 0);
    EXPECT_EQ(live("streams"), 0);
    EXPECT_EQ(live("events"), 0);
  }

  // Device memory holding `values`.
  void* upload(const std::vector<float>& values) {
    void* p = backend_->alloc(0, values.size() * 4, 64);
    backend_->copy_to_device(0, values.data(), p, 0, values.size() * 4);
    return p;
  }
  std::vector<float> download(void* p, size_t n) {
    std::vector<float> out(n);
    backend_->copy_to_host(0, p, 0, out.data(), n * 4);
    backend_->synchronize(0);
    return out;
  }
  static DLTensor tensor(void* data, int64_t* shape, uint64_t offset = 0) {
    DLTensor t{};
    t.data = data;
    t.device = {kDLCUDA, 0};
    t.ndim = 1;
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape;
    t.byte_offset = offset;
    return t;
  }
  static KilnAny any(DLTensor* t) {
    KilnAny a{};
    a.type_code = KILN_TYPE_TENSOR;
    a.value.v_tensor = t;
    return a;
  }
  static KilnAny any(double v) {
    KilnAny a{};
    a.type_code = KILN_TYPE_FLOAT;
    a.value.v_float64 = v;
    return a;
  }
  static KilnAny any(int64_t v) {
    KilnAny a{};
    a.type_code = KILN_TYPE_INT;
    a.value.v_int64 = v;
    return a;
  }

  std::unique_ptr<cuda_test::PrivateRuntime> runtime_;
  Ref<DeviceBackend> backend_;
};

TEST_F(FakeDriver, EnumeratesWithAttributes) {
  std::map<std::string, Any> attrs;
  for (const auto& [key, value] : backend_->attributes(0)) attrs.emplace(key, value);
  EXPECT_EQ(backend_->attributes(0).front().first, "name");
  EXPECT_EQ(attrs.at("name").str(), "Kiln Fake GPU 0");
  EXPECT_EQ(attrs.at("vendor").str(), "NVIDIA");
  EXPECT_EQ(attrs.at("arch").str(), "sm_90");
  EXPECT_EQ(attrs.at("compute_capability").str(), "9.0");
  EXPECT_EQ(attrs.at("compute_units").cast<int64_t>(), 132);
  EXPECT_EQ(attrs.at("memory_bytes").cast<int64_t>(), int64_t{1} << 30);
  EXPECT_EQ(attrs.at("l2_cache_bytes").cast<int64_t>(), 50 << 20);
  EXPECT_EQ(attrs.at("memory_clock_rate_khz").cast<int64_t>(), 2619000);
  EXPECT_EQ(attrs.at("memory_bus_width_bits").cast<int64_t>(), 5120);
  EXPECT_EQ(attrs.at("peak_memory_bandwidth_bytes_per_s").cast<int64_t>(),
            int64_t{2} * 2619000 * 1000 * 5120 / 8);
  EXPECT_EQ(attrs.at("pci_bus_id").str(), "0000:10:00.0");
  EXPECT_EQ(attrs.at("driver_version").str(), "13.0");
  EXPECT_EQ(attrs.at("max_shared_memory_per_block_optin_bytes").cast<int64_t>(), 227 * 1024);
  try {
    backend_->attributes(1);
    ADD_FAILURE() << "device 1 does not exist";
  } catch (const IndexError& e) {
    EXPECT_THAT(e.what(), HasSubstr("device id 1 is out of range: the cuda backend has 1 device"));
  }
  EXPECT_THROW(backend_->alloc(1, 64, 64), IndexError);
  EXPECT_THROW(backend_->synchronize(-1), IndexError);
}

TEST_F(FakeDriver, AllocatesAlignedAndFreesTheBase) {
  // 600 MB of a 1 GiB device, ten times: a leaked over-aligned block would run it out.
  for (int i = 0; i < 10; ++i) {
    for (size_t alignment : {64u, 256u, 4096u, 1u << 20}) {
      void* p = backend_->alloc(0, 600u << 20, alignment);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignment, 0u);
      backend_->free(0, p);
    }
  }
  EXPECT_THROW(backend_->alloc(0, 64, 48), ValueError) << "alignment must be a power of two";
  try {
    backend_->alloc(0, size_t{1} << 50, 64);
    ADD_FAILURE() << "1 PiB was allocated";
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot allocate 1125899906842624 bytes on cuda:0 (Kiln Fake "
                                    "GPU 0, sm_90) (1073741824 bytes in all): cuMemAlloc failed: "
                                    "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"));
  }
  backend_->free(0, nullptr);  // a no-op
}

TEST_F(FakeDriver, CopiesAtOffsetsOnStreams) {
  constexpr size_t n = 1 << 16;
  std::vector<uint8_t> src(n), back(n, 0);
  std::iota(src.begin(), src.end(), 7);
  void* a = backend_->alloc(0, n + 128, 64);
  void* b = backend_->alloc(0, n + 128, 4096);
  void* stream = backend_->stream_create(0);
  backend_->copy_to_device(0, src.data(), a, 64, n, stream);
  backend_->copy_on_device(0, a, 64, b, 128, n, stream);
  backend_->copy_to_host(0, b, 128, back.data(), n, stream);
  backend_->synchronize(0, stream);
  EXPECT_EQ(src, back);
  // A copy past the end of the allocation is refused by the driver and reported.
  try {
    backend_->copy_to_device(0, src.data(), a, 256, n, stream);
    ADD_FAILURE() << "an overflowing copy succeeded";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cuMemcpyHtoDAsync failed: CUDA_ERROR_INVALID_VALUE (1)"));
  }
  EXPECT_THROW(backend_->copy_to_host(0, nullptr, 0, back.data(), 4), ValueError);
  backend_->copy_to_host(0, nullptr, 0, nullptr, 0);  // nothing to copy
  backend_->stream_destroy(0, stream);
  backend_->stream_destroy(0, nullptr);  // the default stream is not destroyed
  backend_->free(0, a);
  backend_->free(0, b);
}

TEST_F(FakeDriver, TimersRecordEvents) {
  void* timer = backend_->timer_create(0);
  EXPECT_THROW(backend_->timer_elapsed_ns(timer), ValueError);
  EXPECT_THROW(backend_->timer_stop(timer), ValueError);
  backend_->timer_start(timer);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  backend_->timer_stop(timer);
  EXPECT_GT(backend_->timer_elapsed_ns(timer), 1'000'000);
  backend_->timer_destroy(timer);
  backend_->timer_destroy(nullptr);
}

TEST_F(FakeDriver, LoadsEveryFormatAndLaunches) {
  // The built examples with their sidecars; without nvcc only the source, compiled by NVRTC.
  struct Variant {
    std::string path, metadata_path, format;
  };
  std::vector<Variant> variants;
  const std::string examples_missing = cuda_test::examples_missing();
  if (examples_missing.empty()) {
    for (const char* file : {"vector_add.ptx", "vector_add.sm_90.cubin", "vector_add.fatbin"}) {
      const std::string path = cuda_test::examples() + "/" + file;
      const std::string format =
          nlohmann::json::parse(read_text(path + ".json")).at("format").get<std::string>();
      variants.push_back({path, path + ".json", format});
    }
  }
  cuda::NvrtcApi nvrtc;
  std::string no_nvrtc;
  if (nvrtc.open(cuda::NvrtcApi::default_libraries(), &no_nvrtc)) {
    variants.push_back(examples_missing.empty()
                           ? Variant{cuda_test::examples() + "/vector_add.cu",
                                     cuda_test::examples() + "/vector_add.cu.json", "cuda_source"}
                           : Variant{cuda_test::example_sources() + "/vector_add.cu",
                                     cuda_test::example_sources() + "/vector_add.json",
                                     "cuda_source"});
  }
  if (variants.empty()) GTEST_SKIP() << examples_missing << "; " << no_nvrtc;

  constexpr int64_t n = 1000;
  std::vector<float> ha(n), hb(n), expected(n);
  for (int64_t i = 0; i < n; ++i) {
    ha[i] = static_cast<float>(i);
    hb[i] = 0.25f * static_cast<float>(n - i);
    const float product = 3.0f * hb[i];
    expected[i] = ha[i] + product;
  }
  void* a = upload(ha);
  void* b = upload(hb);
  void* out = backend_->alloc(0, n * 4 + 256, 64);
  int64_t shape[1] = {n};
  DLTensor ta = tensor(a, shape), tb = tensor(b, shape), tout = tensor(out, shape, 256);
  const KilnAny args[5] = {any(&ta), any(&tb), any(&tout), any(3.0), any(n)};
  const uint32_t grid[3] = {(n + 255) / 256, 1, 1};
  const uint32_t block[3] = {256, 1, 1};
  for (const Variant& variant : variants) {
    SCOPED_TRACE(variant.path);
    const std::vector<uint8_t> bytes = read_bytes(variant.path);
    const std::string metadata = read_text(variant.metadata_path);
    void* mod = backend_->module_load(0, bytes.data(), bytes.size(), variant.format, metadata);
    void* kernel = backend_->module_get_kernel(mod, "vector_add");
    backend_->launch(kernel, args, 5, grid, block, 0);
    std::vector<float> got(n);
    backend_->copy_to_host(0, out, 256, got.data(), n * 4);
    backend_->synchronize(0);
    EXPECT_EQ(got, expected) << "tensor addresses are data + byte_offset; alpha and n packed";
    EXPECT_THROW(backend_->module_get_kernel(mod, "relu"), NotFoundError);
    backend_->module_unload(mod);
  }
  backend_->free(0, a);
  backend_->free(0, b);
  backend_->free(0, out);
}

TEST_F(FakeDriver, LaunchErrors) {
  if (const std::string why = cuda_test::examples_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string path = cuda_test::examples() + "/relu.ptx";
  const std::vector<uint8_t> ptx = read_bytes(path);
  void* mod = backend_->module_load(0, ptx.data(), ptx.size(), "ptx", read_text(path + ".json"));
  void* kernel = backend_->module_get_kernel(mod, "relu");
  void* in = backend_->alloc(0, 64 * 4, 64);
  void* out = backend_->alloc(0, 64 * 4, 64);
  int64_t shape[1] = {64};
  DLTensor tin = tensor(in, shape), tout = tensor(out, shape);
  const uint32_t grid[3] = {1, 1, 1};
  const uint32_t block[3] = {64, 1, 1};
  const KilnAny args[3] = {any(&tin), any(&tout), any(int64_t{64})};
  backend_->launch(kernel, args, 3, grid, block, 0);
  // Above the default 48 KiB of dynamic shared memory the plugin raises the kernel's limit.
  backend_->launch(kernel, args, 3, grid, block, 100 * 1024);
  try {
    backend_->launch(kernel, args, 3, grid, block, 300 * 1024);
    ADD_FAILURE() << "more shared memory than the device has";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("kernel 'relu' asks for 307200 bytes of dynamic shared memory; "
                                    "cuda:0 (Kiln Fake GPU 0, sm_90) allows at most 232448"));
  }
  const uint32_t huge[3] = {4096, 1, 1};
  try {
    backend_->launch(kernel, args, 3, grid, huge, 0);
    ADD_FAILURE() << "a block of 4096 threads was launched";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cuLaunchKernel of 'relu' on cuda:0 with grid (1, 1, 1), "
                                    "block (4096, 1, 1), 0 bytes of dynamic shared memory failed: "
                                    "CUDA_ERROR_INVALID_VALUE (1)"));
  }
  // Wrong count, kinds and devices never reach the driver.
  EXPECT_THROW(backend_->launch(kernel, args, 2, grid, block, 0), ValueError);
  const KilnAny swapped[3] = {any(&tin), any(int64_t{64}), any(&tout)};
  EXPECT_THROW(backend_->launch(kernel, swapped, 3, grid, block, 0), TypeError);
  DLTensor on_cpu = tin;
  on_cpu.device = {kDLCPU, 0};
  const KilnAny host[3] = {any(&on_cpu), any(&tout), any(int64_t{64})};
  EXPECT_THROW(backend_->launch(kernel, host, 3, grid, block, 0), ValueError);
  // A kernel reading past its buffers (n larger than the tensors) is caught by the fake.
  const KilnAny too_long[3] = {any(&tin), any(&tout), any(int64_t{65})};
  EXPECT_THROW(backend_->launch(kernel, too_long, 3, grid, block, 0), RuntimeError);
  backend_->module_unload(mod);
  backend_->free(0, in);
  backend_->free(0, out);
}

TEST_F(FakeDriver, ModuleErrors) {
  const std::string bad =
      ".version 7.0\n.target sm_70\n.address_size 64\n"
      ".visible .entry broken(.param .u64 p)\n{\n  kiln_not_an_instruction;\n  ret;\n}\n";
  try {
    backend_->module_load(0, bad.data(), bad.size(), "ptx",
                          R"({"kernels": {"broken": {"args": ["tensor"]}}})");
    ADD_FAILURE() << "bad PTX was loaded";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("cannot load the ptx module on cuda:0 (Kiln Fake GPU 0, sm_90): "
                          "cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX (218): a PTX JIT "
                          "compilation failed; JIT error log:\nptxas application ptx input, line "
                          "6; error   : Not a name of any known instruction: "
                          "'kiln_not_an_instruction'"));
  }
  if (const std::string why = cuda_test::examples_missing(); !why.empty()) GTEST_SKIP() << why;
  // PTX metadata naming a kernel the text lacks fails before the driver compiles anything.
  const std::string path = cuda_test::examples() + "/vector_add.ptx";
  const std::vector<uint8_t> ptx = read_bytes(path);
  try {
    backend_->module_load(0, ptx.data(), ptx.size(), "ptx",
                          R"({"kernels": {"vector_add": {}, "scale": {}}})");
    ADD_FAILURE();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the ptx module on cuda:0 (Kiln Fake GPU 0, sm_90) lacks "
                                    "kernels the metadata describes: scale (the module has: "
                                    "vector_add)"));
  }
  // Machine code: found missing after loading, and the module is unloaded again (TearDown
  // checks that no module is left).
  const std::vector<uint8_t> fatbin = read_bytes(cuda_test::examples() + "/relu.fatbin");
  EXPECT_THROW(backend_->module_load(0, fatbin.data(), fatbin.size(), "fatbin",
                                     R"({"kernels": {"relu": {}, "gelu": {}}})"),
               NotFoundError);
  EXPECT_THROW(backend_->module_load(0, fatbin.data(), fatbin.size(), "cubin", "{}"), ValueError);
  EXPECT_THROW(backend_->module_load(0, fatbin.data(), fatbin.size(), "hsaco", "{}"), ValueError);
  EXPECT_THROW(backend_->module_load(0, fatbin.data(), fatbin.size(), "fatbin", "{not json"),
               ValueError);
  const std::string garbage = "this is not device code";
  try {
    backend_->module_load(0, garbage.data(), garbage.size(), "ptx", "{}");
    ADD_FAILURE();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Parsing error near 'this'"));
  }
  EXPECT_THROW(backend_->module_load(1, ptx.data(), ptx.size(), "ptx", "{}"), IndexError);
}

TEST_F(FakeDriver, ThreadsUseTheirOwnCurrentContext) {
  if (const std::string why = cuda_test::examples_missing(); !why.empty()) GTEST_SKIP() << why;
  // Every slot makes the context current on the calling thread: fresh threads would
  // otherwise have none and the fake driver would refuse the calls.
  const std::string path = cuda_test::examples() + "/vector_add.ptx";
  const std::vector<uint8_t> ptx = read_bytes(path);
  void* mod = backend_->module_load(0, ptx.data(), ptx.size(), "ptx", read_text(path + ".json"));
  void* kernel = backend_->module_get_kernel(mod, "vector_add");
  std::vector<int> ok(6, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      constexpr int64_t n = 512;
      std::vector<float> ones(n, 1.0f);
      void* a = upload(ones);
      void* out = backend_->alloc(0, n * 4, 64);
      int64_t shape[1] = {n};
      DLTensor ta = tensor(a, shape), tout = tensor(out, shape);
      const KilnAny args[5] = {any(&ta), any(&ta), any(&tout), any(static_cast<double>(t)), any(n)};
      const uint32_t grid[3] = {2, 1, 1};
      const uint32_t block[3] = {256, 1, 1};
      void* timer = backend_->timer_create(0);
      backend_->timer_start(timer);
      for (int i = 0; i < 20; ++i) backend_->launch(kernel, args, 5, grid, block, 0);
      backend_->timer_stop(timer);
      backend_->timer_elapsed_ns(timer);
      backend_->timer_destroy(timer);
      ok[t] = download(out, n) == std::vector<float>(n, 1.0f + static_cast<float>(t)) ? 1 : 0;
      backend_->free(0, a);
      backend_->free(0, out);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok, std::vector<int>(6, 1));
  backend_->module_unload(mod);
}

// Runs this test binary with `filter` in a child process whose default runtime serves cuda
// through the fake driver, with `env` ("NAME=value ..."), and returns its exit status and
// output.
std::pair<int, std::string> run_child(const std::string& filter, const std::string& env = "") {
  TempDir dir;
  const std::string set = (dir.path() / "plugins.yaml").string();
  std::ofstream(set) << "search_paths: [" << cuda_test::plugin_dir() << "]\n"
                     << "plugins:\n  - cpu\n  - package\n  - name: cuda\n    options: "
                     << "{driver_library: '" << KILN_CUDA_FAKE_DRIVER << "'}\n";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string log = (dir.path() / "child.log").string();
  const std::string command = "KILN_CUDA_TEST_CHILD=1 KILN_LOG=warn KILN_PLUGIN_SET='" + set +
                              "' " + env + " '" + self + "' --gtest_filter='" + filter + "' > '" +
                              log + "' 2>&1";
  const int status = std::system(command.c_str());
  return {status, read_text(log)};
}

// The child's summary, without gtest's bracketed markers (ctest reads "[  SKIPPED ]" in a
// test's output as this test being skipped).
void print_summary(const std::string& output) {
  const size_t at = output.rfind("[==========]");
  std::string summary = at == std::string::npos ? output : output.substr(at);
  for (char& c : summary) {
    if (c == '[' || c == ']') c = '|';
  }
  std::printf("child run on the fake driver:\n%s", summary.c_str());
}

// The GPU suite, in a child process whose default runtime serves cuda through the fake
// driver: module functions, local_run with the tar exporter, the run configs against the CPU
// examples, the evaluator with CUDA-event timers and the L2 flush.
TEST(FakeDriverSuite, GpuTestsPassOnTheFakeDriver) {
  if (std::getenv("KILN_CUDA_TEST_CHILD") != nullptr) GTEST_SKIP() << "already the child";
  const auto [status, output] = run_child("CudaGpu.*");
  EXPECT_EQ(status, 0) << output;
  EXPECT_THAT(output, HasSubstr("[  PASSED  ]"));
  EXPECT_THAT(output, ::testing::Not(HasSubstr("[  FAILED  ]"))) << output;
  EXPECT_THAT(output, HasSubstr("Kiln Fake GPU 0")) << "the child used the fake driver";
  print_summary(output);
}

// A driver that initialises but sees no device: the reason names the library, the error and
// CUDA_VISIBLE_DEVICES, and every slot reports it (CudaPlugin.LoadsInTheDefaultRuntime).
TEST(FakeDriverSuite, NoDeviceIsTheReason) {
  if (std::getenv("KILN_CUDA_TEST_CHILD") != nullptr) GTEST_SKIP() << "already the child";
  const auto [status, output] = run_child("CudaPlugin.LoadsInTheDefaultRuntime",
                                          "KILN_FAKE_CUDA_DEVICES=0 CUDA_VISIBLE_DEVICES=7");
  EXPECT_EQ(status, 0) << output;
  EXPECT_THAT(output, HasSubstr(std::string("why_none: cuInit failed in the CUDA driver ") +
                                KILN_CUDA_FAKE_DRIVER +
                                ": CUDA_ERROR_NO_DEVICE (100) (CUDA_VISIBLE_DEVICES='7')"))
      << output;
  print_summary(output);
}

}  // namespace
}  // namespace kiln
