// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the cuda backend tests: why the machine has no usable CUDA device (the
// reason GPU tests skip with), and private runtimes that load the cuda plugin with options.
#ifndef KILN_TESTS_BACKENDS_CUDA_CUDA_TEST_UTIL_H_
#define KILN_TESTS_BACKENDS_CUDA_CUDA_TEST_UTIL_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::cuda_test {

// The build tree's plugin folder.
inline std::string plugin_dir() { return std::string(KILN_BUILD_DIR) + "/lib/kiln/plugins"; }
// A whole file's bytes / text ("" when it cannot be read: the test's own check says why).
inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
inline std::string read_text(const std::string& path) {
  const std::vector<uint8_t> bytes = read_bytes(path);
  return {bytes.begin(), bytes.end()};
}
// The built CUDA example kernels.
inline std::string examples() { return std::string(KILN_EXAMPLE_KERNEL_DIR) + "/cuda"; }

#ifndef KILN_CUDA_EXAMPLES_BUILT
#error "KILN_CUDA_EXAMPLES_BUILT (0 or 1) must be defined by plugins/cuda/CMakeLists.txt"
#endif
// Empty when the build made the example kernels in examples() (nvcc's PTX, cubins and fat
// binaries, with their sidecars); otherwise why not, for GTEST_SKIP. The plugin builds without
// the CUDA toolkit, its example kernels do not.
inline std::string examples_missing() {
  return KILN_CUDA_EXAMPLES_BUILT
             ? ""
             : "the CUDA example kernels were not built (nvcc was not found at configure time; "
               "examples/kernels/cuda/CMakeLists.txt)";
}
// The example kernels' sources and metadata in the source tree (<kernel>.cu, <kernel>.json,
// without "format" and "target"), which need no toolkit.
inline std::string example_sources() {
  return std::string(KILN_SOURCE_DIR) + "/examples/kernels/cuda";
}

// Empty when the global runtime has a cuda device; otherwise why not (the plugin's status or
// its why_none), for GTEST_SKIP.
inline std::string no_device_reason() {
  Ref<DeviceBackend> backend = Runtime::global().find_backend(kDLCUDA);
  if (!backend) {
    for (const PluginStatus& s : Runtime::global().plugins()) {
      if (s.name == "cuda")
        return "cuda plugin " + std::string(to_string(s.state)) + ": " + s.reason;
    }
    return "the cuda plugin is not among the loaded plugins";
  }
  std::string why;
  if (backend->device_count(&why) > 0) return "";
  return "no CUDA device: " + why;
}

// A runtime that loads only the build tree's cuda plugin with `options_yaml` (a YAML flow
// mapping such as "{driver_library: /x/libcuda.so}"), ignoring the environment.
class PrivateRuntime {
 public:
  explicit PrivateRuntime(const std::string& options_yaml) {
    const std::filesystem::path set = dir_.path() / "plugins.yaml";
    std::ofstream(set) << "search_paths: [" << plugin_dir() << "]\n"
                       << "plugins:\n  - name: cuda\n    options: " << options_yaml << "\n";
    RuntimeOptions options;
    options.plugin_set = set;
    options.read_environment = false;
    options.search_install_prefix = false;
    runtime_ = std::make_unique<Runtime>(options);
  }
  Runtime& runtime() { return *runtime_; }
  const PluginStatus* status() const {
    for (const PluginStatus& s : runtime_->plugins()) {
      if (s.name == "cuda") return &s;
    }
    return nullptr;
  }

 private:
  TempDir dir_;
  std::unique_ptr<Runtime> runtime_;
};

// The CUDA toolkit's driver stub (libcuda.so whose every call returns
// CUDA_ERROR_STUB_LIBRARY), or "" when none is installed.
inline std::string driver_stub() {
  std::vector<std::string> roots;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') roots.emplace_back(v);
  }
  roots.emplace_back("/usr/local/cuda");
  for (const std::string& root : roots) {
    for (const char* sub : {"/lib/stubs/libcuda.so", "/lib64/stubs/libcuda.so",
                            "/targets/x86_64-linux/lib/stubs/libcuda.so"}) {
      std::error_code ec;
      if (std::filesystem::is_regular_file(root + sub, ec)) return root + sub;
    }
  }
  return "";
}

}  // namespace kiln::cuda_test

#endif  // KILN_TESTS_BACKENDS_CUDA_CUDA_TEST_UTIL_H_
