// A host app built against the installed Kiln: loads the out-of-tree plugin and kernel module.
#include <cstdio>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/profiling/profiler.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: consumer_app PLUGIN_DIR KERNEL_MODULE COLLECTOR_PLUGIN_DIR\n");
    return 2;
  }
  try {
    kiln::RuntimeOptions options;
    options.search_paths = {argv[1], argv[3]};
    options.read_environment = false;
    options.plugin_set = std::filesystem::path();  // no plugin set: load all found
    kiln::Runtime runtime(options);
    for (const auto& s : runtime.plugins()) {
      std::printf("plugin %-8s %-8s %s %s\n", s.name.c_str(), s.version.c_str(),
                  kiln::to_string(s.state), s.reason.c_str());
    }
    auto backend = runtime.backend(120);
    std::printf("oot devices: %d\n", backend->device_count());
    kiln::Tensor t =
        kiln::Tensor::empty({8}, kiln::DataType::Float(32), kiln::Device{120, 0}, runtime);
    std::vector<float> v(8, 2.5f), back(8);
    t.copy_from(v.data(), 32);
    t.copy_to(back.data(), 32);
    if (back != v) throw kiln::RuntimeError("oot round trip mismatch");

    kiln::Module m = runtime.load_module(argv[2]);
    const int64_t r = m.entry()(14).cast<int64_t>();
    std::printf("triple(14) = %lld\n", static_cast<long long>(r));
    if (r != 42) return 1;
    kiln::Tensor host =
        kiln::Tensor::empty({4}, kiln::DataType::Float(32), kiln::Device::cpu(), runtime);
    m["fill"](host, 1.25);
    for (float x : host.host_span<float>()) {
      if (x != 1.25f) return 1;
    }
    // The out-of-tree collector, through its manifest, used like any collector.
    auto rusage = kiln::profiling::plugin_collector("rusage", runtime);
    auto prof = kiln::profiling::profile_function(m, kiln::Device::cpu(), {rusage}, "triple", 2);
    kiln::profiling::MetricMap metrics = prof({kiln::Any(5)});
    for (const auto& [name, value] : metrics) std::printf("collector metric %s\n", name.c_str());
    if (!metrics.count("rusage::user (us)") || !metrics.count("rusage::minor faults")) return 1;
    std::printf("consumer OK\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer failed: %s\n", e.what());
    return 1;
  }
}
