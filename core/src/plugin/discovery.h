// SPDX-License-Identifier: Apache-2.0
// Plugin discovery (manifest first): the plugin set, the search directories, the manifests
// found in them, and which plugins are selected to load (docs/plugin-abi.md §9). Nothing is
// dlopened here.
#ifndef KILN_SRC_PLUGIN_DISCOVERY_H_
#define KILN_SRC_PLUGIN_DISCOVERY_H_

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/plugin_discovery.h"
#include "plugin/manifest.h"
#include "plugin/plugin_set.h"

namespace kiln::plugin {

// A plugin selected to load.
struct PlannedLoad {
  PluginManifest manifest;
  size_t status;             // its entry in Discovery::statuses
  std::string options_json;  // its plugin set entry's options, "{}" when none
  // Components it declares that the plugin set gives to another plugin, as "device:<type>",
  // "loader:<format>", "exporter:<name>", "collector:<name>": loaded without them.
  std::set<std::string> refused;
};

struct Discovery {
  std::optional<std::filesystem::path> plugin_set_path;
  PluginSet plugin_set;
  std::vector<std::filesystem::path> search_dirs;  // in search order, each once
  std::vector<PluginStatus> statuses;              // every plugin considered, in search order
  std::vector<PlannedLoad> to_load;                // in search order
};

// Reads the plugin set and the manifests `options` lead to, and selects what to load
// (KILN_PLUGINS, KILN_PLUGINS_DISABLE, the plugin set, ABI, arch, device-type claims). Every
// plugin not selected gets its status and reason. Throws ConfigError for a malformed plugin set.
Discovery discover(const RuntimeOptions& options);

}  // namespace kiln::plugin

#endif  // KILN_SRC_PLUGIN_DISCOVERY_H_
