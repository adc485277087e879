// SPDX-License-Identifier: Apache-2.0
// TVM-compiled libraries with device code: the OpenCL fixtures run on PoCL through Kiln's
// opencl plugin (TVM's PyPI build compiles them but cannot run them) and must give the numbers
// of numpy / TVM's llvm build; the CUDA fixtures load host side and show their kernels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "pocl_env.h"
#include "tvm/library_module.h"
#include "tvm_fixtures.h"

namespace kiln::tvm_test {
namespace {

using ::testing::HasSubstr;

class TvmOpenclLibrary : public TvmFixtureTest {
 protected:
  void SetUp() override {
    TvmFixtureTest::SetUp();
    if (IsSkipped()) return;
    Ref<DeviceBackend> b = Runtime::global().find_backend(kDLOpenCL);
    std::string why = "the opencl plugin is not loaded";
    if (!b || b->device_count(&why) == 0) GTEST_SKIP() << "no OpenCL device: " << why;
    kiln::test::pocl_loaded = true;
  }
  void run_case(const std::string& name, double rtol) {
    const Device cl{kDLOpenCL, 0};
    Module m = load_module(library(name));
    std::vector<Tensor> args = inputs(name, cl);
    std::vector<Any> packed(args.begin(), args.end());
    m.get_function(tvm_case(name).at("function").get<std::string>()).call_packed(packed);
    expect_close(args.back(), expected(name), rtol, 1e-4, name);
  }
};

TEST_F(TvmOpenclLibrary, VectorAddOnPocl) { run_case("vadd_opencl", 1e-6); }
TEST_F(TvmOpenclLibrary, MatmulOnPocl) { run_case("matmul_opencl", 1e-4); }

TEST_F(TvmOpenclLibrary, TheLibraryImportsItsDeviceCode) {
  Module m = load_module(library("vadd_opencl"));
  EXPECT_EQ(m.kind(), tvm_interop::kTvmLibraryKind);
  ASSERT_EQ(m.imports().size(), 1u);
  EXPECT_EQ(m.imports()[0].kind(), kDeviceCodeKind);
  EXPECT_THAT(m.imports()[0].function_names(), ::testing::ElementsAre("vadd_kernel"));
}

TEST_F(TvmOpenclLibrary, HostTensorsAreRefusedByTvmsDeviceCheck) {
  Module m = load_module(library("vadd_opencl"));
  std::vector<Tensor> args = inputs("vadd_opencl");  // on the CPU
  try {
    m.get_function("vadd")(args[0], args[1], args[2]);
    FAIL() << "an OpenCL kernel ran on host memory";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("vadd_opencl.so: vadd: "));
    EXPECT_THAT(e.what(), HasSubstr("device_type"));
  }
}

class TvmCudaLibrary : public TvmFixtureTest {};

TEST_F(TvmCudaLibrary, LoadsHostSideAndListsItsKernels) {
  if (!manifest_.at("cases").contains("vadd_cuda")) {
    GTEST_SKIP() << "this TVM build did not compile the CUDA fixture";
  }
  // Loading needs no GPU: the device code is loaded on a device only when a kernel first runs.
  Module m = load_module(library("matmul_cuda"));
  ASSERT_EQ(m.imports().size(), 1u);
  EXPECT_THAT(m.imports()[0].function_names(), ::testing::ElementsAre("matmul_kernel"));
  const auto& artifacts = m.imports()[0].artifacts();
  ASSERT_EQ(artifacts.size(), 2u);
  const std::string meta(artifacts[1].data.begin(), artifacts[1].data.end());
  EXPECT_THAT(meta, HasSubstr("\"cuda_source\""));
  EXPECT_THAT(meta, HasSubstr("\"blockIdx.x\""));
  Ref<DeviceBackend> b = Runtime::global().find_backend(kDLCUDA);
  std::string why = "the cuda plugin is not loaded";
  if (!b || b->device_count(&why) == 0) {
    GTEST_SKIP() << "loaded host side; running needs a CUDA device: " << why;
  }
  std::vector<Tensor> args = inputs("matmul_cuda", Device{kDLCUDA, 0});
  m.get_function("matmul")(args[0], args[1], args[2]);
  expect_close(args[2], expected("matmul_cuda"), 1e-4, 1e-4, "matmul_cuda");
}

}  // namespace
}  // namespace kiln::tvm_test
