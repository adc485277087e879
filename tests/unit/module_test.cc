// SPDX-License-Identifier: Apache-2.0
// Modules loaded from SDK-built kernel libraries through the CPU plugin's "so" loader.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

std::string module_kernel(const std::string& name) {
  return std::string(KILN_EXAMPLE_KERNEL_DIR) + "/lib" + name + ".so";
}

Tensor filled_tensor(std::vector<int64_t> shape, float start, float step) {
  Tensor t = Tensor::empty(std::move(shape), DataType::Float(32));
  float v = start;
  for (float& x : t.host_span<float>()) {
    x = v;
    v += step;
  }
  return t;
}

TEST(Module, VectorAddThroughTheCpuPlugin) {
  Module m = load_module(module_kernel("vector_add"));
  EXPECT_EQ(m.kind(), "kernel_library");
  EXPECT_EQ(m.entry_name(), "vector_add");
  EXPECT_THAT(m.function_names(), ::testing::Contains("vector_add"));
  Tensor a = filled_tensor({1000}, 0, 1), b = filled_tensor({1000}, 1000, -1);
  Tensor out = Tensor::empty({1000}, DataType::Float(32));
  m.entry()(a, b, out, 0.5);
  auto o = out.host_span<float>();
  for (int i = 0; i < 1000; ++i) ASSERT_FLOAT_EQ(o[i], i + 0.5f * (1000 - i));
}

TEST(Module, MatmulMatchesANaiveReference) {
  Module m = load_module(module_kernel("matmul"));
  const int64_t M = 67, K = 129, N = 35;  // not multiples of any tile size
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  Tensor a = Tensor::empty({M, K}, DataType::Float(32));
  Tensor b = Tensor::empty({K, N}, DataType::Float(32));
  for (float& x : a.host_span<float>()) x = dist(rng);
  for (float& x : b.host_span<float>()) x = dist(rng);
  Tensor c = Tensor::empty({M, N}, DataType::Float(32));
  m["matmul"](a, b, c);
  auto A = a.host_span<float>(), B = b.host_span<float>(), C = c.host_span<float>();
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0;
      for (int64_t k = 0; k < K; ++k) ref += double(A[i * K + k]) * B[k * N + j];
      ASSERT_NEAR(C[i * N + j], ref, 1e-4) << i << "," << j;
    }
  }
}

TEST(Module, ReluClampsNegatives) {
  Module m = load_module(module_kernel("relu"));
  Tensor in = filled_tensor({2, 4}, -4, 1), out = Tensor::empty({2, 4}, DataType::Float(32));
  m["relu"](in, out);
  EXPECT_THAT(out.host_span<float>(), ::testing::ElementsAre(0, 0, 0, 0, 0, 1, 2, 3));
}

TEST(Module, MissingFunctionListsTheAvailableOnes) {
  Module m = load_module(module_kernel("calls"));
  try {
    m.get_function("nope");
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("has no function 'nope'"));
    EXPECT_THAT(e.what(), HasSubstr("add3"));
    EXPECT_THAT(e.what(), HasSubstr("noop"));
  }
  EXPECT_THROW(m.entry(), NotFoundError) << "libcalls has no entry function";
}

TEST(Module, KernelErrorsKeepTheirType) {
  Module m = load_module(module_kernel("calls"));
  EXPECT_EQ(m["add3"](1, 2, 3).cast<int64_t>(), 6);
  try {
    m["fail_value"]();
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("deliberate failure"));
  }
  EXPECT_THROW(m["add3"](1, 2), TypeError);
  EXPECT_THROW(m["add3"](1, 2, "three"), TypeError);
  Module va = load_module(module_kernel("vector_add"));
  Tensor ints = Tensor::empty({4}, DataType::Int(32));
  EXPECT_THROW(va.entry()(ints, ints, ints, 1.0), ValueError);
}

TEST(Module, FunctionsKeepTheirModuleLoaded) {
  Function add3 = load_module(module_kernel("calls"))["add3"];
  // The Module object is gone; the function still owns the library.
  EXPECT_EQ(add3(10, 20, 30).cast<int64_t>(), 60);
}

TEST(Module, LoadErrorsSayWhatAndWhere) {
  TempDir dir;
  EXPECT_THROW(load_module(dir.path() / "missing.so"), NotFoundError);
  std::ofstream(dir.path() / "noext") << "x";
  EXPECT_THROW(load_module(dir.path() / "noext"), ValueError);
  std::ofstream(dir.path() / "m.unknownfmt") << "x";
  try {
    load_module(dir.path() / "m.unknownfmt");
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no loader for '.unknownfmt' files"));
    EXPECT_THAT(e.what(), HasSubstr("so"));
  }
  std::ofstream(dir.path() / "bogus.so") << "not an ELF";
  try {
    load_module(dir.path() / "bogus.so");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("bogus.so"));
  }
  // A real shared library that is not a kernel library.
  try {
    load_module(std::string(KILN_BUILD_DIR) + "/lib/kiln/plugins/libkiln_cpu.so");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("kiln_kernel_library"));
  }
}

TEST(Module, ArtifactsCarryTheLibraryBytes) {
  Module m = load_module(module_kernel("relu"));
  ASSERT_EQ(m.artifacts().size(), 1u);
  EXPECT_EQ(m.artifacts()[0].role, "host_library");
  EXPECT_EQ(m.artifacts()[0].name, "librelu.so");
  EXPECT_GT(m.artifacts()[0].data.size(), 1000u);
}

TEST(Runtime, DefaultPluginSetLoadsTheCpuPlugin) {
  Runtime& rt = Runtime::global();
  bool cpu_loaded = false;
  for (const auto& s : rt.plugins()) {
    if (s.name == "cpu") cpu_loaded = s.state == PluginStatus::State::kLoaded;
  }
  EXPECT_TRUE(cpu_loaded);
  ASSERT_TRUE(rt.plugin_set_path());
  auto backends = rt.backends();
  ASSERT_FALSE(backends.empty());
  EXPECT_EQ(backends[0].type_name, "cpu");
  ASSERT_EQ(backends[0].devices.size(), 1u);
  bool has_cores = false;
  for (const auto& [k, v] : backends[0].devices[0].attributes) has_cores |= (k == "cores");
  EXPECT_TRUE(has_cores);
}

}  // namespace
}  // namespace kiln
