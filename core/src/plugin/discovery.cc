// SPDX-License-Identifier: Apache-2.0
// Plugin discovery: plugin set, search directories, manifests, selection.
#include "plugin/discovery.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fnmatch.h>

#include <algorithm>
#include <boost/dll/runtime_symbol_info.hpp>
#include <cstdlib>
#include <map>

#include "kiln/c/abi.h"
#include "kiln/logging.h"
#include "kiln/version.h"

namespace kiln {

const char* to_string(PluginStatus::State state) {
  switch (state) {
    case PluginStatus::State::kLoaded:
      return "loaded";
    case PluginStatus::State::kDisabled:
      return "disabled";
    case PluginStatus::State::kFailed:
      return "failed";
  }
  return "?";
}

}  // namespace kiln

namespace kiln::plugin {

namespace fs = std::filesystem;

namespace {

void debug(const std::string& message) { log(LogLevel::kDebug, "plugins", message); }

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool matches_any(const std::string& name, const std::vector<std::string>& globs) {
  return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) {
    return fnmatch(g.c_str(), name.c_str(), 0) == 0;
  });
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// <prefix> such that libkiln lives in <prefix>/<libdir>; <libdir> may have several
// components (Debian's lib/x86_64-linux-gnu).
fs::path install_prefix() {
  fs::path prefix = boost::dll::this_line_location().parent_path();
  const fs::path libdir(KILN_LIB_SUBDIR);
  for (auto it = libdir.begin(); it != libdir.end(); ++it) prefix = prefix.parent_path();
  return prefix;
}

}  // namespace

Discovery discover(const RuntimeOptions& options) {
  Discovery found;
  std::optional<fs::path>& plugin_set_path = found.plugin_set_path;
  PluginSet& plugin_set = found.plugin_set;
  std::vector<fs::path>& search_dirs = found.search_dirs;
  std::vector<PluginStatus>& statuses = found.statuses;
  const bool env = options.read_environment;
  // 1. The plugin set.
  if (options.plugin_set) {
    if (!options.plugin_set->empty()) plugin_set_path = options.plugin_set;
  } else if (env && !env_or_empty("KILN_PLUGIN_SET").empty()) {
    plugin_set_path = fs::path(env_or_empty("KILN_PLUGIN_SET"));
  } else if (options.search_install_prefix) {
    fs::path candidate = install_prefix() / KILN_DATA_SUBDIR / "plugins.yaml";
    if (fs::exists(candidate)) plugin_set_path = candidate;
  }
  if (plugin_set_path) {
    debug(fmt::format("plugin set: {}", plugin_set_path->string()));
    plugin_set = parse_plugin_set(*plugin_set_path);
  }

  // 2. Search directories, in order, each once.
  std::vector<fs::path> dirs = plugin_set.search_paths;
  dirs.insert(dirs.end(), options.search_paths.begin(), options.search_paths.end());
  if (env) {
    for (const auto& p : split(env_or_empty("KILN_PLUGIN_PATH"), ':')) dirs.emplace_back(p);
  }
  // Folders the user added (RuntimeOptions::search_paths, --plugin-path, $KILN_PLUGIN_PATH):
  // their plugins join the active set even when the plugin set's `plugins:` list does not name
  // them, so "the default set plus my folder" needs no edit of the plugin set.
  const size_t first_added = plugin_set.search_paths.size();
  size_t end_added = dirs.size();
  if (options.search_install_prefix) dirs.push_back(install_prefix() / KILN_PLUGIN_SUBDIR);
  auto canonical_of = [](const fs::path& d) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(d, ec);
    return ec ? d : canonical;
  };
  std::set<fs::path> seen_dirs, added_dirs;
  for (size_t i = 0; i < dirs.size(); ++i) {
    fs::path canonical = canonical_of(dirs[i]);
    if (i >= first_added && i < end_added) added_dirs.insert(canonical);
    if (seen_dirs.insert(canonical).second) search_dirs.push_back(canonical);
  }

  // 3. Manifests, in directory order then file-name order. The first manifest of a name wins.
  std::vector<PluginManifest> manifests;
  std::map<std::string, size_t> status_of_name;
  std::set<std::string> from_added_dir;  // names of manifests found in an added folder
  for (const auto& dir : search_dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      debug(fmt::format("search path {} is not a directory; skipped", dir.string()));
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".yaml") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      PluginStatus status;
      status.manifest = file;
      status.name = file.stem().string();
      try {
        PluginManifest m = parse_manifest(file);
        if (!m.ignored_keys.empty()) {
          log(LogLevel::kInfo, "plugins",
              fmt::format("{}: manifest format {} is newer than this Kiln's ({}); ignoring keys "
                          "it does not know: {}",
                          file.string(), m.manifest_version, kManifestFormatVersion,
                          fmt::join(m.ignored_keys, ", ")));
        }
        status.name = m.name;
        status.version = m.version;
        status.abi = fmt::format("{}.{}", m.abi_major, m.abi_minor);
        status.library = m.library;
        for (const auto& d : m.devices) status.provides.push_back("device:" + d);
        for (const auto& l : m.loaders) status.provides.push_back("loader:" + l);
        for (const auto& e : m.exporters) status.provides.push_back("exporter:" + e);
        for (const auto& c : m.collectors) status.provides.push_back("collector:" + c);
        if (auto it = status_of_name.find(m.name); it != status_of_name.end()) {
          status.state = PluginStatus::State::kDisabled;
          status.reason = fmt::format("shadowed by {} (found earlier in the search order)",
                                      statuses[it->second].manifest.string());
          statuses.push_back(status);
          continue;
        }
        status_of_name[m.name] = statuses.size();
        if (added_dirs.count(dir)) from_added_dir.insert(m.name);
        manifests.push_back(std::move(m));
      } catch (const std::exception& e) {
        status.state = PluginStatus::State::kFailed;
        status.reason = fmt::format("bad manifest: {}", e.what());
      }
      debug(fmt::format("found manifest {} ({})", file.string(), status.name));
      statuses.push_back(std::move(status));
    }
  }

  // 4. Selection.
  const std::vector<std::string> selected =
      env ? split(env_or_empty("KILN_PLUGINS"), ',') : std::vector<std::string>{};
  const std::vector<std::string> disabled =
      env ? split(env_or_empty("KILN_PLUGINS_DISABLE"), ',') : std::vector<std::string>{};
  std::map<std::string, const PluginSetEntry*> set_entry;
  for (const auto& m : manifests) {
    for (const auto& e : plugin_set.plugins) {
      if (fnmatch(e.name.c_str(), m.name.c_str(), 0) == 0) {
        set_entry.emplace(m.name, &e);
        break;
      }
    }
  }
  for (const auto& e : plugin_set.plugins) {
    bool found = std::any_of(manifests.begin(), manifests.end(), [&](const PluginManifest& m) {
      return fnmatch(e.name.c_str(), m.name.c_str(), 0) == 0;
    });
    if (!found && e.enabled) {
      PluginStatus status;
      status.name = e.name;
      status.state = PluginStatus::State::kFailed;
      std::vector<std::string> dir_names;
      for (const auto& d : search_dirs) dir_names.push_back(d.string());
      status.reason = fmt::format(
          "listed in {}:{} but no manifest of that name was found in: {}",
          plugin_set_path->string(), e.line,
          dir_names.empty() ? "(no search paths)" : fmt::format("{}", fmt::join(dir_names, ", ")));
      statuses.push_back(std::move(status));
    }
  }

  // Names claimed by several selected plugins are refused until the plugin set chooses (DESIGN
  // §3 rule 11: no clash is settled by search order). One entry per kind of component.
  struct ClaimKind {
    const char* what;  // in messages: "device type 'x'"
    const char* key;   // the plugin-set key that chooses
    const char* tag;   // PlannedLoad's refused tags: "device:x"
    std::vector<std::string> PluginManifest::*names;
    const std::map<std::string, std::string>* chosen;
  };
  const ClaimKind kinds[] = {
      {"device type", "device_types", "device", &PluginManifest::devices, &plugin_set.device_types},
      {"loader", "loaders", "loader", &PluginManifest::loaders, &plugin_set.loaders},
      {"exporter", "exporters", "exporter", &PluginManifest::exporters, &plugin_set.exporters},
      {"collector", "collectors", "collector", &PluginManifest::collectors, &plugin_set.collectors},
  };
  // tag ("device:x") -> claimants, in search order
  std::map<std::string, std::vector<std::string>> claims;
  std::vector<const PluginManifest*> to_load;
  for (const auto& m : manifests) {
    PluginStatus& status = statuses[status_of_name[m.name]];
    auto refuse = [&](PluginStatus::State state, std::string reason) {
      status.state = state;
      status.reason = std::move(reason);
      debug(fmt::format("{}: {} ({})", m.name, to_string(state), status.reason));
    };
    if (!selected.empty()) {
      if (!matches_any(m.name, selected)) {
        refuse(PluginStatus::State::kDisabled,
               fmt::format("not selected by KILN_PLUGINS={}", env_or_empty("KILN_PLUGINS")));
        continue;
      }
    } else if (plugin_set.has_plugin_list) {
      auto it = set_entry.find(m.name);
      if (it == set_entry.end() && !from_added_dir.count(m.name)) {
        refuse(PluginStatus::State::kDisabled,
               fmt::format("not listed in plugin set {} (plugins found in --plugin-path or "
                           "KILN_PLUGIN_PATH folders join without being listed)",
                           plugin_set_path->string()));
        continue;
      }
      if (it != set_entry.end() && !it->second->enabled) {
        refuse(PluginStatus::State::kDisabled,
               fmt::format("disabled in plugin set {}:{}", plugin_set_path->string(),
                           it->second->line));
        continue;
      }
    }
    if (matches_any(m.name, disabled)) {
      refuse(PluginStatus::State::kDisabled, fmt::format("disabled by KILN_PLUGINS_DISABLE={}",
                                                         env_or_empty("KILN_PLUGINS_DISABLE")));
      continue;
    }
    if (m.abi_major != KILN_ABI_VERSION_MAJOR) {
      refuse(PluginStatus::State::kFailed,
             fmt::format("manifest says ABI {}.{}, but this host speaks ABI {} (major versions "
                         "differ)",
                         m.abi_major, m.abi_minor, abi_version()));
      continue;
    }
    if (m.abi_minor > KILN_ABI_VERSION_MINOR) {
      refuse(PluginStatus::State::kFailed,
             fmt::format("manifest says ABI {}.{}, newer than this host's ABI {}; upgrade Kiln",
                         m.abi_major, m.abi_minor, abi_version()));
      continue;
    }
    if (!m.arch.empty() && m.arch != host_arch()) {
      refuse(PluginStatus::State::kFailed,
             fmt::format("built for {}, this host is {}", m.arch, host_arch()));
      continue;
    }
    if (!fs::exists(m.library)) {
      refuse(PluginStatus::State::kFailed,
             fmt::format("library {} named by the manifest does not exist", m.library.string()));
      continue;
    }
    for (const ClaimKind& k : kinds) {
      for (const auto& n : m.*k.names) claims[fmt::format("{}:{}", k.tag, n)].push_back(m.name);
    }
    to_load.push_back(&m);
  }

  // 5. Load, in search order.
  for (const PluginManifest* m : to_load) {
    PluginStatus& status = statuses[status_of_name[m->name]];
    std::set<std::string> refused;  // tags another plugin was chosen for: loaded without them
    std::vector<std::string> conflicts;
    std::set<std::string> keys;  // plugin-set keys that would settle `conflicts`
    for (const ClaimKind& k : kinds) {
      for (const auto& n : m->*k.names) {
        const std::string tag = fmt::format("{}:{}", k.tag, n);
        const std::vector<std::string>& claimants = claims[tag];
        if (claimants.size() < 2) continue;
        auto chosen = k.chosen->find(n);
        if (chosen != k.chosen->end()) {
          if (chosen->second != m->name) refused.insert(tag);
          continue;
        }
        conflicts.push_back(
            fmt::format("{} '{}' is also claimed by {}", k.what, n, fmt::join(claimants, ", ")));
        keys.insert(fmt::format("{}:", k.key));
      }
    }
    if (!conflicts.empty()) {
      status.state = PluginStatus::State::kFailed;
      status.reason = fmt::format("{}; name the plugin that serves it under {} in the plugin set",
                                  fmt::join(conflicts, "; "), fmt::join(keys, " and "));
      continue;
    }
    auto it = set_entry.find(m->name);
    found.to_load.push_back(PlannedLoad{
        *m, static_cast<size_t>(&status - statuses.data()),
        it != set_entry.end() ? it->second->options_json : std::string("{}"), std::move(refused)});
  }
  return found;
}

}  // namespace kiln::plugin
