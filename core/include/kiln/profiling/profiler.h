// SPDX-License-Identifier: Apache-2.0
// Profiler (SPEC.md §3.2) and profile_function (§3.9).
#ifndef KILN_PROFILING_PROFILER_H_
#define KILN_PROFILING_PROFILER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/any.h"
#include "kiln/device.h"
#include "kiln/device_context.h"
#include "kiln/profiling/collector.h"
#include "kiln/profiling/metrics.h"
#include "kiln/profiling/report.h"

namespace kiln {
class Module;
}

namespace kiln::profiling {

// Times calls (and lets collectors count them) into a Report. Calls nest: stop_call() closes
// the most recent open call. Not thread-safe.
class Profiler {
 public:
  // Calls init(devices) on every collector and records "Number of threads" (the cpu plugin's,
  // which TVM-compiled and SDK kernels run on) and "Threads from" (where that count came from)
  // in the configuration. Devices are timed through the backends of `context`, which the
  // profiler keeps alive. Throws NotFoundError when no backend serves one of `devices`.
  Profiler(std::vector<Device> devices, std::vector<std::shared_ptr<MetricCollector>> collectors,
           MetricMap configuration, const DeviceContext& context);
  // API-edge default: the same with Runtime::global().
  Profiler(std::vector<Device> devices, std::vector<std::shared_ptr<MetricCollector>> collectors,
           MetricMap configuration = {});
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Opens one "Total" call per device (in order). RuntimeError if already running.
  void start();
  // Opens a call `name` on `device`: starts every collector that handles the device, then the
  // device timer. `extra` metrics go into the call's row. A call opened while another is open
  // (other than the device totals) is nested in it: its row gets "Nested in" = that call's name.
  void start_call(std::string name, Device device, MetricMap extra = {});
  // Closes the most recent open call (RuntimeError when none is open), merging `extra` and
  // the collectors' metrics into its row.
  void stop_call(MetricMap extra = {});
  // Closes the "Total" calls.
  void stop();
  bool running() const;

  // Rows with "Duration (us)", "Count", "Name", "Device", "Start (us)" (offset from start(),
  // beyond the reference: the Chrome trace's timeline), "Nested in" for a nested call, the extra
  // and collector metrics on top, and "Percent" against the longest device total. The device
  // totals go to device_metrics. RuntimeError while running.
  Report report() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Returns a function that, per call with `args`: runs `func_name` (default: the module's entry)
// `warmup_iters` times, calls init([device]) on every collector, starts them, calls the
// function once, stops them and returns their metrics merged (later collectors win on equal
// names). No timing is added. Throws NotFoundError when the function does not exist.
std::function<MetricMap(const std::vector<Any>& args)> profile_function(
    const Module& module, Device device, std::vector<std::shared_ptr<MetricCollector>> collectors,
    const std::string& func_name = "", int32_t warmup_iters = 10);

}  // namespace kiln::profiling

#endif  // KILN_PROFILING_PROFILER_H_
