// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the rocm backend tests: where the example kernels are, reading files, and
// the rocm backend of the global runtime with the reason it cannot run kernels here.
#ifndef KILN_TESTS_BACKENDS_ROCM_ROCM_TEST_UTIL_H_
#define KILN_TESTS_BACKENDS_ROCM_ROCM_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::rocm_test {

// The built example kernels of the rocm backend (examples/kernels/rocm).
inline std::filesystem::path example_dir() {
  return std::filesystem::path(KILN_EXAMPLE_KERNEL_DIR) / "rocm";
}

// The first ROCm device.
inline constexpr Device kGpu{kDLROCM, 0};

// The CPU example kernel libraries (libvector_add.so, ...).
inline std::filesystem::path cpu_example_dir() {
  return std::filesystem::path(KILN_EXAMPLE_KERNEL_DIR);
}

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::string read_text(const std::filesystem::path& path) {
  const std::vector<uint8_t> bytes = read_bytes(path);
  return std::string(bytes.begin(), bytes.end());
}

// Why the example code objects cannot be used: "" when `path` exists.
inline std::string missing_example(const std::filesystem::path& path) {
  if (std::filesystem::exists(path)) return "";
  return path.string() +
         " was not built (the example code objects need clang++-15 and the ROCm device "
         "libraries at configure time)";
}

// The rocm backend of Runtime::global() and why it has no device ("" when it has one).
struct RocmBackend {
  Ref<DeviceBackend> backend;
  std::string why_not;
};

inline RocmBackend rocm_backend() {
  RocmBackend out;
  out.backend = Runtime::global().find_backend(kDLROCM);
  if (!out.backend) {
    out.why_not = "the rocm plugin is not loaded";
    for (const PluginStatus& s : Runtime::global().plugins()) {
      if (s.name == "rocm")
        out.why_not = "plugin rocm is " + std::string(to_string(s.state)) + ": " + s.reason;
    }
    return out;
  }
  std::string why;
  if (out.backend->device_count(&why) == 0) out.why_not = "rocm has no devices: " + why;
  return out;
}

// The build tree's plugin folder.
inline std::filesystem::path plugin_dir() {
  return std::filesystem::path(KILN_BUILD_DIR) / "lib" / "kiln" / "plugins";
}

// Writes a plugin set that loads the plugins of the build tree named in `plugins` (YAML list
// entries, e.g. "cpu" or "{name: rocm, options: {...}}") into `dir`; returns its path.
inline std::filesystem::path write_plugin_set(const std::filesystem::path& dir,
                                              const std::vector<std::string>& plugins) {
  const std::filesystem::path set = dir / "plugins.yaml";
  std::ofstream out(set);
  out << "search_paths: [\"" << plugin_dir().string() << "\"]\nplugins:\n";
  for (const std::string& p : plugins) out << "  - " << p << "\n";
  return set;
}

// A runtime of its own that loads only the rocm plugin, with `options` (a YAML flow mapping).
class IsolatedRuntime {
 public:
  explicit IsolatedRuntime(const std::string& options) {
    RuntimeOptions o;
    o.plugin_set = write_plugin_set(dir_.path(), {"{name: rocm, options: " + options + "}"});
    o.read_environment = false;
    o.search_install_prefix = false;
    runtime_ = std::make_unique<Runtime>(o);
  }
  Runtime& runtime() { return *runtime_; }
  const PluginStatus& status() const {
    for (const PluginStatus& s : runtime_->plugins()) {
      if (s.name == "rocm") return s;
    }
    throw std::runtime_error("no rocm plugin status");
  }

 private:
  TempDir dir_;
  std::unique_ptr<Runtime> runtime_;
};

}  // namespace kiln::rocm_test

// Skips the test unless the global runtime has a rocm device, with the plugin's reason.
#define KILN_ROCM_REQUIRE_DEVICE(var)                                     \
  ::kiln::rocm_test::RocmBackend var = ::kiln::rocm_test::rocm_backend(); \
  if (!var.why_not.empty()) GTEST_SKIP() << var.why_not

// Skips the test unless the example file `path` was built.
#define KILN_ROCM_REQUIRE_EXAMPLE(path)                                                         \
  if (std::string why_missing = ::kiln::rocm_test::missing_example(path); !why_missing.empty()) \
  GTEST_SKIP() << why_missing

#endif  // KILN_TESTS_BACKENDS_ROCM_ROCM_TEST_UTIL_H_
