// SPDX-License-Identifier: Apache-2.0
// MetricCollector: what a profiler asks of a metric source (SPEC.md §3.6). Implemented in C++
// in-process, or by a collector plugin through the ABI (plugin_collector()); both are used the
// same way.
#ifndef KILN_PROFILING_COLLECTOR_H_
#define KILN_PROFILING_COLLECTOR_H_

#include <memory>
#include <string>
#include <vector>

#include "kiln/device.h"
#include "kiln/profiling/metrics.h"

namespace kiln {
class Runtime;
}

namespace kiln::profiling {

class MetricCollector {
 public:
  virtual ~MetricCollector() = default;
  // A name for messages and reports.
  virtual std::string name() const = 0;
  // Called once per profiler (or per profile_function call) before measuring; expensive
  // setup goes here.
  virtual void init(const std::vector<Device>& devices) = 0;
  // Starts counting for one call on `device`. Null: this collector does not handle `device`.
  virtual std::shared_ptr<void> start(Device device) = 0;
  // Stops what start() began and returns the metrics of the call.
  virtual MetricMap stop(std::shared_ptr<void> state) = 0;
};

// The collector component `name` of a plugin `runtime` loaded (NotFoundError listing the
// available ones). The plugin stays loaded while the collector lives.
std::shared_ptr<MetricCollector> plugin_collector(const std::string& name, const Runtime& runtime);
// API-edge default: the same with Runtime::global().
std::shared_ptr<MetricCollector> plugin_collector(const std::string& name);
// The collector `name` from its plugin loaded afresh with `options_json` (the plugin's options,
// a JSON object): a private runtime over `runtime`'s search paths whose plugin set lists only
// that plugin. The plugin (and so the collector) stays loaded while the collector lives.
// NotFoundError when no plugin of `runtime` provides `name`; ValueError "collector '<name>' with
// options <json>: plugin '<plugin>' <state>: <reason>" when the plugin refuses the options.
std::shared_ptr<MetricCollector> plugin_collector(const std::string& name,
                                                  const std::string& options_json,
                                                  const Runtime& runtime);

}  // namespace kiln::profiling

#endif  // KILN_PROFILING_COLLECTOR_H_
