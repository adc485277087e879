// SPDX-License-Identifier: Apache-2.0
// The rocm plugin as the runtime sees it: it loads, reports its reason when there is no GPU
// (here: hipGetDeviceCount's 100 hipErrorNoDevice), fails every other slot with that reason,
// reads its options, and loads the HIP runtime only on the first device query.
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "kiln/kiln.h"
#include "rocm_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using rocm_test::IsolatedRuntime;

// True when /proc/self/maps shows a library whose name contains `name`.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

// True when a HIP runtime library can be opened here (opening it is harmless: it does nothing
// until an entry point is called).
bool hip_runtime_installed() {
  for (const char* name : {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"}) {
    if (void* h = dlopen(name, RTLD_LAZY | RTLD_LOCAL)) {
      (void)h;  // never closed, like the plugin's own handle
      return true;
    }
  }
  return false;
}

TEST(RocmPluginTest, LoadsIntoTheGlobalRuntime) {
  const PluginStatus* status = nullptr;
  for (const PluginStatus& s : Runtime::global().plugins()) {
    if (s.name == "rocm") status = &s;
  }
  ASSERT_NE(status, nullptr) << "configs/plugins.yaml lists rocm";
  EXPECT_EQ(status->state, PluginStatus::State::kLoaded) << status->reason;
  EXPECT_THAT(status->provides, ::testing::Contains("device:rocm"));
  Ref<DeviceBackend> backend = Runtime::global().backend(kDLROCM);
  EXPECT_EQ(backend->dl_device_type(), kDLROCM);
  EXPECT_EQ(backend->name(), "rocm");
  EXPECT_TRUE(backend->has_streams());
  EXPECT_TRUE(backend->has_timer());
  EXPECT_TRUE(backend->has_modules());
  const std::optional<int32_t> hip = Runtime::global().device_types().find("hip");
  ASSERT_TRUE(hip.has_value());
  EXPECT_EQ(*hip, kDLROCM);
}

TEST(RocmPluginTest, ReportsWhyThereIsNoDevice) {
  Ref<DeviceBackend> backend = Runtime::global().backend(kDLROCM);
  std::string why;
  const int32_t count = backend->device_count(&why);
  if (count > 0) GTEST_SKIP() << "this machine has " << count << " rocm device(s)";
  EXPECT_FALSE(why.empty());
  if (hip_runtime_installed() && !std::filesystem::exists("/dev/kfd")) {
    // HIP is installed but there is no GPU (deps.md §6): the runtime's own error.
    EXPECT_THAT(why, AllOf(HasSubstr("hipGetDeviceCount failed with 100 hipErrorNoDevice"),
                           HasSubstr("libamdhip64"), HasSubstr("HIP runtime")));
  }
  // Asking again gives the same answer (initialisation happens once).
  std::string again;
  EXPECT_EQ(backend->device_count(&again), 0);
  EXPECT_EQ(again, why);
}

TEST(RocmPluginTest, EverySlotFailsWithTheReasonWithoutADevice) {
  Ref<DeviceBackend> backend = Runtime::global().backend(kDLROCM);
  std::string why;
  if (backend->device_count(&why) > 0) GTEST_SKIP() << "this machine has a rocm device";
  auto expect_unavailable = [&](const char* slot, auto&& call) {
    try {
      call();
      ADD_FAILURE() << slot << " succeeded without a device";
    } catch (const UnavailableError& e) {
      EXPECT_THAT(e.what(), HasSubstr(why)) << slot;
    } catch (const std::exception& e) {
      ADD_FAILURE() << slot << " threw something else: " << e.what();
    }
  };
  expect_unavailable("attributes", [&] { backend->attributes(0); });
  expect_unavailable("attributes(7)", [&] { backend->attributes(7); });
  expect_unavailable("alloc", [&] { backend->alloc(0, 1024, 64); });
  int host = 0;
  expect_unavailable("copy_to_device", [&] { backend->copy_to_device(0, &host, nullptr, 0, 0); });
  expect_unavailable("synchronize", [&] { backend->synchronize(0); });
  expect_unavailable("stream_create", [&] { backend->stream_create(0); });
  expect_unavailable("timer_create", [&] { backend->timer_create(0); });
  const std::string garbage = "not a code object";
  expect_unavailable("module_load", [&] {
    backend->module_load(0, garbage.data(), garbage.size(), "hsaco", "{}");
  });
  expect_unavailable("Tensor::empty", [&] {
    Tensor::empty({4}, DataType::Float(32), Device{kDLROCM, 0});
  });
}

TEST(RocmPluginTest, MissingHipLibraryIsTheReason) {
  IsolatedRuntime rt("{hip_library: /nonexistent/libamdhip64.so.99}");
  ASSERT_EQ(rt.status().state, PluginStatus::State::kLoaded) << rt.status().reason;
  Ref<DeviceBackend> backend = rt.runtime().backend(kDLROCM);
  std::string why;
  EXPECT_EQ(backend->device_count(&why), 0);
  EXPECT_THAT(why, AllOf(HasSubstr("cannot load the HIP runtime"), HasSubstr("option hip_library"),
                         HasSubstr("/nonexistent/libamdhip64.so.99")));
  EXPECT_THROW(backend->alloc(0, 64, 64), UnavailableError);
}

TEST(RocmPluginTest, ALibraryThatIsNotHipIsTheReason) {
  IsolatedRuntime rt("{hip_library: libc.so.6}");
  std::string why;
  EXPECT_EQ(rt.runtime().backend(kDLROCM)->device_count(&why), 0);
  EXPECT_THAT(why, HasSubstr("libc.so.6 does not export hipGetErrorName"));
}

TEST(RocmPluginTest, BadOptionsFailTheNegotiation) {
  IsolatedRuntime wrong_type("{hip_library: [1, 2]}");
  EXPECT_EQ(wrong_type.status().state, PluginStatus::State::kFailed);
  EXPECT_THAT(wrong_type.status().reason,
              AllOf(HasSubstr("negotiation refused"), HasSubstr("hip_library")));
  IsolatedRuntime arch("{compile_options: [--offload-arch=gfx90a]}");
  EXPECT_EQ(arch.status().state, PluginStatus::State::kFailed);
  EXPECT_THAT(arch.status().reason, HasSubstr("compile_options"));
  IsolatedRuntime unknown("{no_such_option: 1}");
  EXPECT_EQ(unknown.status().state, PluginStatus::State::kLoaded) << unknown.status().reason;
}

// Negotiation must not initialise the driver: a fresh process that only loads the plugin has no
// libamdhip64 mapped until the first device query. (Run in a child process: the test process
// itself has long loaded HIP through the global runtime.)
TEST(RocmPluginDeathTest, TheHipRuntimeIsLoadedOnFirstUseOnly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        IsolatedRuntime rt("{}");
        int rc = 0;
        if (rt.status().state != PluginStatus::State::kLoaded) rc |= 1;
        if (mapped("libamdhip64")) rc |= 2;  // loaded during negotiation
        std::string why;
        rt.runtime().backend(kDLROCM)->device_count(&why);
        const bool loadable = why.find("cannot load the HIP runtime") == std::string::npos;
        if (loadable && !mapped("libamdhip64")) rc |= 4;  // the query did not load it
        std::fprintf(stderr, "rc=%d why=%s\n", rc, why.c_str());
        std::exit(rc);
      },
      ::testing::ExitedWithCode(0), "rc=0");
}

}  // namespace
}  // namespace kiln
