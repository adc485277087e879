// SPDX-License-Identifier: Apache-2.0
#include "perf_collector.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "counter_delta.h"
#include "counter_set.h"
#include "kiln/sdk/plugin.hpp"
#include "plugin_state.h"

namespace kiln::perf {
namespace {

// What start() hands out: the counter values at the start, in the state's counter order.
struct StartHandle {
  std::vector<CounterReading> readings;
};

// The warning SPEC.md §3.7 gives for a counter that went backwards.
constexpr const char* kOverflowWarning =
    "Detected overflow when reading performance counter, setting value to -1.";

// The `init` slot: a new CounterSet in `*state` (owned by the plugin until teardown), empty
// unless a cpu device is among `devices` (borrowed). Warns once per plugin about each event
// that cannot be counted. See make_perf_collector().
KilnError* init(void* self, const DLDevice* devices, int32_t num_devices, void** state) {
  return sdk::guard("perf collector init", [&] {
    if (state == nullptr) sdk::throw_value_error("the state pointer is NULL");
    *state = nullptr;
    if (num_devices < 0 || (num_devices > 0 && devices == nullptr)) {
      sdk::throw_value_error("invalid device list (" + std::to_string(num_devices) + " devices)");
    }
    auto* plugin = static_cast<PluginState*>(self);
    const bool has_cpu = std::any_of(devices, devices + num_devices, [](const DLDevice& d) {
      return sdk::device_type_code(d) == kDLCPU;
    });
    auto counters = std::make_unique<CounterSet>();
    if (!has_cpu) {
      sdk::log(KILN_LOG_DEBUG, "no cpu device among the %d profiled devices; counting nothing",
               num_devices);
    } else {
      std::vector<UnavailableEvent> unavailable;
      *counters = CounterSet::open(plugin->events(), &unavailable);
      for (const UnavailableEvent& u : unavailable) {
        plugin->warnings().warn(std::string("unavailable:") + u.event->name, u.message);
      }
      if (counters->empty()) {
        plugin->warnings().warn("none",
                                "none of the selected perf events can be counted on "
                                "this machine; the perf collector reports nothing");
      } else {
        sdk::log(KILN_LOG_DEBUG, "counting %s", counters->describe().c_str());
      }
    }
    *state = counters.release();
  });
}

// The `start` slot: a StartHandle in `*handle` (owned by the caller until stop), or NULL for a
// non-cpu device or a state that counts nothing.
KilnError* start(void* /*self*/, void* state, DLDevice device, void** handle) {
  return sdk::guard("perf collector start", [&] {
    if (handle == nullptr) sdk::throw_value_error("the handle pointer is NULL");
    *handle = nullptr;
    if (state == nullptr)
      sdk::throw_value_error("the state is NULL (init failed or was not called)");
    const auto* counters = static_cast<const CounterSet*>(state);
    // The counters cover the whole process, so every cpu device id gets the same figures.
    if (sdk::device_type_code(device) != kDLCPU || counters->empty()) return;
    *handle = new StartHandle{counters->read_all()};
  });
}

// The `stop` slot: reports each counter's scaled difference since `handle` was started to
// `sink` (metrics borrowed for the call) and frees `handle`, even on error.
KilnError* stop(void* self, void* state, void* handle, KilnMetricSink sink, void* sink_ctx) {
  // Owned from here on, so that it is freed on every path, errors included.
  std::unique_ptr<StartHandle> begin(static_cast<StartHandle*>(handle));
  return sdk::guard("perf collector stop", [&] {
    if (begin == nullptr) return;
    if (state == nullptr)
      sdk::throw_value_error("the state is NULL (init failed or was not called)");
    if (sink == nullptr) sdk::throw_value_error("the metric sink is NULL");
    const auto* counters = static_cast<const CounterSet*>(state);
    if (begin->readings.size() != counters->size()) {
      sdk::throw_value_error("the handle was not started on this state");
    }
    const std::vector<CounterReading> end = counters->read_all();
    for (std::size_t i = 0; i < end.size(); ++i) {
      const PerfEvent& event = counters->event(i);
      const std::optional<int64_t> delta = scaled_delta(begin->readings[i], end[i]);
      if (!delta) static_cast<PluginState*>(self)->warnings().warn("overflow", kOverflowWarning);
      KilnMetric metric = sdk::make_table<KilnMetric>();
      metric.name = event.metric;
      // The kind stays the event's own even on overflow, so that a metric column never mixes
      // durations and counts.
      if (event.is_time) {
        metric.kind = KILN_METRIC_DURATION;
        metric.value = delta ? static_cast<double>(*delta) / 1000.0 : -1.0;  // ns -> us
      } else {
        metric.kind = KILN_METRIC_COUNT;
        metric.count = delta.value_or(-1);
      }
      sink(sink_ctx, &metric);
    }
  });
}

// The `teardown` slot: closes the state's counters and frees it.
void teardown(void* /*self*/, void* state) { delete static_cast<CounterSet*>(state); }

}  // namespace

KilnMetricCollector make_perf_collector(PluginState* plugin) {
  KilnMetricCollector table = sdk::make_table<KilnMetricCollector>();
  table.self = plugin;
  table.init = init;
  table.start = start;
  table.stop = stop;
  table.teardown = teardown;
  return table;
}

}  // namespace kiln::perf
