// SPDX-License-Identifier: Apache-2.0
// Plugin sets: the YAML file (configs/plugins.yaml) that says where to look for plugins, which
// of them to load with which options, and which plugin serves a device type. Internal to libkiln.
#ifndef KILN_PLUGIN_PLUGIN_SET_H_
#define KILN_PLUGIN_PLUGIN_SET_H_

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::plugin {

// One entry of a plugin set's `plugins:` list.
struct PluginSetEntry {
  std::string name;                 // a manifest name, or a glob of one ("cuda*")
  std::string options_json = "{}";  // the entry's `options` mapping as compact JSON
  bool enabled = true;              // `enabled: false` keeps the plugin unloaded
  int line = 0;                     // 1-based line of the entry in the file (0 when unknown)
};

// The parsed content of a plugin set file.
struct PluginSet {
  std::filesystem::path path;                       // absolute path of the file
  std::vector<std::filesystem::path> search_paths;  // absolute, in the file's order
  bool has_plugin_list = false;                     // whether `plugins:` was given (non-null)
  std::vector<PluginSetEntry> plugins;              // in the file's order
  std::map<std::string, std::string> device_types;  // device type -> plugin name
  std::map<std::string, std::string> loaders;       // module format -> plugin name
  std::map<std::string, std::string> exporters;     // exporter name -> plugin name
  std::map<std::string, std::string> collectors;    // collector name -> plugin name
};

// Reads the plugin set at `path`. Keys (all optional): search_paths (list of folders, relative
// ones resolved against the file's folder), plugins (list of names or {name, options,
// enabled} mappings; a name appears once), device_types, loaders, exporters, collectors (mappings
// of a device type / format / name to the plugin that serves it when several claim it). An empty
// file is an empty set. Throws kiln::NotFoundError when the file cannot be read, kiln::ConfigError
// (with file, line, column and key) for bad YAML, unknown keys, wrong types or invalid values.
PluginSet parse_plugin_set(const std::filesystem::path& path);

// Whether `pattern` is a valid `plugins:` name: a plugin name ([a-z0-9_][a-z0-9_.-]*) in which
// glob characters * ? [ ] ! may also appear.
bool is_valid_plugin_pattern(std::string_view pattern);

}  // namespace kiln::plugin

#endif  // KILN_PLUGIN_PLUGIN_SET_H_
