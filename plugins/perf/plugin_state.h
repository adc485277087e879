// SPDX-License-Identifier: Apache-2.0
// Everything the perf plugin owns between negotiation and shutdown.
#ifndef KILN_PLUGINS_PERF_PLUGIN_STATE_H_
#define KILN_PLUGINS_PERF_PLUGIN_STATE_H_

#include <array>
#include <span>
#include <vector>

#include "event_catalog.h"
#include "kiln/c/kiln.h"
#include "warn_once.h"

namespace kiln::perf {

// The plugin's state for one negotiation (one Runtime): the selected events, the warnings
// already given, and the collector table, whose `self` points here. Created by
// kiln_plugin_negotiate and destroyed by the plugin's shutdown, after every collector state
// made through it has been torn down. Not copyable: the table holds its address.
class PluginState {
 public:
  // Builds the component table; configure() must run before it is used.
  PluginState();
  PluginState(const PluginState&) = delete;
  PluginState& operator=(const PluginState&) = delete;

  // Selects the events from `options_json` (borrowed JSON text; see resolve_options()) and
  // warns about unknown option keys. Throws kiln::sdk::Error(KILN_ERROR_VALUE) for a bad
  // option, naming it (and, for an unknown event, the known ones).
  void configure(const char* options_json);

  // The events to count, in option order (static storage).
  std::span<const PerfEvent* const> events() const { return events_; }
  // The warnings given so far, shared by every collector state of this negotiation so that
  // repeated init/teardown cycles (one per profile_function call) do not repeat them.
  WarnOnce& warnings() { return warnings_; }

  // The components reported to the host; valid as long as this object.
  std::span<const KilnComponent> components() const { return components_; }

 private:
  std::vector<const PerfEvent*> events_;
  WarnOnce warnings_;
  KilnMetricCollector collector_;
  std::array<KilnComponent, 1> components_;
};

}  // namespace kiln::perf

#endif  // KILN_PLUGINS_PERF_PLUGIN_STATE_H_
