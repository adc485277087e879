// SPDX-License-Identifier: Apache-2.0
// A host application built against the installed Kiln (find_package(Kiln), Kiln::kiln): a
// Runtime of its own that loads the installed plugins plus those in the folders given, a CPU
// kernel module called through the packed convention, memory on a vendor device when the
// example device plugin is among them, and a profile with the example collector when it is.
//
//   host_app KERNEL_MODULE [PLUGIN_DIR...]
//
// Exit status: 0 when every step worked, 1 when a result is wrong or a step failed, 2 for bad
// usage.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/profiling/profiler.h"

namespace {

// Copies 8 floats to `device` and back through its backend; false when they differ.
bool round_trip(const kiln::Runtime& runtime, kiln::Device device) {
  kiln::Tensor t = kiln::Tensor::empty({8}, kiln::DataType::Float(32), device, runtime);
  std::vector<float> v(8, 2.5f), back(8);
  t.copy_from(v.data(), v.size() * sizeof(float));
  t.copy_to(back.data(), back.size() * sizeof(float));
  return back == v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: host_app KERNEL_MODULE [PLUGIN_DIR...]\n");
    return 2;
  }
  try {
    // A Runtime of our own: the plugin folders given join the installed plugins. No plugin set
    // and no environment, so the run does not depend on the caller's KILN_* variables.
    kiln::RuntimeOptions options;
    for (int i = 2; i < argc; ++i) options.search_paths.emplace_back(argv[i]);
    options.read_environment = false;
    options.plugin_set = std::filesystem::path();  // an empty path: no plugin set, load all
    kiln::Runtime runtime(options);
    for (const kiln::PluginStatus& s : runtime.plugins()) {
      std::printf("plugin %-10s %-8s %s %s\n", s.name.c_str(), s.version.c_str(),
                  kiln::to_string(s.state), s.reason.c_str());
    }

    // Every device of every backend, or why a backend has none.
    for (const kiln::BackendInfo& b : runtime.backends()) {
      if (b.devices.empty()) {
        std::printf("%s: no devices: %s\n", b.type_name.c_str(), b.why_none.c_str());
      }
      for (const kiln::DeviceInfo& d : b.devices)
        std::printf("device %s\n", d.device.str().c_str());
    }

    // The vendor device of sdk/examples/device_plugin, when its folder was given.
    if (auto code = runtime.device_types().find("exampledev")) {
      if (!round_trip(runtime, kiln::Device{*code, 0})) {
        std::fprintf(stderr, "exampledev: the round trip changed the data\n");
        return 1;
      }
      std::printf("exampledev:0 round trip OK\n");
    }

    // The kernel module: the scalar entry function, then a tensor function by name.
    kiln::Module m = runtime.load_module(argv[1]);
    const int64_t r = m.entry()(14).cast<int64_t>();
    std::printf("triple(14) = %lld\n", static_cast<long long>(r));
    if (r != 42) {
      std::fprintf(stderr, "triple(14): expected 42\n");
      return 1;
    }
    kiln::Tensor host =
        kiln::Tensor::empty({4}, kiln::DataType::Float(32), kiln::Device::cpu(), runtime);
    m["fill"](host, 1.25);
    for (float x : host.host_span<float>()) {
      if (x != 1.25f) {
        std::fprintf(stderr, "fill(t, 1.25): an element is %g\n", static_cast<double>(x));
        return 1;
      }
    }

    // The collector of sdk/examples/rusage_collector, through its manifest, used like any other.
    const std::vector<std::string> collectors = runtime.collector_names();
    if (std::find(collectors.begin(), collectors.end(), "rusage") != collectors.end()) {
      auto rusage = kiln::profiling::plugin_collector("rusage", runtime);
      auto prof = kiln::profiling::profile_function(m, kiln::Device::cpu(), {rusage}, "triple", 2);
      kiln::profiling::MetricMap metrics = prof({kiln::Any(5)});
      for (const auto& [name, value] : metrics) std::printf("collector metric %s\n", name.c_str());
      for (const char* expected : {"rusage::user (us)", "rusage::minor faults"}) {
        if (!metrics.count(expected)) {
          std::fprintf(stderr, "the rusage collector reported no metric '%s'\n", expected);
          return 1;
        }
      }
    }
    std::printf("host app OK\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "host app failed: %s\n", e.what());
    return 1;
  }
}
