// SPDX-License-Identifier: Apache-2.0
// The rocm plugin's device paths driven through a fake HIP runtime (fake_hip.cc, selected with
// the hip_library option): enumeration, memory, copies, streams, timers, code-object choice,
// hipModuleLoadData, argument packing and launches, and the whole Kiln pipeline (run configs,
// modules from .hsaco / .hip files, tar export, local_run) against the CPU examples. The fake
// runs the three example kernels on the host; this checks the plugin and the host side, not
// the HIP kernels or a GPU (see gpu_test.cc for those).
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "hiprtc_compiler.h"
#include "kiln/detail/run_config.h"
#include "kiln/kiln.h"
#include "kiln/testing.h"
#include "rocm_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using rocm_test::example_dir;
using rocm_test::IsolatedRuntime;
using ::testing::AllOf;
using ::testing::HasSubstr;

using rocm_test::kGpu;

std::string fake_options() { return std::string("{hip_library: \"") + KILN_ROCM_FAKE_HIP + "\"}"; }

// The fake's inspection entry points (the library is loaded by the plugin by then).
template <typename Fn>
Fn fake_symbol(const char* name) {
  void* handle = dlopen(KILN_ROCM_FAKE_HIP, RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  return reinterpret_cast<Fn>(dlsym(handle, name));
}
int launches(unsigned extents[7]) {
  return fake_symbol<int (*)(unsigned*)>("kiln_fake_hip_last_launch")(extents);
}
uint32_t last_mach() { return fake_symbol<uint32_t (*)()>("kiln_fake_hip_last_mach")(); }
int live_allocations() { return fake_symbol<int (*)()>("kiln_fake_hip_allocations")(); }

bool hiprtc_available() {
  std::string why;
  return rocm::load_hiprtc("", &why) != nullptr;
}

class FakeDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rt_ = std::make_unique<IsolatedRuntime>(fake_options());
    ASSERT_EQ(rt_->status().state, PluginStatus::State::kLoaded) << rt_->status().reason;
    backend_ = rt_->runtime().backend(kDLROCM);
    std::string why;
    ASSERT_EQ(backend_->device_count(&why), 1) << why;
  }
  std::unique_ptr<IsolatedRuntime> rt_;
  Ref<DeviceBackend> backend_;
};

TEST_F(FakeDeviceTest, EnumeratesTheDeviceWithItsAttributes) {
  std::map<std::string, Any> attrs;
  for (auto& [key, value] : backend_->attributes(0)) attrs[key] = value;
  EXPECT_EQ(attrs["name"].str(), "Kiln fake HIP device 0");
  EXPECT_EQ(attrs["vendor"].str(), "AMD");
  EXPECT_EQ(attrs["gcn_arch_name"].str(), "gfx90a:sramecc+:xnack-");
  EXPECT_EQ(attrs["arch"].str(), "gfx90a");
  EXPECT_EQ(attrs["compute_units"].cast<int64_t>(), 104);
  EXPECT_EQ(attrs["memory_bytes"].cast<int64_t>(), int64_t{64} << 30);
  EXPECT_EQ(attrs["l2_cache_bytes"].cast<int64_t>(), 8 << 20);
  EXPECT_EQ(attrs["shared_memory_per_block_bytes"].cast<int64_t>(), 65536);
  EXPECT_EQ(attrs["max_threads_per_block"].cast<int64_t>(), 1024);
  EXPECT_EQ(attrs["warp_size"].cast<int64_t>(), 64);
  EXPECT_EQ(attrs["clock_khz"].cast<int64_t>(), 1700000);
  EXPECT_EQ(attrs["pci_bus_id"].str(), "0000:c1:00.0");
  EXPECT_EQ(attrs["pci_bus"].cast<int64_t>(), 0xc1);
  EXPECT_EQ(attrs["runtime"].str(), KILN_ROCM_FAKE_HIP);
  EXPECT_EQ(attrs["runtime_version"].str(), "5.2.1");
  try {
    backend_->attributes(1);
    FAIL() << "device 1 exists";
  } catch (const IndexError& e) {
    EXPECT_THAT(e.what(), HasSubstr("device id 1 is out of range: the rocm backend has 1 device"));
  }
  EXPECT_THROW(backend_->alloc(-1, 64, 64), IndexError);
}

TEST(FakeRuntimeTest, NoDeviceFromTheRuntimeIsTheReason) {
  ScopedEnv none("KILN_FAKE_HIP_DEVICES", "0");
  IsolatedRuntime rt(fake_options());
  std::string why;
  EXPECT_EQ(rt.runtime().backend(kDLROCM)->device_count(&why), 0);
  EXPECT_THAT(why, AllOf(HasSubstr("hipGetDeviceCount failed with 100 hipErrorNoDevice"),
                         HasSubstr(KILN_ROCM_FAKE_HIP), HasSubstr("HIP runtime 5.2.1")));
}

TEST_F(FakeDeviceTest, AllocatesAlignedAndCopiesWithOffsets) {
  const int before = live_allocations();
  for (size_t alignment : {64u, 256u, 4096u, 65536u}) {
    void* p = backend_->alloc(0, 1 << 20, alignment);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignment, 0u) << alignment;
    backend_->free(0, p);  // the fake rejects pointers hipMalloc did not return
  }
  EXPECT_EQ(live_allocations(), before);
  constexpr size_t n = 1 << 16;
  std::vector<uint8_t> src(n), back(n, 0);
  std::iota(src.begin(), src.end(), 7);
  void* a = backend_->alloc(0, n + 128, 64);
  void* b = backend_->alloc(0, n + 128, 64);
  backend_->copy_to_device(0, src.data(), a, 64, n);
  backend_->copy_on_device(0, a, 64, b, 128, n);
  backend_->copy_to_host(0, b, 128, back.data(), n);
  backend_->synchronize(0);
  EXPECT_EQ(src, back);
  // Overlapping ranges, both directions (memmove semantics through a temporary buffer).
  backend_->copy_on_device(0, b, 128, b, 0, n);
  backend_->copy_to_host(0, b, 0, back.data(), n);
  EXPECT_EQ(src, back);
  backend_->copy_on_device(0, b, 0, b, 100, n);
  backend_->copy_to_host(0, b, 100, back.data(), n);
  EXPECT_EQ(src, back);
  backend_->free(0, a);
  backend_->free(0, b);
  EXPECT_EQ(live_allocations(), before);
  Tensor t = Tensor::empty({3, 5}, DataType::Float(32), kGpu, rt_->runtime());
  std::vector<float> host(15), out(15);
  std::iota(host.begin(), host.end(), 1.5f);
  t.copy_from(host.data(), host.size() * 4);
  t.copy_to(out.data(), out.size() * 4);
  EXPECT_EQ(out, host);
}

TEST_F(FakeDeviceTest, StreamsAndTimers) {
  void* stream = backend_->stream_create(0);
  std::vector<int32_t> src(1024, 42), back(1024, 0);
  void* p = backend_->alloc(0, 4096, 64);
  void* timer = backend_->timer_create(0);
  EXPECT_THROW(backend_->timer_stop(timer, stream), ValueError);  // before start
  backend_->timer_start(timer, stream);
  backend_->copy_to_device(0, src.data(), p, 0, 4096, stream);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  backend_->copy_to_host(0, p, 0, back.data(), 4096, stream);
  backend_->timer_stop(timer, stream);
  backend_->synchronize(0, stream);
  EXPECT_EQ(src, back);
  EXPECT_GE(backend_->timer_elapsed_ns(timer), 4'000'000);  // ms -> ns
  backend_->timer_destroy(timer);
  backend_->free(0, p);
  backend_->stream_destroy(0, stream);
}

TEST_F(FakeDeviceTest, LoadsTheCodeObjectOfTheDevicesArchitecture) {
  KILN_ROCM_REQUIRE_EXAMPLE(example_dir() / "vector_add.hsaco");
  const std::string meta = rocm_test::read_text(example_dir() / "vector_add.hsaco.json");
  auto load = [&](const std::string& file, const std::string& format, const std::string& m) {
    const std::vector<uint8_t> bytes = rocm_test::read_bytes(example_dir() / file);
    return backend_->module_load(0, bytes.data(), bytes.size(), format, m);
  };
  void* mod = load("vector_add.hsaco", "hsaco", meta);
  EXPECT_EQ(last_mach(), 0x3fu);  // the bundle's gfx90a entry, as a raw ELF
  EXPECT_NE(backend_->module_get_kernel(mod, "vector_add"), nullptr);
  try {
    backend_->module_get_kernel(mod, "relu");
    FAIL() << "relu found";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("kernels: vector_add"));
  }
  backend_->module_unload(mod);
  backend_->module_unload(load("vector_add_gfx90a.hsaco", "hsaco", meta));
  try {
    load("vector_add_gfx1030.hsaco", "hsaco", meta);
    FAIL() << "a gfx1030 object was loaded on gfx90a";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is for gfx1030"));
  }
  EXPECT_THROW(load("vector_add.hsaco", "hsaco",
                    R"({"kernels": {"vector_sub": {"args": [], "launch": []}}})"),
               ValueError);
  EXPECT_THROW(load("vector_add.hsaco", "cubin", meta), ValueError);
  EXPECT_THROW(load("vector_add.hsaco", "hsaco", R"({"kernels": {"vector_add": {"args": ["x"]}}})"),
               ValueError);
  const std::string garbage = "this is not device code";
  EXPECT_THROW(backend_->module_load(0, garbage.data(), garbage.size(), "hsaco", "{}"), ValueError);
  EXPECT_THROW(backend_->module_load(0, garbage.data(), 0, "hsaco", "{}"), ValueError);
}

TEST(FakeRuntimeTest, AnRdnaDeviceGetsTheGfx1030Entry) {
  KILN_ROCM_REQUIRE_EXAMPLE(example_dir() / "relu.hsaco");
  ScopedEnv arch("KILN_FAKE_HIP_ARCH", "gfx1030");
  IsolatedRuntime rt(fake_options());
  Ref<DeviceBackend> b = rt.runtime().backend(kDLROCM);
  const std::vector<uint8_t> bytes = rocm_test::read_bytes(example_dir() / "relu.hsaco");
  void* mod = b->module_load(0, bytes.data(), bytes.size(), "hsaco",
                             rocm_test::read_text(example_dir() / "relu.hsaco.json"));
  EXPECT_EQ(last_mach(), 0x36u);
  b->module_unload(mod);
  ScopedEnv other("KILN_FAKE_HIP_ARCH", "gfx908:sramecc+:xnack-");
  IsolatedRuntime rt908(fake_options());
  try {
    rt908.runtime().backend(kDLROCM)->module_load(0, bytes.data(), bytes.size(), "hsaco", "{}");
    FAIL() << "a bundle without gfx908 was loaded on gfx908";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("gfx908:sramecc+:xnack-"),
                                HasSubstr("hipv4-amdgcn-amd-amdhsa--gfx1030")));
  }
}

TEST_F(FakeDeviceTest, CompilesHipSourceForTheDevice) {
  if (!hiprtc_available()) GTEST_SKIP() << "hiprtc cannot be loaded here";
  const std::vector<uint8_t> source = rocm_test::read_bytes(example_dir() / "matmul.hip");
  void* mod = backend_->module_load(0, source.data(), source.size(), "hip_source",
                                    rocm_test::read_text(example_dir() / "matmul.hip.json"));
  EXPECT_EQ(last_mach(), 0x3fu);
  EXPECT_NE(backend_->module_get_kernel(mod, "matmul"), nullptr);
  backend_->module_unload(mod);
  const std::string broken = "extern \"C\" __global__ void k(float* x) { x[0] = nope; }";
  try {
    backend_->module_load(0, broken.data(), broken.size(), "hip_source",
                          R"({"kernels": {"k": {"args": ["tensor"]}}})");
    FAIL() << "broken source was accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("hiprtc could not compile"), HasSubstr("HIPRTC_ERROR_COMPILATION"),
                      HasSubstr("--gpu-architecture=gfx90a:sramecc+:xnack-"),
                      HasSubstr("use of undeclared identifier 'nope'")));
  }
  const std::string binary("a\0b", 3);
  EXPECT_THROW(backend_->module_load(0, binary.data(), binary.size(), "hip_source", "{}"),
               ValueError);
}

TEST_F(FakeDeviceTest, LaunchesWithPackedArgumentsAndExtents) {
  KILN_ROCM_REQUIRE_EXAMPLE(example_dir() / "vector_add.hsaco");
  const std::vector<uint8_t> bytes = rocm_test::read_bytes(example_dir() / "vector_add.hsaco");
  void* mod = backend_->module_load(0, bytes.data(), bytes.size(), "hsaco",
                                    rocm_test::read_text(example_dir() / "vector_add.hsaco.json"));
  void* kernel = backend_->module_get_kernel(mod, "vector_add");
  constexpr int64_t n = 1000;
  Runtime& rt = rt_->runtime();
  Tensor a = Tensor::empty({n}, DataType::Float(32), kGpu, rt);
  Tensor b = Tensor::empty({n}, DataType::Float(32), kGpu, rt);
  // `out` is a view 256 bytes into a larger buffer: the kernel must get data + byte_offset.
  Tensor storage = Tensor::empty({n + 64}, DataType::Float(32), kGpu, rt);
  std::vector<float> ha(n), hb(n), zeros(n + 64, 0.0f), hout(n + 64);
  for (int64_t i = 0; i < n; ++i) {
    ha[i] = static_cast<float>(i);
    hb[i] = static_cast<float>(2 * i + 1);
  }
  a.copy_from(ha.data(), n * 4);
  b.copy_from(hb.data(), n * 4);
  storage.copy_from(zeros.data(), zeros.size() * 4);
  DLTensor out = storage.get()->dl;
  int64_t shape[1] = {n};
  out.shape = shape;
  out.byte_offset += 256;
  KilnAny args[5] = {Any(a).to_abi(), Any(b).to_abi(), Any(storage).to_abi(), Any(0.25).to_abi(),
                     Any(n).to_abi()};
  args[2].value.v_tensor = &out;
  const uint32_t grid[3] = {4, 1, 1};
  const uint32_t block[3] = {256, 1, 1};
  unsigned extents[7];
  const int before = launches(extents);
  backend_->launch(kernel, args, 5, grid, block, 128);
  backend_->synchronize(0);
  EXPECT_EQ(launches(extents), before + 1);
  EXPECT_THAT(std::vector<unsigned>(extents, extents + 7),
              ::testing::ElementsAre(4u, 1u, 1u, 256u, 1u, 1u, 128u));
  storage.copy_to(hout.data(), hout.size() * 4);
  for (int64_t i = 0; i < 64; ++i) ASSERT_EQ(hout[i], 0.0f) << "before the view, at " << i;
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hout[64 + i], ha[i] + 0.25f * hb[i]) << "at " << i;
  // Rejected before HIP sees them: nothing more is launched.
  const uint32_t too_big[3] = {2048, 1, 1};
  EXPECT_THROW(backend_->launch(kernel, args, 5, grid, too_big, 0), ValueError);
  EXPECT_THROW(backend_->launch(kernel, args, 5, grid, block, 1 << 20), ValueError);
  EXPECT_THROW(backend_->launch(kernel, args, 4, grid, block, 0), ValueError);
  KilnAny wrong = args[4];
  args[4] = Any(0.5).to_abi();
  EXPECT_THROW(backend_->launch(kernel, args, 5, grid, block, 0), TypeError);
  args[4] = wrong;
  Tensor host = Tensor::empty({n}, DataType::Float(32));
  args[0] = Any(host).to_abi();
  EXPECT_THROW(backend_->launch(kernel, args, 5, grid, block, 0), ValueError);
  EXPECT_EQ(launches(extents), before + 1);
  backend_->module_unload(mod);
}

// The whole pipeline in a child process whose global runtime loads cpu, package and rocm
// (on the fake): each rocm run configuration through local_run with tar export, compared with
// the CPU configuration's outputs.
TEST(FakeRuntimeDeathTest, RunConfigsMatchTheCpuExamples) {
  KILN_ROCM_REQUIRE_EXAMPLE(example_dir() / "matmul.hsaco");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        TempDir dir;
        const auto set = rocm_test::write_plugin_set(
            dir.path(), {"cpu", "package", "{name: rocm, options: " + fake_options() + "}"});
        ::setenv("KILN_PLUGIN_SET", set.c_str(), 1);
        ::setenv("KILN_EXAMPLES", KILN_EXAMPLE_KERNEL_DIR, 1);
        const auto runs = std::filesystem::path(KILN_SOURCE_DIR) / "configs" / "runs";
        EvaluatorConfig quick;
        quick.number = 1;
        quick.repeat = 1;
        quick.min_repeat_ms = 0;
        int failures = 0;
        for (const std::string name : {"vector_add", "relu", "matmul"}) {
          for (const std::string suffix : {".hsaco", ".hip"}) {
            if (suffix == ".hip" && !hiprtc_available()) continue;
            run::RunSpec spec = run::parse_run_config(runs / ("rocm_" + name + ".yaml"));
            spec.module = example_dir() / (name + suffix);
            const run::RunSpec cpu_spec = run::parse_run_config(runs / (name + ".yaml"));
            testing::RunHooks hooks;
            hooks.function = spec.function;
            const auto gpu =
                testing::local_run(load_module(spec.module), spec.device, run::make_inputs(spec),
                                   quick, spec.exporter, std::nullopt, hooks);
            testing::RunHooks cpu_hooks;
            cpu_hooks.function = cpu_spec.function;
            const auto cpu =
                testing::local_run(load_module(cpu_spec.module), "cpu", run::make_inputs(cpu_spec),
                                   quick, cpu_spec.exporter, std::nullopt, cpu_hooks);
            for (size_t i = 0; i < cpu_spec.inputs.size(); ++i) {
              if (cpu_spec.inputs[i].kind == run::InputSpec::Kind::kScalar) continue;
              const Tensor g = gpu.outputs[i].cast<Tensor>();
              const Tensor c = cpu.outputs[i].cast<Tensor>();
              if (g.device().type != kDLCPU) ++failures;  // local_run copies outputs back
              auto gs = g.host_span<float>();
              auto cs = c.host_span<float>();
              double worst = 0;
              for (size_t j = 0; j < cs.size(); ++j) {
                worst = std::max(worst, std::fabs(double{gs[j]} - double{cs[j]}) /
                                            (1.0 + std::fabs(double{cs[j]})));
              }
              const double tolerance = name == "matmul" ? 1e-5 : 1e-7;
              std::fprintf(stderr, "%s%s %s: %zu values, worst relative difference %g\n",
                           name.c_str(), suffix.c_str(), cpu_spec.inputs[i].name.c_str(), cs.size(),
                           worst);
              if (gs.size() != cs.size() || worst > tolerance) ++failures;
            }
          }
        }
        std::fprintf(stderr, "failures=%d\n", failures);
        std::exit(failures == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      AllOf(HasSubstr("vector_add.hsaco out: 1048576 values"),
            HasSubstr("relu.hsaco out: 1048576 values"), HasSubstr("matmul.hsaco c: 65536 values"),
            HasSubstr("failures=0")));
}

}  // namespace
}  // namespace kiln
