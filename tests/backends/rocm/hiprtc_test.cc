// SPDX-License-Identifier: Apache-2.0
// hiprtc compilation of the example HIP sources, as the rocm backend does for hip_source
// modules, but for a named architecture: no device is needed, only the hiprtc library (inside
// libamdhip64 in ROCm 5). Skips with the reason when hiprtc cannot be loaded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "code_object.h"
#include "hiprtc_compiler.h"
#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/kernel_metadata.hpp"
#include "rocm_test_util.h"

namespace kiln::rocm {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::filesystem::path source_dir() {
  return std::filesystem::path(KILN_SOURCE_DIR) / "examples" / "kernels" / "rocm";
}

// hiprtc, loaded once for the whole binary, or why it cannot be.
struct LoadedHiprtc {
  std::unique_ptr<Hiprtc> rtc;
  std::string why;
};
const LoadedHiprtc& loaded() {
  static const LoadedHiprtc l = [] {
    LoadedHiprtc out;
    out.rtc = load_hiprtc("", &out.why);
    return out;
  }();
  return l;
}
const Hiprtc* hiprtc() { return loaded().rtc.get(); }

#define REQUIRE_HIPRTC() \
  if (hiprtc() == nullptr) GTEST_SKIP() << loaded().why

TEST(HiprtcTest, LoadsFromTheHipRuntimeOrLibhiprtc) {
  REQUIRE_HIPRTC();
  EXPECT_FALSE(hiprtc()->library.empty());
  EXPECT_GE(hiprtc()->version_major, 5) << hiprtc()->library;
}

TEST(HiprtcTest, CompilesEveryExampleForGfx90a) {
  REQUIRE_HIPRTC();
  for (const std::string kernel : {"vector_add", "relu", "matmul"}) {
    SCOPED_TRACE(kernel);
    const std::string source = rocm_test::read_text(source_dir() / (kernel + ".hip"));
    const sdk::ModuleMetadata meta =
        sdk::parse_module_metadata(rocm_test::read_text(source_dir() / (kernel + ".hip.json")));
    EXPECT_EQ(meta.build_options, "-O3");
    const std::vector<std::string> options = hiprtc_options("gfx90a", meta.build_options, {});
    EXPECT_THAT(options, ElementsAre("--gpu-architecture=gfx90a", "-O3"));
    const CompileResult result = compile_hip_source(*hiprtc(), source, kernel + ".hip", options);
    ASSERT_TRUE(result.ok) << result.status_text << "\n" << result.log;
    ASSERT_FALSE(result.code.empty());
    // hiprtc returns a raw code object; the backend's parser reads it and finds the kernel.
    const AmdgpuElf elf = parse_amdgpu_elf(result.code);
    EXPECT_EQ(elf.target.processor, "gfx90a");
    EXPECT_THAT(elf.kernels, ElementsAre(kernel));
    const SelectedCodeObject selected = select_code_object(result.code, "gfx90a:sramecc+:xnack-");
    EXPECT_NO_THROW(check_kernels_present(selected.elf, {kernel}, selected.origin));
  }
}

TEST(HiprtcTest, CompilesForAFullTargetIdAndAnotherArchitecture) {
  REQUIRE_HIPRTC();
  const std::string source = rocm_test::read_text(source_dir() / "vector_add.hip");
  const CompileResult full = compile_hip_source(*hiprtc(), source, "vector_add.hip",
                                                hiprtc_options("gfx90a:sramecc+:xnack-", "", {}));
  ASSERT_TRUE(full.ok) << full.log;
  EXPECT_EQ(parse_amdgpu_elf(full.code).target.str(), "gfx90a:sramecc+:xnack-");
  const CompileResult rdna =
      compile_hip_source(*hiprtc(), source, "vector_add.hip", hiprtc_options("gfx1030", "-O2", {}));
  ASSERT_TRUE(rdna.ok) << rdna.log;
  EXPECT_EQ(parse_amdgpu_elf(rdna.code).target.processor, "gfx1030");
  // A gfx1030 object is refused for a gfx90a device.
  EXPECT_THROW(select_code_object(rdna.code, "gfx90a"), sdk::Error);
}

TEST(HiprtcTest, ErrorLogReachesTheCaller) {
  REQUIRE_HIPRTC();
  const std::string bad =
      "extern \"C\" __global__ void broken(float* x) { x[0] = undefined_thing; }\n";
  const CompileResult result =
      compile_hip_source(*hiprtc(), bad, "broken.hip", hiprtc_options("gfx90a", "", {}));
  EXPECT_FALSE(result.ok);
  EXPECT_EQ(result.status, 6);
  EXPECT_EQ(result.status_text, "6 HIPRTC_ERROR_COMPILATION");
  EXPECT_THAT(result.log,
              AllOf(HasSubstr("undeclared identifier 'undefined_thing'"), HasSubstr("error")));
  EXPECT_TRUE(result.code.empty());
}

TEST(HiprtcTest, UnknownOptionIsACompileError) {
  REQUIRE_HIPRTC();
  const CompileResult result =
      compile_hip_source(*hiprtc(), rocm_test::read_text(source_dir() / "relu.hip"), "relu.hip",
                         hiprtc_options("gfx90a", "--no-such-flag", {}));
  EXPECT_FALSE(result.ok);
  EXPECT_THAT(result.log, HasSubstr("--no-such-flag"));
}

TEST(HiprtcTest, MissingLibraryIsReported) {
  std::string why;
  EXPECT_EQ(load_hiprtc("/nonexistent/libhiprtc.so.42", &why), nullptr);
  EXPECT_THAT(why, AllOf(HasSubstr("cannot load hiprtc"), HasSubstr("/nonexistent/libhiprtc.so.42"),
                         HasSubstr("option hiprtc_library")));
  // A library without the entry points.
  EXPECT_EQ(load_hiprtc("libc.so.6", &why), nullptr);
  EXPECT_THAT(why, HasSubstr("libc.so.6 does not export hiprtcGetErrorString"));
}

TEST(HiprtcOptionsTest, SplitsBuildOptions) {
  EXPECT_THAT(split_options("  -O3 -DX=1\t-ffast-math "),
              ElementsAre("-O3", "-DX=1", "-ffast-math"));
  EXPECT_THAT(split_options("-DNAME='a b' \"-I/x y\""), ElementsAre("-DNAME=a b", "-I/x y"));
  EXPECT_THAT(split_options(""), ElementsAre());
  EXPECT_THAT(split_options("''"), ElementsAre(""));
  EXPECT_THROW(split_options("-DX='oops"), sdk::Error);
}

TEST(HiprtcOptionsTest, TheDeviceDecidesTheArchitecture) {
  EXPECT_THAT(hiprtc_options("gfx1030", "-O2", {"-ffast-math"}),
              ElementsAre("--gpu-architecture=gfx1030", "-O2", "-ffast-math"));
  try {
    hiprtc_options("gfx90a", "--offload-arch=gfx908", {});
    FAIL() << "an architecture in the build options was accepted";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_VALUE);
    EXPECT_THAT(e.what(), HasSubstr("--offload-arch=gfx908"));
  }
  EXPECT_THROW(hiprtc_options("gfx90a", "", {"--gpu-architecture=gfx1030"}), sdk::Error);
  EXPECT_THROW(hiprtc_options("not a target", "", {}), sdk::Error);
}

}  // namespace
}  // namespace kiln::rocm
