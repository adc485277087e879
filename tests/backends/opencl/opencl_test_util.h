// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the opencl backend tests: the backend, example files, log capture, child
// processes and a private plugin set.
#ifndef KILN_TESTS_BACKENDS_OPENCL_OPENCL_TEST_UTIL_H_
#define KILN_TESTS_BACKENDS_OPENCL_OPENCL_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/logging.h"

namespace kiln::opencl_test {

namespace fs = std::filesystem;

// Where the build copies examples/kernels/opencl.
inline fs::path examples_dir() { return fs::path(KILN_EXAMPLE_KERNEL_DIR) / "opencl"; }

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// An example kernel file and its sidecar metadata.
struct Example {
  std::string source;
  std::string metadata;
};
inline Example example(const std::string& file) {
  return {read_text(examples_dir() / file), read_text(examples_dir() / (file + ".json"))};
}

// The opencl backend of `runtime`, or null with the reason in `why`.
inline Ref<DeviceBackend> opencl_backend(Runtime& runtime, std::string* why) {
  Ref<DeviceBackend> b = runtime.find_backend(kDLOpenCL);
  if (!b) {
    *why = "the opencl plugin is not loaded";
    for (const auto& s : runtime.plugins()) {
      if (s.name == "opencl")
        *why = "plugin opencl is " + std::string(to_string(s.state)) + ": " + s.reason;
    }
    return b;
  }
  if (b->device_count(why) == 0) return Ref<DeviceBackend>();
  return b;
}

// A fixture with the global runtime's opencl backend and device 0; skips with the plugin's
// reason where there is none.
class OpenclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    backend_ = opencl_backend(Runtime::global(), &why);
    if (!backend_) GTEST_SKIP() << "no OpenCL device: " << why;
    device_ = Device{kDLOpenCL, 0};
  }
  // A float32 tensor on the device holding `values`.
  Tensor upload(const std::vector<float>& values) const {
    Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DataType::Float(32), device_);
    t.copy_from(values.data(), values.size() * sizeof(float));
    return t;
  }
  static std::vector<float> download(const Tensor& t) {
    std::vector<float> out(static_cast<size_t>(t.numel()));
    t.copy_to(out.data(), out.size() * sizeof(float));
    return out;
  }
  Ref<DeviceBackend> backend_;
  Device device_;
};

// Captures what Kiln logs (at `level` and above) on stderr while alive.
class LogCapture {
 public:
  explicit LogCapture(LogLevel level = LogLevel::kDebug) : old_(log_level()) {
    set_log_level(level);
    ::testing::internal::CaptureStderr();
  }
  ~LogCapture() {
    if (!done_) finish();
  }
  std::string finish() {
    done_ = true;
    std::string text = ::testing::internal::GetCapturedStderr();
    set_log_level(old_);
    return text;
  }

 private:
  LogLevel old_;
  bool done_ = false;
};

// Runs `command` through the shell; returns its exit status and fills `output` with its stdout
// and stderr.
inline int run_command(const std::string& command, std::string* output) {
  output->clear();
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output->append(buffer, n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Quotes `s` for the shell.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Writes a plugin set in `dir` that loads only the build tree's opencl plugin with
// `options_yaml` (a YAML flow mapping) and returns its path.
inline fs::path opencl_plugin_set(const fs::path& dir, const std::string& options_yaml) {
  const fs::path file = dir / "plugins.yaml";
  write_text(file, "search_paths: [" + (fs::path(KILN_BUILD_DIR) / "lib/kiln/plugins").string() +
                       "]\nplugins:\n  - name: opencl\n    options: " + options_yaml + "\n");
  return file;
}

inline RuntimeOptions options_for(const fs::path& plugin_set) {
  RuntimeOptions o;
  o.plugin_set = plugin_set;
  o.read_environment = false;
  o.search_install_prefix = false;
  return o;
}

}  // namespace kiln::opencl_test

#endif  // KILN_TESTS_BACKENDS_OPENCL_OPENCL_TEST_UTIL_H_
