// SPDX-License-Identifier: Apache-2.0
// The cuda plugin as the host sees it: it loads everywhere, negotiates without touching the
// driver, and with no driver, a stub driver or no device reports exactly why, through
// device_count's why_none and an UnavailableError from every other slot.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

using cuda_test::PrivateRuntime;
using ::testing::HasSubstr;

// Expects every slot but device_count to fail with UnavailableError carrying `why`.
void expect_unavailable_everywhere(const DeviceBackend& backend, const std::string& why) {
  auto expect = [&](const char* slot, auto&& call) {
    SCOPED_TRACE(slot);
    try {
      call();
      ADD_FAILURE() << slot << " succeeded without a device";
    } catch (const UnavailableError& e) {
      EXPECT_THAT(e.what(), HasSubstr(why));
    }
  };
  expect("device_attributes", [&] { backend.attributes(0); });
  expect("alloc", [&] { backend.alloc(0, 1024, 64); });
  int host = 0;
  expect("copy_to_device",
         [&] { backend.copy_to_device(0, &host, reinterpret_cast<void*>(0x1000), 0, 4); });
  expect("copy_to_host",
         [&] { backend.copy_to_host(0, reinterpret_cast<void*>(0x1000), 0, &host, 4); });
  expect("copy_on_device", [&] {
    backend.copy_on_device(0, reinterpret_cast<void*>(0x1000), 0, reinterpret_cast<void*>(0x2000),
                           0, 4);
  });
  expect("synchronize", [&] { backend.synchronize(0); });
  expect("stream_create", [&] { backend.stream_create(0); });
  expect("timer_create", [&] { backend.timer_create(0); });
  const std::string ptx = ".version 8.0\n.target sm_80\n.address_size 64\n";
  expect("module_load", [&] { backend.module_load(0, ptx.data(), ptx.size(), "ptx", "{}"); });
  EXPECT_THROW(Tensor::empty({16}, DataType::Float(32), Device{kDLCUDA, 0}), UnavailableError);
}

TEST(CudaPlugin, LoadsInTheDefaultRuntime) {
  const PluginStatus* status = nullptr;
  for (const PluginStatus& s : Runtime::global().plugins()) {
    if (s.name == "cuda") status = &s;
  }
  ASSERT_NE(status, nullptr) << "the default plugin set lists cuda";
  EXPECT_EQ(status->state, PluginStatus::State::kLoaded) << status->reason;
  EXPECT_EQ(status->provides, std::vector<std::string>{"device:cuda"});
  Ref<DeviceBackend> backend = Runtime::global().backend(kDLCUDA);
  EXPECT_EQ(backend->name(), "cuda");
  EXPECT_TRUE(backend->has_timer());
  EXPECT_TRUE(backend->has_streams());
  EXPECT_TRUE(backend->has_modules());
  std::string why;
  const int32_t count = backend->device_count(&why);
  std::printf("why_none: %s\n", why.c_str());
  if (count == 0) {
    // Here (no driver): the reason names the library and the loader's error.
    EXPECT_FALSE(why.empty());
    EXPECT_THAT(why, ::testing::AnyOf(HasSubstr("libcuda.so.1"), HasSubstr("cuInit")));
    expect_unavailable_everywhere(*backend, why);
  } else {
    EXPECT_TRUE(why.empty()) << why;
    EXPECT_THROW(backend->attributes(count), IndexError);
    EXPECT_THROW(backend->alloc(count, 64, 64), IndexError);
    EXPECT_THROW(backend->attributes(-1), IndexError);
  }
}

TEST(CudaPlugin, MissingDriverIsTheReason) {
  PrivateRuntime rt("{driver_library: libkiln_no_such_cuda_driver.so.1}");
  ASSERT_NE(rt.status(), nullptr);
  ASSERT_EQ(rt.status()->state, PluginStatus::State::kLoaded) << rt.status()->reason;
  Ref<DeviceBackend> backend = rt.runtime().backend(kDLCUDA);
  std::string why;
  EXPECT_EQ(backend->device_count(&why), 0);
  EXPECT_THAT(why, HasSubstr("cannot load the CUDA driver: "
                             "dlopen(\"libkiln_no_such_cuda_driver.so.1\") failed: "
                             "libkiln_no_such_cuda_driver.so.1: cannot open shared object file"));
  expect_unavailable_everywhere(*backend, why);
  // `kiln devices` shows the same reason.
  bool listed = false;
  for (const BackendInfo& info : rt.runtime().backends()) {
    if (info.type_name != "cuda") continue;
    listed = true;
    EXPECT_TRUE(info.devices.empty());
    EXPECT_EQ(info.why_none, why);
  }
  EXPECT_TRUE(listed);
}

TEST(CudaPlugin, StubDriverReportsStubLibrary) {
  const std::string stub = cuda_test::driver_stub();
  if (stub.empty()) GTEST_SKIP() << "no CUDA toolkit driver stub (lib/stubs/libcuda.so) found";
  PrivateRuntime rt("{driver_library: '" + stub + "'}");
  ASSERT_EQ(rt.status()->state, PluginStatus::State::kLoaded) << rt.status()->reason;
  Ref<DeviceBackend> backend = rt.runtime().backend(kDLCUDA);
  std::string why;
  EXPECT_EQ(backend->device_count(&why), 0);
  EXPECT_THAT(why, HasSubstr("cuInit failed in the CUDA driver " + stub +
                             ": CUDA_ERROR_STUB_LIBRARY (34)"));
  expect_unavailable_everywhere(*backend, why);
}

TEST(CudaPlugin, LibraryThatIsNotADriver) {
  PrivateRuntime rt("{driver_library: libm.so.6}");
  ASSERT_EQ(rt.status()->state, PluginStatus::State::kLoaded) << rt.status()->reason;
  std::string why;
  EXPECT_EQ(rt.runtime().backend(kDLCUDA)->device_count(&why), 0);
  EXPECT_THAT(why, HasSubstr("the CUDA driver libm.so.6 lacks the entry point cuGetErrorName"));
}

TEST(CudaPlugin, ConcurrentFirstQueriesAgree) {
  // The driver is initialised once, on whichever thread asks first.
  PrivateRuntime rt("{driver_library: libkiln_no_such_cuda_driver.so.1}");
  Ref<DeviceBackend> backend = rt.runtime().backend(kDLCUDA);
  std::vector<std::string> reasons(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reasons.size(); ++i) {
    threads.emplace_back([&, i] { backend->device_count(&reasons[i]); });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& r : reasons) EXPECT_EQ(r, reasons[0]);
  EXPECT_FALSE(reasons[0].empty());
}

TEST(CudaPlugin, BadOptionsRefuseNegotiation) {
  {
    PrivateRuntime rt("{driver_library: 5}");
    ASSERT_NE(rt.status(), nullptr);
    EXPECT_EQ(rt.status()->state, PluginStatus::State::kFailed);
    EXPECT_THAT(rt.status()->reason,
                HasSubstr("negotiation refused: cuda: option driver_library = 5 is invalid"));
  }
  {
    PrivateRuntime rt("{build_options: \"-DX='open\"}");
    EXPECT_EQ(rt.status()->state, PluginStatus::State::kFailed);
    EXPECT_THAT(rt.status()->reason, HasSubstr("unterminated single quote"));
  }
  {
    // Unknown keys are warned about, not fatal.
    PrivateRuntime rt("{driver_library: libkiln_no_such_cuda_driver.so.1, colour: blue}");
    EXPECT_EQ(rt.status()->state, PluginStatus::State::kLoaded) << rt.status()->reason;
  }
}

TEST(CudaPlugin, DeviceCodeModuleReportsTheMissingDevice) {
  // Loading device code needs no device; calling a kernel then says why there is none.
  const std::string reason = cuda_test::no_device_reason();
  if (reason.empty()) GTEST_SKIP() << "this machine has a CUDA device";
  if (const std::string why = cuda_test::examples_missing(); !why.empty()) GTEST_SKIP() << why;
  Module m = load_module(cuda_test::examples() + "/vector_add.ptx");
  Function f = m["vector_add"];
  EXPECT_THROW(f(Tensor::empty({4}, DataType::Float(32)), Tensor::empty({4}, DataType::Float(32)),
                 Tensor::empty({4}, DataType::Float(32)), 1.0, 4, 1, 4),
               ValueError)
      << "host tensors are refused for cuda code";
}

}  // namespace
}  // namespace kiln
