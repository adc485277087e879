// SPDX-License-Identifier: Apache-2.0
// The perf plugin's configuration: its options from the plugin set.
#ifndef KILN_PLUGINS_PERF_PLUGIN_OPTIONS_H_
#define KILN_PLUGINS_PERF_PLUGIN_OPTIONS_H_

#include <string>
#include <vector>

#include "event_catalog.h"

namespace kiln::perf {

// The resolved configuration.
struct PluginOptions {
  // The events to count, in the order given (pointers into known_events(); never NULL).
  std::vector<const PerfEvent*> events;
  // Option keys this plugin does not know, in file order; the caller warns about them.
  std::vector<std::string> unknown;
};

// Resolves the configuration from `options_json` (a JSON object text, borrowed; NULL or empty
// is "{}"). The only option is `events`, a non-empty list of event names from
// known_events(); without it every known event is selected. Throws
// kiln::sdk::Error(KILN_ERROR_VALUE) for malformed JSON, a non-object, an `events` that is not
// a non-empty list of strings, an unknown event name (the message lists the known ones) and
// an event named twice.
PluginOptions resolve_options(const char* options_json);

}  // namespace kiln::perf

#endif  // KILN_PLUGINS_PERF_PLUGIN_OPTIONS_H_
