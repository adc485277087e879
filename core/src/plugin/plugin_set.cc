// SPDX-License-Identifier: Apache-2.0
#include "plugin/plugin_set.h"

#include <optional>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "config/yaml_reader.h"
#include "kiln/config_error.h"
#include "plugin/manifest.h"

namespace kiln::plugin {
namespace {

bool is_glob_char(char c) { return c == '*' || c == '?' || c == '[' || c == ']' || c == '!'; }

int line_of(const YAML::Node& node) {
  return node.IsDefined() && node.Mark().line >= 0 ? node.Mark().line + 1 : 0;
}

// Reads one `plugins:` entry: a bare name, or a mapping {name, options, enabled}.
PluginSetEntry read_entry(const YAML::Node& node, const std::string& file,
                          const std::string& key_path) {
  PluginSetEntry entry;
  entry.line = line_of(node);
  std::string name_path = key_path;
  // Where a bad name is reported. A YAML::Node is never assigned to: that would overwrite the
  // node it refers to inside the document; reset() rebinds.
  YAML::Node name_node = node;
  if (node.IsScalar()) {
    entry.name = node.Scalar();
  } else if (node.IsMap()) {
    config::MapReader reader(node, file, key_path);
    reader.allow_keys({"name", "options", "enabled"});
    reader.reject_unknown_keys();
    entry.name = reader.required<std::string>("name");
    name_path = reader.child_path("name");
    name_node.reset(*reader.node("name"));
    entry.enabled = reader.optional<bool>("enabled", true);
    std::optional<YAML::Node> options = reader.node("options");
    if (options && !options->IsNull()) {
      if (!options->IsMap()) {
        throw reader.error("options", "expected a mapping of plugin options, got " +
                                          config::describe_node(*options));
      }
      try {
        entry.options_json = config::yaml_to_json(*options);
      } catch (const ConfigError& e) {
        throw reader.error("options", e.message());
      }
    }
  } else {
    throw config::error_at(
        node, file, key_path,
        "expected a plugin name or a mapping with 'name', got " + config::describe_node(node));
  }
  if (!is_valid_plugin_pattern(entry.name)) {
    throw config::error_at(name_node, file, name_path,
                           "plugin name must match [a-z0-9_][a-z0-9_.-]* (globs * ? [...] "
                           "allowed), got '" +
                               entry.name + "'");
  }
  return entry;
}

std::filesystem::path resolve(const std::filesystem::path& base, const std::string& text) {
  std::filesystem::path path(text);
  if (path.is_relative()) path = base / path;
  return path.lexically_normal();
}

}  // namespace

bool is_valid_plugin_pattern(std::string_view pattern) {
  if (pattern.empty()) return false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || is_glob_char(c) ||
              (i > 0 && (c == '.' || c == '-'));
    if (!ok) return false;
  }
  return true;
}

PluginSet parse_plugin_set(const std::filesystem::path& path) {
  const std::string file = path.string();
  YAML::Node root = config::load_yaml_file(path);

  PluginSet set;
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  set.path = (ec ? path : absolute).lexically_normal();
  if (root.IsNull()) return set;  // an empty file (or only comments)

  config::MapReader reader(root, file, "");
  reader.allow_keys(
      {"search_paths", "plugins", "device_types", "loaders", "exporters", "collectors"});
  reader.reject_unknown_keys();

  const std::filesystem::path folder = set.path.parent_path();
  std::vector<std::string> search_paths =
      reader.optional<std::vector<std::string>>("search_paths", {});
  for (size_t i = 0; i < search_paths.size(); ++i) {
    if (search_paths[i].empty()) {
      const YAML::Node list = *reader.node("search_paths");
      throw config::error_at(list[i], file, config::index_key_path("search_paths", i),
                             "search paths must not be empty");
    }
    set.search_paths.push_back(resolve(folder, search_paths[i]));
  }

  std::optional<YAML::Node> plugins = reader.node("plugins");
  if (plugins && !plugins->IsNull()) {
    if (!plugins->IsSequence()) {
      throw reader.error("plugins",
                         "expected a list of plugins, got " + config::describe_node(*plugins));
    }
    set.has_plugin_list = true;
    std::unordered_map<std::string, int> first_lines;
    for (size_t i = 0; i < plugins->size(); ++i) {
      const std::string key_path = config::index_key_path("plugins", i);
      const YAML::Node item = std::as_const(*plugins)[i];
      PluginSetEntry entry = read_entry(item, file, key_path);
      auto [it, inserted] = first_lines.emplace(entry.name, entry.line);
      if (!inserted) {
        throw config::error_at(item, file, key_path,
                               "plugin '" + entry.name +
                                   "' is listed twice (first listed at line " +
                                   std::to_string(it->second) + ")");
      }
      set.plugins.push_back(std::move(entry));
    }
  }

  // Choices among plugins claiming one name: key -> plugin name, checked in file order so that
  // the first mistake in the file is the one reported.
  auto read_choices = [&](const char* key, const char* what) {
    auto choices = reader.optional<std::map<std::string, std::string>>(key, {});
    if (std::optional<config::MapReader> map = reader.optional_map(key)) {
      const YAML::Node& mapping = map->yaml();
      for (auto it = mapping.begin(); it != mapping.end(); ++it) {
        const std::string name = it->first.Scalar();
        const std::string& plugin_name = choices.at(name);
        if (name.empty()) throw map->error(name, std::string(what) + " must not be empty");
        if (!is_valid_plugin_name(plugin_name)) {
          throw map->error(name, "expected a plugin name matching [a-z0-9_][a-z0-9_.-]*, got '" +
                                     plugin_name + "'");
        }
      }
    }
    return choices;
  };
  set.device_types = read_choices("device_types", "device types");
  set.loaders = read_choices("loaders", "module formats");
  set.exporters = read_choices("exporters", "exporter names");
  set.collectors = read_choices("collectors", "collector names");
  return set;
}

}  // namespace kiln::plugin
