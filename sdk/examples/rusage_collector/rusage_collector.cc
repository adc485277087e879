// SPDX-License-Identifier: Apache-2.0
// An example third-party metric collector: what a call cost the process, from getrusage(2).
// Works on every Linux machine (no PMU needed); counts the whole process, so worker threads
// are included. Reports, per call on the CPU:
//   "rusage::user (us)", "rusage::system (us)"   Duration
//   "rusage::minor faults", "rusage::major faults", "rusage::voluntary switches",
//   "rusage::involuntary switches"               Count
#include <sys/resource.h>

#include <memory>

#include "kiln/sdk/plugin.hpp"

namespace {

struct Snapshot {
  rusage usage{};
};

double microseconds(const timeval& t) {
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec);
}

void report(KilnMetricSink sink, void* ctx, const char* name, KilnMetricKind kind, double value) {
  KilnMetric m{};
  m.struct_size = sizeof(m);
  m.name = name;
  m.kind = kind;
  m.count = static_cast<int64_t>(value);
  m.value = value;
  sink(ctx, &m);
}

KilnError* init(void*, const DLDevice*, int32_t, void** state) {
  *state = nullptr;  // nothing to set up: getrusage needs no handles
  return nullptr;
}

KilnError* start(void*, void*, DLDevice device, void** handle) {
  *handle = nullptr;
  if (kiln::sdk::device_type_code(device) != kDLCPU) return nullptr;  // host work only
  return kiln::sdk::guard("rusage start", [&] {
    auto snapshot = std::make_unique<Snapshot>();
    if (getrusage(RUSAGE_SELF, &snapshot->usage) != 0) {
      throw kiln::sdk::Error(KILN_ERROR_RUNTIME, "getrusage failed");
    }
    *handle = snapshot.release();
  });
}

KilnError* stop(void*, void*, void* handle, KilnMetricSink sink, void* sink_ctx) {
  std::unique_ptr<Snapshot> begin(static_cast<Snapshot*>(handle));
  return kiln::sdk::guard("rusage stop", [&] {
    rusage end{};
    if (getrusage(RUSAGE_SELF, &end) != 0) {
      throw kiln::sdk::Error(KILN_ERROR_RUNTIME, "getrusage failed");
    }
    const rusage& b = begin->usage;
    report(sink, sink_ctx, "rusage::user (us)", KILN_METRIC_DURATION,
           microseconds(end.ru_utime) - microseconds(b.ru_utime));
    report(sink, sink_ctx, "rusage::system (us)", KILN_METRIC_DURATION,
           microseconds(end.ru_stime) - microseconds(b.ru_stime));
    report(sink, sink_ctx, "rusage::minor faults", KILN_METRIC_COUNT,
           static_cast<double>(end.ru_minflt - b.ru_minflt));
    report(sink, sink_ctx, "rusage::major faults", KILN_METRIC_COUNT,
           static_cast<double>(end.ru_majflt - b.ru_majflt));
    report(sink, sink_ctx, "rusage::voluntary switches", KILN_METRIC_COUNT,
           static_cast<double>(end.ru_nvcsw - b.ru_nvcsw));
    report(sink, sink_ctx, "rusage::involuntary switches", KILN_METRIC_COUNT,
           static_cast<double>(end.ru_nivcsw - b.ru_nivcsw));
  });
}

void teardown(void*, void*) {}

}  // namespace

extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  static KilnMetricCollector collector = [] {
    auto c = kiln::sdk::make_table<KilnMetricCollector>();
    c.init = init;
    c.start = start;
    c.stop = stop;
    c.teardown = teardown;
    return c;
  }();
  static const KilnComponent components[] = {
      kiln::sdk::component(KILN_COMPONENT_COLLECTOR, "rusage", &collector)};
  return kiln::sdk::negotiate(in, out, {"rusage", KILN_PLUGIN_VERSION, components});
}
