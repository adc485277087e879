// SPDX-License-Identifier: Apache-2.0
// Plugin discovery: how a Runtime finds plugins (RuntimeOptions) and what happened to each
// plugin it considered (PluginStatus). See docs/plugin-abi.md for the search order.
#ifndef KILN_PLUGIN_DISCOVERY_H_
#define KILN_PLUGIN_DISCOVERY_H_

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

// What happened to one plugin the runtime considered.
struct PluginStatus {
  enum class State { kLoaded, kDisabled, kFailed };
  std::string name;
  std::string version;  // from the manifest
  std::string abi;      // "1.0" as the manifest says; after loading, what the plugin answered
  State state = State::kFailed;
  std::string reason;  // why disabled or failed; empty when loaded
  std::filesystem::path manifest;
  std::filesystem::path library;
  std::vector<std::string> provides;  // "device:cpu", "loader:so", ...
  double load_ms = 0;                 // dlopen + negotiation
};
const char* to_string(PluginStatus::State state);

// How a Runtime finds plugins.
struct RuntimeOptions {
  // The plugin set YAML. Unset: $KILN_PLUGIN_SET, else <prefix>/share/kiln/plugins.yaml when
  // it exists, else none. An empty path means none. Without a plugin set every discovered
  // plugin loads.
  std::optional<std::filesystem::path> plugin_set;
  // Searched after the plugin set's search_paths and before $KILN_PLUGIN_PATH. Plugins found
  // here or in $KILN_PLUGIN_PATH join the active set even when the plugin set's `plugins:`
  // list does not name them (docs/plugin-abi.md §3.4).
  std::vector<std::filesystem::path> search_paths;
  // Read KILN_PLUGIN_SET, KILN_PLUGIN_PATH, KILN_PLUGINS and KILN_PLUGINS_DISABLE.
  bool read_environment = true;
  // Search <prefix>/lib/kiln/plugins last, where <prefix> is libkiln's install prefix.
  bool search_install_prefix = true;
  // The device types the caller will use. Set: a plugin whose manifest declares device types,
  // none of them listed, is not loaded (status disabled, "not loaded: ..."), so that no driver
  // starts that nobody asked for (Runtime::declared_device_types lists the choices without
  // loading anything). Plugins that declare no device type (loaders, exporters, collectors)
  // load as usual. Unset: every selected plugin loads.
  std::optional<std::vector<std::string>> only_device_types;
};

}  // namespace kiln

#endif  // KILN_PLUGIN_DISCOVERY_H_
