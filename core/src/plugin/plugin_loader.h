// SPDX-License-Identifier: Apache-2.0
// Loading one selected plugin: dlopen, ABI negotiation, and validation of every component
// table it answers (sizes, required slots, declared device types). Zero-extended copies of the
// tables go into the LoadedPlugin.
#ifndef KILN_SRC_PLUGIN_PLUGIN_LOADER_H_
#define KILN_SRC_PLUGIN_PLUGIN_LOADER_H_

#include "kiln/object.h"
#include "kiln/plugin_discovery.h"
#include "plugin/discovery.h"
#include "plugin/loaded_plugin.h"

namespace kiln::plugin {

// Loads `planned` and fills `status` (state, reason, the ABI and version the plugin answered,
// load_ms). Returns the plugin, or null when it failed (status says why). Never throws for a
// broken plugin.
Ref<LoadedPlugin> load_plugin(const PlannedLoad& planned, PluginStatus& status);

}  // namespace kiln::plugin

#endif  // KILN_SRC_PLUGIN_PLUGIN_LOADER_H_
