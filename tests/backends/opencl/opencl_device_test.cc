// SPDX-License-Identifier: Apache-2.0
// The opencl backend's devices, memory, streams and timers, the plugin options, and the
// reasons it gives when there is no OpenCL at all (no ICD).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <numeric>
#include <thread>

#include "kiln/kiln.h"
#include "opencl_test_util.h"
#include "pocl_env.h"
#include "raw_opencl.h"
#include "test_util.h"

namespace kiln::opencl_test {
namespace {

using ::testing::HasSubstr;

// Every test of this binary runs PoCL (see pocl_env.h, included once per binary here).
const bool kPoclLoaded = [] {
  test::pocl_loaded = true;
  return true;
}();

// The attributes of device `id` as a map.
std::map<std::string, Any> attributes(const DeviceBackend& b, int32_t id) {
  std::map<std::string, Any> out;
  for (auto& [k, v] : b.attributes(id)) out.emplace(k, v);
  return out;
}

int64_t int_attr(const std::map<std::string, Any>& a, const std::string& key) {
  auto it = a.find(key);
  if (it == a.end()) throw std::runtime_error("no attribute " + key);
  return it->second.cast<int64_t>();
}

using OpenclDevices = OpenclTest;

TEST_F(OpenclDevices, EnumeratesEveryDeviceInPlatformOrderWithAttributes) {
  RawOpenCL raw;
  ASSERT_TRUE(raw.loaded());
  const std::vector<cl_device_id> devices = raw.devices();
  std::string why;
  ASSERT_EQ(backend_->device_count(&why), static_cast<int32_t>(devices.size()))
      << "every device of every platform (the default options filter nothing)";
  EXPECT_EQ(why, "");
  for (int32_t id = 0; id < static_cast<int32_t>(devices.size()); ++id) {
    const auto a = attributes(*backend_, id);
    EXPECT_EQ(a.at("name").str(), raw.device_name(devices[static_cast<size_t>(id)]))
        << "numbered in platform order, then device order";
    for (const char* key : {"vendor", "platform", "version", "driver_version", "device_type",
                            "opencl_c_version", "max_work_item_sizes"}) {
      ASSERT_TRUE(a.count(key)) << key;
      EXPECT_FALSE(a.at(key).str().empty()) << key;
    }
    for (const char* key : {"compute_units", "memory_bytes", "local_memory_bytes",
                            "max_alloc_bytes", "max_work_group_size", "constant_buffer_bytes",
                            "base_address_align_bytes", "preferred_vector_width_float"}) {
      EXPECT_GT(int_attr(a, key), 0) << key;
    }
    EXPECT_GE(int_attr(a, "platform_index"), 0);
    EXPECT_LE(int_attr(a, "max_alloc_bytes"), int_attr(a, "memory_bytes"));
    cl_ulong cache = 0;
    raw.GetDeviceInfo(devices[static_cast<size_t>(id)], CL_DEVICE_GLOBAL_MEM_CACHE_SIZE,
                      sizeof(cache), &cache, nullptr);
    if (cache > 0) {
      EXPECT_EQ(int_attr(a, "l2_cache_bytes"), static_cast<int64_t>(cache))
          << "the global memory cache is reported as l2_cache_bytes";
    }
  }
}

TEST_F(OpenclDevices, OutOfRangeDeviceIdsAreIndexErrors) {
  const int32_t n = backend_->device_count();
  try {
    backend_->attributes(n);
    FAIL() << "expected IndexError";
  } catch (const IndexError& e) {
    EXPECT_THAT(e.what(), HasSubstr("device id " + std::to_string(n) + " is out of range"));
  }
  EXPECT_THROW(backend_->alloc(-1, 64, 64), IndexError);
  EXPECT_THROW(backend_->synchronize(n + 3), IndexError);
  EXPECT_THROW(backend_->module_load(n, "x", 1, "opencl_c", "{}"), IndexError);
}

TEST_F(OpenclDevices, CopiesBetweenHostAndDeviceAndWithinTheDevice) {
  constexpr size_t n = 4096;
  std::vector<uint8_t> src(n), back(n, 0);
  std::iota(src.begin(), src.end(), 3);
  void* a = backend_->alloc(0, n + 256, 64);
  void* b = backend_->alloc(0, n + 256, 64);
  backend_->copy_to_device(0, src.data(), a, 100, n);
  backend_->copy_on_device(0, a, 100, b, 7, n);
  backend_->copy_to_host(0, b, 7, back.data(), n);
  backend_->synchronize(0);
  EXPECT_EQ(back, src);

  // Overlapping ranges of one buffer behave like memmove.
  backend_->copy_on_device(0, a, 100, a, 150, n);
  std::vector<uint8_t> shifted(n, 0);
  backend_->copy_to_host(0, a, 150, shifted.data(), n);
  EXPECT_EQ(shifted, src);

  // Ranges are checked against the buffer's size.
  try {
    backend_->copy_to_device(0, src.data(), a, 300, n);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("outside the buffer of " + std::to_string(n + 256)));
  }
  EXPECT_THROW(backend_->copy_on_device(0, a, 0, b, n, 512), ValueError);
  backend_->free(0, a);
  backend_->free(0, b);
  // A freed buffer (or any pointer the backend did not allocate) is refused, not used.
  try {
    backend_->copy_to_host(0, a, 0, back.data(), 16);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not a live buffer of the opencl backend"));
  }
  int not_a_buffer = 0;
  EXPECT_THROW(backend_->copy_to_device(0, src.data(), &not_a_buffer, 0, 4), ValueError);
}

TEST_F(OpenclDevices, RejectsBadAllocations) {
  const auto a = attributes(*backend_, 0);
  const auto max_alloc = static_cast<size_t>(int_attr(a, "max_alloc_bytes"));
  try {
    backend_->alloc(0, max_alloc + 1, 64);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), HasSubstr("CL_DEVICE_MAX_MEM_ALLOC_SIZE"));
  }
  EXPECT_THROW(backend_->alloc(0, 64, 48), ValueError) << "alignment must be a power of two";
  void* p = backend_->alloc(0, 1 << 20, 4096);
  EXPECT_NE(p, nullptr);
  backend_->free(0, p);
}

TEST_F(OpenclDevices, StreamsAreExtraInOrderQueues) {
  ASSERT_TRUE(backend_->has_streams());
  void* s1 = backend_->stream_create(0);
  void* s2 = backend_->stream_create(0);
  EXPECT_NE(s1, s2);
  std::vector<int32_t> src(1 << 16), back(1 << 16, 0);
  std::iota(src.begin(), src.end(), -5);
  const size_t bytes = src.size() * sizeof(int32_t);
  void* a = backend_->alloc(0, bytes, 64);
  void* b = backend_->alloc(0, bytes, 64);
  backend_->copy_to_device(0, src.data(), a, 0, bytes, s1);
  // In order on one queue: the device copy sees the upload, the download sees the copy.
  backend_->copy_on_device(0, a, 0, b, 0, bytes, s1);
  backend_->copy_to_host(0, b, 0, back.data(), bytes, s1);
  backend_->synchronize(0, s1);
  EXPECT_EQ(back, src);
  backend_->synchronize(0, s2);
  backend_->stream_destroy(0, s1);
  // A destroyed stream is refused.
  try {
    backend_->synchronize(0, s1);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not a live stream of the opencl backend"));
  }
  backend_->stream_destroy(0, s2);
  backend_->free(0, a);
  backend_->free(0, b);
}

TEST_F(OpenclDevices, TimerReadsTheMarkersAroundKernels) {
  ASSERT_TRUE(backend_->has_timer());
  const Example ex = example("vector_add.cl");
  void* mod = backend_->module_load(0, ex.source.data(), ex.source.size(), "opencl_c", ex.metadata);
  void* k = backend_->module_get_kernel(mod, "vector_add");
  constexpr int64_t n = 1 << 20;
  Tensor a = Tensor::empty({n}, DataType::Float(32), device_);
  Tensor b = Tensor::empty({n}, DataType::Float(32), device_);
  Tensor out = Tensor::empty({n}, DataType::Float(32), device_);
  const Any ta(a), tb(b), tout(out), alpha(0.5), length(n);
  const KilnAny args[5] = {ta.to_abi(), tb.to_abi(), tout.to_abi(), alpha.to_abi(),
                           length.to_abi()};
  const uint32_t grid[3] = {static_cast<uint32_t>(n / 256), 1, 1};
  const uint32_t block[3] = {256, 1, 1};

  void* timer = backend_->timer_create(0);
  EXPECT_THROW(backend_->timer_elapsed_ns(timer), ValueError) << "not started and stopped";
  EXPECT_THROW(backend_->timer_stop(timer), ValueError) << "stop before start";
  backend_->timer_start(timer);
  for (int i = 0; i < 8; ++i) backend_->launch(k, args, 5, grid, block, 0);
  backend_->timer_stop(timer);
  const int64_t busy = backend_->timer_elapsed_ns(timer);
  EXPECT_GT(busy, 0) << "eight kernels over 2^20 elements take time on the device";

  // An empty interval reads (close to) nothing, never a negative time.
  backend_->timer_start(timer);
  backend_->timer_stop(timer);
  EXPECT_GE(backend_->timer_elapsed_ns(timer), 0);

  // On a stream: the markers go on that queue.
  void* stream = backend_->stream_create(0);
  backend_->timer_start(timer, stream);
  backend_->launch(k, args, 5, grid, block, 0, stream);
  backend_->timer_stop(timer, stream);
  EXPECT_GT(backend_->timer_elapsed_ns(timer), 0);
  backend_->synchronize(0, stream);
  backend_->stream_destroy(0, stream);
  backend_->timer_destroy(timer);
  backend_->module_unload(mod);
}

// ---- plugin options ----

TEST(OpenclOptions, FiltersSelectDevicesAndExplainAnEmptySelection) {
  std::string why;
  if (!opencl_backend(Runtime::global(), &why)) GTEST_SKIP() << "no OpenCL device: " << why;
  const std::string first_name =
      Runtime::global().backend(kDLOpenCL)->attributes(0).front().second.str();
  TempDir dir;
  {
    // A case-insensitive part of the first device's name selects it.
    std::string part = first_name.substr(0, std::min<size_t>(first_name.size(), 6));
    for (char& c : part) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    Runtime rt(options_for(opencl_plugin_set(dir.path(), "{device: \"" + part + "\"}")));
    auto b = rt.backend(kDLOpenCL);
    ASSERT_GE(b->device_count(), 1);
    EXPECT_EQ(b->attributes(0).front().second.str(), first_name);
  }
  {
    Runtime rt(options_for(opencl_plugin_set(dir.path(), "{platform: no such platform}")));
    auto b = rt.backend(kDLOpenCL);
    std::string reason;
    EXPECT_EQ(b->device_count(&reason), 0);
    EXPECT_THAT(reason, HasSubstr("no OpenCL device matches the plugin options"));
    EXPECT_THAT(reason, HasSubstr("platform='no such platform'"));
    EXPECT_THAT(reason, HasSubstr(first_name)) << "the devices found are listed";
    // Every other slot says why, as UNAVAILABLE.
    try {
      b->alloc(0, 64, 64);
      FAIL() << "expected UnavailableError";
    } catch (const UnavailableError& e) {
      EXPECT_THAT(e.what(), HasSubstr("no OpenCL device matches the plugin options"));
    }
  }
}

TEST(OpenclOptions, BadOptionsFailThePluginNamingTheOption) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{device_type: tpu}", "option device_type = \"tpu\" is invalid"},
      {"{memory_cache_entries: -1}", "option memory_cache_entries = -1 is out of range"},
      {"{cache_dir: 3}", "option cache_dir = 3 is invalid: expected a string"},
  };
  for (const auto& [options, expected] : cases) {
    Runtime rt(options_for(opencl_plugin_set(dir.path(), options)));
    const PluginStatus* status = nullptr;
    for (const auto& s : rt.plugins()) {
      if (s.name == "opencl") status = &s;
    }
    ASSERT_NE(status, nullptr);
    EXPECT_EQ(status->state, PluginStatus::State::kFailed) << options;
    EXPECT_THAT(status->reason, HasSubstr(expected)) << options;
  }
}

// ---- no ICD at all ----

// `kiln devices` in a child process whose ICD loader finds no driver.
TEST(OpenclNoIcd, KilnDevicesReportsNoPlatformWithTheLoadersError) {
  const fs::path kiln = fs::path(KILN_BUILD_DIR) / "bin" / "kiln";
  ASSERT_TRUE(fs::exists(kiln)) << kiln << " is missing: build the kiln_tool target";
  TempDir empty;
  std::string output;
  const int rc = run_command("env OCL_ICD_VENDORS=" + shell_quote(empty.path().string()) +
                                 " KILN_PLUGINS= " + shell_quote(kiln.string()) + " devices",
                             &output);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_THAT(output, HasSubstr("opencl (plugin opencl): no devices: no OpenCL platform: "
                                "clGetPlatformIDs returned -1001 (CL_PLATFORM_NOT_FOUND_KHR)"));
  EXPECT_THAT(output, HasSubstr("libOpenCL.so")) << "the loader is named";
  EXPECT_THAT(output, HasSubstr("OCL_ICD_VENDORS=" + empty.path().string()));
}

// The same situation seen through the backend, in a child process of this test binary: every
// slot but device_count fails with KILN_ERROR_UNAVAILABLE and the reason.
TEST(OpenclNoIcd, EverySlotIsUnavailableWithTheReason) {
  TempDir empty;
  std::string output;
  const int rc =
      run_command("env OCL_ICD_VENDORS=" + shell_quote(empty.path().string()) +
                      " KILN_OPENCL_TEST_NO_ICD_CHILD=1 /proc/" + std::to_string(::getpid()) +
                      "/exe --gtest_filter=OpenclNoIcdChild.SlotsAreUnavailable",
                  &output);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_THAT(output, HasSubstr("[       OK ] OpenclNoIcdChild.SlotsAreUnavailable")) << output;
}

TEST(OpenclNoIcdChild, SlotsAreUnavailable) {
  if (std::getenv("KILN_OPENCL_TEST_NO_ICD_CHILD") == nullptr) {
    GTEST_SKIP() << "runs as the child process of OpenclNoIcd.EverySlotIsUnavailableWithTheReason";
  }
  Ref<DeviceBackend> b = Runtime::global().backend(kDLOpenCL);
  std::string why;
  ASSERT_EQ(b->device_count(&why), 0);
  EXPECT_THAT(why, HasSubstr("no OpenCL platform: clGetPlatformIDs returned -1001"));
  auto expect_unavailable = [&](const char* what, auto&& call) {
    try {
      call();
      ADD_FAILURE() << what << " did not throw";
    } catch (const UnavailableError& e) {
      EXPECT_THAT(e.what(), HasSubstr("CL_PLATFORM_NOT_FOUND_KHR")) << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << " threw something else: " << e.what();
    }
  };
  int dummy = 0;
  const uint32_t ext[3] = {1, 1, 1};
  expect_unavailable("attributes", [&] { b->attributes(0); });
  expect_unavailable("alloc", [&] { b->alloc(0, 64, 64); });
  expect_unavailable("copy_to_device", [&] { b->copy_to_device(0, &dummy, &dummy, 0, 4); });
  expect_unavailable("synchronize", [&] { b->synchronize(0); });
  expect_unavailable("stream_create", [&] { b->stream_create(0); });
  expect_unavailable("timer_create", [&] { b->timer_create(0); });
  expect_unavailable("timer_start", [&] { b->timer_start(&dummy); });
  expect_unavailable("module_load", [&] { b->module_load(0, "x", 1, "opencl_c", "{}"); });
  expect_unavailable("module_get_kernel", [&] { b->module_get_kernel(&dummy, "k"); });
  expect_unavailable("launch", [&] { b->launch(&dummy, nullptr, 0, ext, ext, 0); });
}

}  // namespace
}  // namespace kiln::opencl_test
