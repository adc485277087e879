// SPDX-License-Identifier: Apache-2.0
// HIP device code as Kiln modules (kiln::load_module on .hsaco / .hip files with their JSON
// sidecars), and the rocm run configurations, as far as they go without a device: loading,
// functions, argument checks before any device is touched, export to tar and back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/detail/run_config.h"
#include "kiln/device_code.h"
#include "kiln/kiln.h"
#include "rocm_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using rocm_test::example_dir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The example module files: a bundle, a raw code object and HIP source.
const std::vector<std::string> kVectorAddFiles = {"vector_add.hsaco", "vector_add_gfx90a.hsaco",
                                                  "vector_add.hip"};

TEST(RocmModuleTest, DeviceCodeFilesLoadAsModules) {
  for (const std::string& file : kVectorAddFiles) {
    SCOPED_TRACE(file);
    KILN_ROCM_REQUIRE_EXAMPLE(example_dir() / file);
    Module m = load_module(example_dir() / file);
    EXPECT_EQ(m.kind(), kDeviceCodeKind);
    EXPECT_THAT(m.function_names(), ElementsAre("vector_add"));
    ASSERT_EQ(m.artifacts().size(), 2u);
    EXPECT_EQ(m.artifacts()[0].name, file);
    EXPECT_EQ(m.artifacts()[0].data, rocm_test::read_bytes(example_dir() / file));
    EXPECT_EQ(m.artifacts()[1].name, file + ".json");
    const auto meta = nlohmann::json::parse(
        std::string(m.artifacts()[1].data.begin(), m.artifacts()[1].data.end()));
    EXPECT_EQ(meta["target"], "rocm");
    EXPECT_EQ(meta["format"], file.ends_with(".hip") ? "hip_source" : "hsaco");
  }
}

TEST(RocmModuleTest, ExportToTarAndBackIsLossless) {
  KILN_ROCM_REQUIRE_EXAMPLE(example_dir() / "matmul.hsaco");
  TempDir dir;
  for (const std::string file : {"matmul.hsaco", "matmul.hip"}) {
    Module m = load_module(example_dir() / file);
    const auto tar = dir.path() / (file + ".tar");
    m.export_library(tar, "tar");
    Module back = load_module(tar);
    EXPECT_THAT(back.function_names(), ElementsAre("matmul"));
    ASSERT_EQ(back.artifacts().size(), m.artifacts().size());
    for (size_t i = 0; i < m.artifacts().size(); ++i) {
      EXPECT_EQ(back.artifacts()[i].name, m.artifacts()[i].name);
      EXPECT_EQ(back.artifacts()[i].data, m.artifacts()[i].data);
    }
  }
}

TEST(RocmModuleTest, CallsAreCheckedBeforeAnyDeviceIsUsed) {
  KILN_ROCM_REQUIRE_EXAMPLE(example_dir() / "vector_add.hsaco");
  Module m = load_module(example_dir() / "vector_add.hsaco");
  Function f = m["vector_add"];
  Tensor a = Tensor::empty({16}, DataType::Float(32));
  Tensor b = Tensor::empty({16}, DataType::Float(32));
  Tensor out = Tensor::empty({16}, DataType::Float(32));
  // Host tensors: the kernel is code for rocm devices.
  try {
    f(a, b, out, 0.5, int64_t{16}, int64_t{1}, int64_t{256});
    FAIL() << "a rocm kernel ran on host tensors";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("'rocm' devices"), HasSubstr("cpu")));
  }
  // The kernel's 5 arguments and 2 launch extents.
  try {
    f(a, b, out, 0.5);
    FAIL() << "a call without launch extents was accepted";
  } catch (const TypeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("takes 5 arguments and then 2 launch extents"));
  }
  EXPECT_THROW(f(a, b, out, 0.5, int64_t{16}, int64_t{0}, int64_t{256}), Error);
}

// Each rocm run configuration uses the CPU configuration's inputs first, then the kernel's
// extra scalars, so that their outputs can be compared.
TEST(RocmModuleTest, RunConfigsExtendTheCpuExamples) {
  KILN_ROCM_REQUIRE_EXAMPLE(example_dir() / "vector_add.hsaco");
  const std::filesystem::path runs = std::filesystem::path(KILN_SOURCE_DIR) / "configs" / "runs";
  ScopedEnv examples("KILN_EXAMPLES", std::string(KILN_EXAMPLE_KERNEL_DIR));
  struct Case {
    std::string name;
    size_t extra;  // scalars after the CPU example's arguments
  };
  for (const Case& c : {Case{"vector_add", 3}, Case{"relu", 3}, Case{"matmul", 7}}) {
    SCOPED_TRACE(c.name);
    const run::RunSpec rocm = run::parse_run_config(runs / ("rocm_" + c.name + ".yaml"));
    const run::RunSpec cpu = run::parse_run_config(runs / (c.name + ".yaml"));
    EXPECT_EQ(rocm.device, "rocm");
    EXPECT_EQ(rocm.function, c.name);
    EXPECT_EQ(rocm.module, example_dir() / (c.name + ".hsaco"));
    ASSERT_EQ(rocm.inputs.size(), cpu.inputs.size() + c.extra);
    for (size_t i = 0; i < cpu.inputs.size(); ++i) {
      const run::InputSpec& r = rocm.inputs[i];
      const run::InputSpec& h = cpu.inputs[i];
      EXPECT_EQ(r.name, h.name);
      EXPECT_EQ(r.kind, h.kind);
      EXPECT_EQ(r.shape, h.shape);
      EXPECT_EQ(r.dtype, h.dtype);
      EXPECT_EQ(r.init, h.init);
      EXPECT_EQ(r.seed, h.seed);
      EXPECT_EQ(r.low, h.low);
      EXPECT_EQ(r.high, h.high);
    }
    for (size_t i = cpu.inputs.size(); i < rocm.inputs.size(); ++i) {
      EXPECT_EQ(rocm.inputs[i].kind, run::InputSpec::Kind::kScalar) << rocm.inputs[i].name;
    }
    // The module's kernel takes exactly these arguments (kernel arguments + launch extents).
    Module m = load_module(rocm.module);
    EXPECT_TRUE(m.has_function(rocm.function));
  }
}

}  // namespace
}  // namespace kiln
