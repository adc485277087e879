// SPDX-License-Identifier: Apache-2.0
// kiln::testing::local_run (SPEC.md §1.8-1.9): round trips through every exporter, the order
// of operations, argument conversion and cleanup.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "example_args.h"
#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kKernels = KILN_EXAMPLE_KERNEL_DIR;

bool has_exporter(const std::string& name) {
  const auto names = Runtime::global().exporter_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

using kiln::test::vector_add_args;

void expect_vector_add_result(const RunResult& r, int64_t n) {
  ASSERT_EQ(r.outputs.size(), 4u);
  Tensor out = r.outputs[2].cast<Tensor>();
  EXPECT_EQ(out.device(), Device::cpu());
  for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(out.host_span<float>()[i], i + 0.5f);
  EXPECT_DOUBLE_EQ(r.outputs[3].cast<double>(), 0.25) << "scalars come back unchanged";
}

class LocalRunExporters : public ::testing::TestWithParam<std::string> {};

TEST_P(LocalRunExporters, RoundTripOnTheCpu) {
  // The package plugin (tar, so) is built with the tests (tests/CMakeLists.txt), so a missing
  // exporter is a failure, not a reason to skip.
  ASSERT_TRUE(has_exporter(GetParam()))
      << "no '" << GetParam() << "' exporter is loaded: the package plugin failed to load";
  Module m = load_module(kKernels + "/libvector_add.so");
  std::vector<Any> args = vector_add_args(1000);
  std::vector<std::string> steps;
  RunHooks hooks;
  hooks.on_step = [&](const std::string& s, double) { steps.push_back(s); };
  RunResult r =
      local_run(m, "cpu", args, EvaluatorConfig{4, 3, 0, false}, GetParam(), std::nullopt, hooks);
  expect_vector_add_result(r, 1000);
  EXPECT_EQ(r.profile.results().size(), 3u) << "exactly evaluator_config.repeat entries";
  EXPECT_EQ(steps,
            (std::vector<std::string>{"export", "upload", "load", "time", "call", "download"}));
  // The caller's tensors were copied, not used in place.
  EXPECT_FLOAT_EQ(args[2].cast<Tensor>().host_span<float>()[0], -1.0f);
}

INSTANTIATE_TEST_SUITE_P(Exporters, LocalRunExporters, ::testing::Values("tar", "so"));

TEST(LocalRun, CustomExporterNeedsAnOutputFormat) {
  Module m = load_module(kKernels + "/libvector_add.so");
  ExportFunction copy_library = [](const Module& mod, const std::string& path) {
    const auto& bytes = mod.artifacts().at(0).data;
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  };
  try {
    local_run(m, "cpu", vector_add_args(8), std::nullopt, copy_library);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "output_format must be specified if `export_func` is callable");
  }
  RunResult r = local_run(m, "cpu", vector_add_args(8), EvaluatorConfig{1, 1, 0, false},
                          copy_library, std::string("so"));
  expect_vector_add_result(r, 8);
}

// An exporter that copies the library and records the folder it was asked to write into: the
// run's temporary directory.
ExportFunction copy_library_into(std::string* dir) {
  return [dir](const Module& mod, const std::string& path) {
    *dir = fs::path(path).parent_path().string();
    fs::copy_file(mod.get()->source(), path);
  };
}

TEST(LocalRun, TempDirIsRemovedAfterSuccessAndAfterFailure) {
  Module m = load_module(kKernels + "/libvector_add.so");
  std::string dir;
  local_run(m, "cpu", vector_add_args(4), EvaluatorConfig{1, 1, 0, false}, copy_library_into(&dir),
            std::string("so"));
  ASSERT_FALSE(dir.empty());
  EXPECT_FALSE(fs::exists(dir));
  // A function that fails: the directory goes all the same.
  Module calls = load_module(kKernels + "/libcalls.so");
  RunHooks hooks;
  hooks.function = "fail_value";
  dir.clear();
  EXPECT_THROW(local_run(calls, "cpu", {}, EvaluatorConfig{1, 1, 0, false}, copy_library_into(&dir),
                         std::string("so"), hooks),
               ValueError);
  ASSERT_FALSE(dir.empty());
  EXPECT_FALSE(fs::exists(dir));
}

TEST(LocalRun, TempDirHonoursTmpdir) {
  TempDir base;
  ScopedEnv tmpdir("TMPDIR", base.path().string());
  Module m = load_module(kKernels + "/libvector_add.so");
  std::string dir;
  local_run(m, "cpu", vector_add_args(4), EvaluatorConfig{1, 1, 0, false}, copy_library_into(&dir),
            std::string("so"));
  EXPECT_EQ(fs::path(dir).parent_path(), base.path());
  EXPECT_FALSE(fs::exists(dir));
}

TEST(LocalRun, RejectsBadArgumentsBeforeAnyWork) {
  TempDir base;
  ScopedEnv tmpdir("TMPDIR", base.path().string());
  Module m = load_module(kKernels + "/libvector_add.so");
  try {
    local_run(m, "cpu", {Any("text")}, std::nullopt, std::string("tar"));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "Unsupported input type: string");
  }
  EXPECT_TRUE(fs::is_empty(base.path())) << "no temporary directory was made";
  EXPECT_THROW(local_run(m, "cpu", {}, std::nullopt, std::string("zip")), ValueError);
  try {
    normalize_export_func(std::string("zip"), std::nullopt, Runtime::global());
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "Unsupported export_func: zip");
  }
  EXPECT_THROW(local_run(m, "tpu", {}, std::nullopt), ValueError);
}

TEST(LocalRun, ExportNormalisation) {
  EXPECT_EQ(normalize_export_func(std::string("tar"), std::string("zip"), Runtime::global())
                .output_format,
            "tar");
  EXPECT_EQ(
      normalize_export_func(std::string("ndk"), std::nullopt, Runtime::global()).output_format,
      "so");
  EXPECT_EQ(normalize_export_func(std::string("so"), std::nullopt, Runtime::global()).output_format,
            "so");
}

}  // namespace
}  // namespace kiln::testing
