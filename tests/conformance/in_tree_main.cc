// SPDX-License-Identifier: Apache-2.0
// kiln_conformance_tests: the device conformance suite (tools/conformance) over Kiln's own
// backends with the in-tree example kernels, for ctest. The installed kiln-conformance tool runs
// the same suite against any plugin folder and module.
//
// Device types: KILN_CONFORMANCE_DEVICES (comma separated; default cpu,opencl,cuda,rocm, every
// device type Kiln ships a backend for). A type whose plugin is absent, disabled or has no
// device skips with the reason; one whose plugin failed to load fails. The Runtime takes the
// default options, so KILN_PLUGIN_SET and KILN_PLUGIN_PATH apply (e.g. a plugin set pointing
// the cuda plugin at the fake driver).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "pocl_env.h"
#include "suite.h"

namespace {

std::vector<std::string> device_types_under_test() {
  const char* env = std::getenv("KILN_CONFORMANCE_DEVICES");
  if (env == nullptr || *env == '\0') return {"cpu", "opencl", "cuda", "rocm"};
  std::vector<std::string> out;
  const std::string s = env;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const std::string dir = KILN_EXAMPLE_KERNEL_DIR;
  // The example kernels: out = a + alpha * b; the device ones also take n (their .json says so).
  // Only those the build made (the CUDA and HIP ones need their toolkits): without one, the
  // module tests of its type skip with the reason.
  std::vector<kiln::conformance::ModuleSpec> modules;
  for (kiln::conformance::ModuleSpec m : {
           kiln::conformance::ModuleSpec{"cpu", dir + "/libvector_add.so", "so", "vector_add"},
           kiln::conformance::ModuleSpec{"opencl", dir + "/opencl/vector_add.cl", "opencl_c",
                                         "vector_add"},
           kiln::conformance::ModuleSpec{"cuda", dir + "/cuda/vector_add.ptx", "ptx", "vector_add"},
           kiln::conformance::ModuleSpec{"rocm", dir + "/rocm/vector_add.hsaco", "hsaco",
                                         "vector_add"},
       }) {
    if (std::filesystem::exists(m.path)) modules.push_back(std::move(m));
  }
  const std::vector<std::string> types = device_types_under_test();
  // The runtime below loads PoCL when OpenCL is under test (its leak-check caveat).
  if (std::find(types.begin(), types.end(), "opencl") != types.end()) {
    kiln::test::pocl_loaded = true;
  }
  // The cpu timer test's kernel of known duration (tests/conformance/conformance_kernels.cc).
  kiln::conformance::ResolveOptions options;
  options.timing_kernels = {
      kiln::conformance::ModuleSpec{"cpu", KILN_CONFORMANCE_KERNELS, "so", "spin"}};
  kiln::Runtime runtime;
  const std::vector<kiln::conformance::Target> targets =
      kiln::conformance::resolve_targets(runtime, types, modules, options);
  kiln::conformance::register_tests(runtime, targets);
  return RUN_ALL_TESTS();
}
