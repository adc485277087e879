// SPDX-License-Identifier: Apache-2.0
// Tests that need an AMD GPU: they skip with the rocm plugin's reason where there is none
// (every machine this was developed on). They launch the example kernels through the backend
// and as Kiln modules, run them with local_run (tar export) and compare with the CPU examples.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "kiln/detail/run_config.h"
#include "kiln/kiln.h"
#include "kiln/testing.h"
#include "rocm_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using rocm_test::example_dir;
using ::testing::HasSubstr;

using rocm_test::kGpu;

// The gcnArchName processor of device 0, e.g. "gfx90a".
std::string device_arch(const DeviceBackend& backend) {
  for (const auto& [key, value] : backend.attributes(0)) {
    if (key == "arch") return value.str();
  }
  return "";
}

std::vector<float> host_values(const Any& v) {
  const Tensor t = v.cast<Tensor>().to_host();
  auto span = t.host_span<float>();
  return {span.begin(), span.end()};
}

EvaluatorConfig quick() {
  EvaluatorConfig c;
  c.number = 1;
  c.repeat = 1;
  c.min_repeat_ms = 0;
  return c;
}

TEST(RocmGpuTest, ReportsDeviceAttributes) {
  KILN_ROCM_REQUIRE_DEVICE(rocm);
  const auto attrs = rocm.backend->attributes(0);
  std::map<std::string, Any> by_key(attrs.begin(), attrs.end());
  for (const char* key : {"name", "gcn_arch_name", "arch", "compute_units", "memory_bytes",
                          "l2_cache_bytes", "clock_khz", "pci_bus_id"}) {
    EXPECT_TRUE(by_key.count(key)) << key;
  }
  EXPECT_FALSE(by_key["name"].str().empty());
  EXPECT_EQ(by_key["arch"].str().rfind("gfx", 0), 0u);
  EXPECT_GT(by_key["memory_bytes"].cast<int64_t>(), 0);
  EXPECT_THROW(rocm.backend->attributes(rocm.backend->device_count()), IndexError);
}

// Launches vector_add from `bytes` (format, metadata) on n elements and checks the result.
void launch_vector_add(const DeviceBackend& backend, const std::vector<uint8_t>& bytes,
                       const std::string& format, const std::string& metadata) {
  void* mod = backend.module_load(0, bytes.data(), bytes.size(), format, metadata);
  void* kernel = backend.module_get_kernel(mod, "vector_add");
  constexpr int64_t n = 10000;
  Tensor a = Tensor::empty({n}, DataType::Float(32), kGpu);
  Tensor b = Tensor::empty({n}, DataType::Float(32), kGpu);
  Tensor out = Tensor::empty({n}, DataType::Float(32), kGpu);
  std::vector<float> ha(n), hb(n), hout(n);
  for (int64_t i = 0; i < n; ++i) {
    ha[i] = static_cast<float>(i) * 0.5f;
    hb[i] = static_cast<float>(n - i);
  }
  a.copy_from(ha.data(), n * 4);
  b.copy_from(hb.data(), n * 4);
  KilnAny args[5] = {Any(a).to_abi(), Any(b).to_abi(), Any(out).to_abi(), Any(2.0).to_abi(),
                     Any(n).to_abi()};
  const uint32_t block[3] = {256, 1, 1};
  const uint32_t grid[3] = {static_cast<uint32_t>((n + 255) / 256), 1, 1};
  backend.launch(kernel, args, 5, grid, block, 0);
  backend.synchronize(0);
  out.copy_to(hout.data(), n * 4);
  for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(hout[i], ha[i] + 2.0f * hb[i]) << "at " << i;
  EXPECT_THROW(backend.module_get_kernel(mod, "no_such_kernel"), NotFoundError);
  KilnAny bad[1] = {Any(int64_t{3}).to_abi()};
  EXPECT_THROW(backend.launch(kernel, bad, 1, grid, block, 0), Error);
  const uint32_t too_big[3] = {4096, 1, 1};
  EXPECT_THROW(backend.launch(kernel, args, 5, grid, too_big, 0), ValueError);
  backend.module_unload(mod);
}

TEST(RocmGpuTest, LaunchesVectorAddFromEveryModuleForm) {
  KILN_ROCM_REQUIRE_DEVICE(rocm);
  const std::string arch = device_arch(*rocm.backend);
  for (const std::string& file : std::vector<std::string>{
           "vector_add.hsaco", "vector_add_" + arch + ".hsaco", "vector_add.hip"}) {
    SCOPED_TRACE(file);
    const auto path = example_dir() / file;
    if (!std::filesystem::exists(path)) {
      // The bundle holds gfx90a and gfx1030 only; other GPUs run the source form.
      std::cerr << "skipping " << file << ": not built for " << arch << "\n";
      continue;
    }
    const std::string format = file.ends_with(".hip") ? "hip_source" : "hsaco";
    const std::string metadata = rocm_test::read_text(path.string() + ".json");
    if (format == "hsaco" && file == "vector_add.hsaco" && arch != "gfx90a" && arch != "gfx1030") {
      EXPECT_THROW(rocm.backend->module_load(0, rocm_test::read_bytes(path).data(),
                                             rocm_test::read_bytes(path).size(), format, metadata),
                   ValueError);
      continue;
    }
    launch_vector_add(*rocm.backend, rocm_test::read_bytes(path), format, metadata);
  }
}

TEST(RocmGpuTest, RejectsBadModules) {
  KILN_ROCM_REQUIRE_DEVICE(rocm);
  const std::string garbage = "this is not device code";
  EXPECT_THROW(rocm.backend->module_load(0, garbage.data(), garbage.size(), "hsaco", "{}"),
               ValueError);
  EXPECT_THROW(rocm.backend->module_load(0, garbage.data(), garbage.size(), "no-such-format", "{}"),
               ValueError);
  // HIP source that does not compile: the compiler's log is in the message.
  const std::string broken = "extern \"C\" __global__ void k(float* x) { x[0] = nope; }";
  try {
    rocm.backend->module_load(0, broken.data(), broken.size(), "hip_source",
                              R"({"kernels": {"k": {"args": ["tensor"], "launch": []}}})");
    FAIL() << "broken source was accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("nope"));
  }
  // Metadata naming a kernel the code object lacks.
  KILN_ROCM_REQUIRE_EXAMPLE(example_dir() / "vector_add.hip");
  const std::vector<uint8_t> source = rocm_test::read_bytes(example_dir() / "vector_add.hip");
  try {
    rocm.backend->module_load(0, source.data(), source.size(), "hip_source",
                              R"({"kernels": {"vector_sub": {"args": [], "launch": []}}})");
    FAIL() << "metadata for a missing kernel was accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("vector_sub"));
  }
}

TEST(RocmGpuTest, MemoryCopiesStreamsAndTimers) {
  KILN_ROCM_REQUIRE_DEVICE(rocm);
  const DeviceBackend& b = *rocm.backend;
  void* p = b.alloc(0, 1 << 20, 4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  std::vector<int32_t> src(1024), back(1024, 0);
  std::iota(src.begin(), src.end(), 1);
  void* stream = b.stream_create(0);
  void* timer = b.timer_create(0);
  b.timer_start(timer, stream);
  b.copy_to_device(0, src.data(), p, 0, 4096, stream);
  // Overlapping device-to-device copy (memmove semantics): shift by 16 bytes.
  b.copy_on_device(0, p, 0, p, 16, 4096, stream);
  b.copy_to_host(0, p, 16, back.data(), 4096, stream);
  b.timer_stop(timer, stream);
  b.synchronize(0, stream);
  EXPECT_EQ(back, src);
  EXPECT_GE(b.timer_elapsed_ns(timer), 0);
  b.timer_destroy(timer);
  b.stream_destroy(0, stream);
  b.free(0, p);
}

// local_run of a rocm example module (exported to tar and loaded back) against the CPU
// example with the same inputs, for each run configuration.
TEST(RocmGpuTest, RunConfigsMatchTheCpuExamples) {
  KILN_ROCM_REQUIRE_DEVICE(rocm);
  const std::filesystem::path runs = std::filesystem::path(KILN_SOURCE_DIR) / "configs" / "runs";
  ScopedEnv examples("KILN_EXAMPLES", std::string(KILN_EXAMPLE_KERNEL_DIR));
  const std::string arch = device_arch(*rocm.backend);
  for (const std::string name : {"vector_add", "relu", "matmul"}) {
    SCOPED_TRACE(name);
    run::RunSpec rocm_spec = run::parse_run_config(runs / ("rocm_" + name + ".yaml"));
    if (arch != "gfx90a" && arch != "gfx1030") {
      rocm_spec.module = example_dir() / (name + ".hip");  // compile for this GPU instead
    }
    const run::RunSpec cpu_spec = run::parse_run_config(runs / (name + ".yaml"));
    testing::RunHooks rocm_hooks;
    rocm_hooks.function = rocm_spec.function;
    const testing::RunResult gpu =
        testing::local_run(load_module(rocm_spec.module), "rocm", run::make_inputs(rocm_spec),
                           quick(), rocm_spec.exporter, std::nullopt, rocm_hooks);
    testing::RunHooks cpu_hooks;
    cpu_hooks.function = cpu_spec.function;
    const testing::RunResult cpu =
        testing::local_run(load_module(cpu_spec.module), "cpu", run::make_inputs(cpu_spec), quick(),
                           cpu_spec.exporter, std::nullopt, cpu_hooks);
    EXPECT_GT(gpu.profile.mean(), 0.0);
    for (size_t i = 0; i < cpu_spec.inputs.size(); ++i) {
      if (cpu_spec.inputs[i].kind == run::InputSpec::Kind::kScalar) continue;
      const std::vector<float> got = host_values(gpu.outputs[i]);
      const std::vector<float> want = host_values(cpu.outputs[i]);
      ASSERT_EQ(got.size(), want.size());
      // The GPU may fuse multiply-adds and sums in another order than the CPU.
      const float tolerance = name == "matmul" ? 1e-4f : 1e-6f;
      for (size_t j = 0; j < got.size(); ++j) {
        ASSERT_NEAR(got[j], want[j], tolerance * (1.0f + std::fabs(want[j])))
            << cpu_spec.inputs[i].name << "[" << j << "]";
      }
    }
  }
}

}  // namespace
}  // namespace kiln
