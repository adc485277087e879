// SPDX-License-Identifier: Apache-2.0
// `kiln-conformance --device cpu` loads no OpenCL, HIP or CUDA library (issue 38): the tool lists
// device types from the manifests (Runtime::declared_device_types) and loads only the plugins
// that serve the named types, so no driver starts that nobody asked for. Checked with
// LD_DEBUG=files, which names every shared object a process loads (the tool's workers too).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kTool = fs::path(KILN_BUILD_DIR) / "bin" / "kiln-conformance";

// What a GPU backend brings: the ICD loader and PoCL, HIP and HSA, the CUDA driver and NVRTC, and
// Kiln's own GPU plugins (whose negotiation would start them).
const std::regex kGpuLibrary(
    R"(file=(\S*/)?(libOpenCL\.so\S*|\S*pocl\S*|libamdhip64\.so\S*|libhsa-runtime64\.so\S*|)"
    R"(libcuda\.so\S*|libnvrtc\S*|libcudart\S*|libkiln_(opencl|cuda|rocm)\.so)\s)");

struct ToolRun {
  int exit_status = -1;
  std::set<std::string> gpu_libraries;  // file names LD_DEBUG reported loading
};

// Runs the tool with `args` (shell words) under LD_DEBUG=files, with no plugin selection from
// this process's environment, and collects the GPU libraries its processes loaded.
ToolRun run_tool(const std::string& args) {
  const std::string command =
      "env -u KILN_PLUGINS -u KILN_PLUGINS_DISABLE LD_DEBUG=files "
      "KILN_LOG=warn '" +
      kTool.string() + "' " + args + " 2>&1 >/dev/null";
  ToolRun run;
  FILE* out = ::popen(command.c_str(), "r");
  if (out == nullptr) return run;
  std::string text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), out)) > 0;) text.append(buffer, n);
  const int status = ::pclose(out);
  run.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::istringstream lines(text);
  std::smatch m;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("file=") == std::string::npos) continue;
    line += '\n';
    if (std::regex_search(line, m, kGpuLibrary)) run.gpu_libraries.insert(m[2].str());
  }
  return run;
}

std::string joined(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

TEST(ConformanceTool, TestingTheCpuLoadsNoGpuDriver) {
  ASSERT_TRUE(fs::exists(kTool)) << kTool << " is missing: build the kiln_conformance_tool target";
  // The control: listing every device type's tests loads the GPU plugins and their drivers.
  // Where it loads none (no GPU plugin built, no driver installed) the check below cannot fail.
  const ToolRun control = run_tool("--gtest_list_tests");
  ASSERT_EQ(control.exit_status, 0);
  if (control.gpu_libraries.empty()) {
    GTEST_SKIP() << "listing every device type's tests loads no GPU library here";
  }
  const fs::path module = fs::path(KILN_EXAMPLE_KERNEL_DIR) / "libvector_add.so";
  ASSERT_TRUE(fs::exists(module)) << module;
  const ToolRun cpu = run_tool("--device cpu --module 'cpu:" + module.string() + ":so:vector_add'");
  EXPECT_EQ(cpu.exit_status, 0) << "the cpu run did not pass";
  EXPECT_TRUE(cpu.gpu_libraries.empty())
      << "--device cpu loaded: " << joined(cpu.gpu_libraries)
      << " (the control, every device type, loaded: " << joined(control.gpu_libraries) << ")";
}

}  // namespace
}  // namespace kiln
