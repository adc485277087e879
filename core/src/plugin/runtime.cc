// Runtime: plugin discovery (manifest first), selection, loading and negotiation.
#include "kiln/runtime.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <boost/dll/runtime_symbol_info.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "ffi/error_object.h"
#include "kiln/config_error.h"
#include "kiln/device_code.h"
#include "kiln/error.h"
#include "kiln/logging.h"
#include "kiln/temp_dir.h"
#include "kiln/version.h"
#include "plugin/copy_table.h"
#include "plugin/loaded_plugin.h"
#include "plugin/manifest.h"
#include "plugin/plugin_set.h"
#include "rpc/remote_backend.h"
#include "vm/vm_module.h"

namespace kiln {

namespace fs = std::filesystem;
using plugin::LoadedPlugin;
using plugin::PluginManifest;

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

// Boost.DLL appends a meaningless errno text to dlerror's message; keep dlerror's part.
std::string clean_dl_error(const std::string& what) {
  const std::string marker = "dlerror system message: ";
  auto start = what.find(marker);
  if (start == std::string::npos) return what;
  start += marker.size();
  auto end = what.rfind("):");
  return what.substr(start,
                     end == std::string::npos || end < start ? std::string::npos : end - start);
}

using plugin::copy_table;

// Thrown inside loading to mark the plugin failed with a reason.
struct LoadFailure {
  std::string reason;
};

}  // namespace

struct Runtime::Impl {
  RuntimeOptions options;
  std::optional<fs::path> plugin_set_path;
  plugin::PluginSet plugin_set;
  std::vector<fs::path> search_dirs;
  std::vector<PluginStatus> statuses;
  std::vector<Ref<LoadedPlugin>> plugins;
  std::map<int32_t, Ref<DeviceBackend>> backends;  // by DLPack device type
  struct Component {
    const void* table;
    Ref<LoadedPlugin> plugin;
  };
  std::map<std::string, Component> loaders, exporters, collectors;
  double startup_ms = 0;

  void discover();
  void load(const PluginManifest& manifest, PluginStatus& status, const std::string& options_json,
            const std::set<std::string>& refused_device_types);
};

void Runtime::Impl::discover() {
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
    plugin_set = plugin::parse_plugin_set(*plugin_set_path);
  }

  // 2. Search directories, in order, each once.
  std::vector<fs::path> dirs = plugin_set.search_paths;
  dirs.insert(dirs.end(), options.search_paths.begin(), options.search_paths.end());
  if (env) {
    for (const auto& p : split(env_or_empty("KILN_PLUGIN_PATH"), ':')) dirs.emplace_back(p);
  }
  if (options.search_install_prefix) dirs.push_back(install_prefix() / KILN_PLUGIN_SUBDIR);
  std::set<fs::path> seen_dirs;
  for (const auto& d : dirs) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(d, ec);
    if (ec) canonical = d;
    if (seen_dirs.insert(canonical).second) search_dirs.push_back(canonical);
  }

  // 3. Manifests, in directory order then file-name order. The first manifest of a name wins.
  std::vector<PluginManifest> manifests;
  std::map<std::string, size_t> status_of_name;
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
        PluginManifest m = plugin::parse_manifest(file);
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
  std::map<std::string, const plugin::PluginSetEntry*> set_entry;
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

  // Device types claimed by several selected plugins, unless the plugin set chooses.
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
      if (it == set_entry.end()) {
        refuse(PluginStatus::State::kDisabled,
               fmt::format("not listed in plugin set {}", plugin_set_path->string()));
        continue;
      }
      if (!it->second->enabled) {
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
    if (!m.arch.empty() && m.arch != plugin::host_arch()) {
      refuse(PluginStatus::State::kFailed,
             fmt::format("built for {}, this host is {}", m.arch, plugin::host_arch()));
      continue;
    }
    if (!fs::exists(m.library)) {
      refuse(PluginStatus::State::kFailed,
             fmt::format("library {} named by the manifest does not exist", m.library.string()));
      continue;
    }
    for (const auto& d : m.devices) claims[d].push_back(m.name);
    to_load.push_back(&m);
  }
  std::set<std::string> conflicted;  // (plugin name + '/' + device type) refused
  for (const auto& [type, claimants] : claims) {
    if (claimants.size() < 2) continue;
    auto chosen = plugin_set.device_types.find(type);
    for (const auto& name : claimants) {
      if (chosen != plugin_set.device_types.end() && chosen->second == name) continue;
      conflicted.insert(name + "/" + type);
    }
  }

  // 5. Load, in search order.
  for (const PluginManifest* m : to_load) {
    PluginStatus& status = statuses[status_of_name[m->name]];
    std::set<std::string> refused;
    std::vector<std::string> conflicts;
    for (const auto& d : m->devices) {
      if (!conflicted.count(m->name + "/" + d)) continue;
      auto chosen = plugin_set.device_types.find(d);
      if (chosen != plugin_set.device_types.end()) {
        refused.insert(d);  // another plugin was chosen: load without this device type
        continue;
      }
      conflicts.push_back(
          fmt::format("device type '{}' is also claimed by {}", d, fmt::join(claims[d], ", ")));
    }
    if (!conflicts.empty()) {
      status.state = PluginStatus::State::kFailed;
      status.reason =
          fmt::format("{}; name the plugin that serves it under device_types: in the plugin set",
                      fmt::join(conflicts, "; "));
      continue;
    }
    auto it = set_entry.find(m->name);
    std::string options_json = it != set_entry.end() ? it->second->options_json : std::string("{}");
    load(*m, status, options_json, refused);
  }
}

void Runtime::Impl::load(const PluginManifest& m, PluginStatus& status,
                         const std::string& options_json,
                         const std::set<std::string>& refused_device_types) {
  const auto start = std::chrono::steady_clock::now();
  try {
    debug(fmt::format("{}: dlopen {}", m.name, m.library.string()));
    boost::dll::shared_library library;
    try {
      library.load(m.library, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    } catch (const std::exception& e) {
      throw LoadFailure{fmt::format("cannot load library: {}", clean_dl_error(e.what()))};
    }
    if (!library.has(KILN_PLUGIN_ENTRY_SYMBOL)) {
      throw LoadFailure{fmt::format("{} does not export the entry symbol {}", m.library.string(),
                                    KILN_PLUGIN_ENTRY_SYMBOL)};
    }
    auto entry = library.get<std::remove_pointer_t<KilnPluginEntryFn>>(KILN_PLUGIN_ENTRY_SYMBOL);
    auto plugin = make_object<LoadedPlugin>(m.name, std::move(library));

    KilnNegotiateIn in{};
    in.struct_size = sizeof(in);
    in.abi_major = KILN_ABI_VERSION_MAJOR;
    in.abi_minor = KILN_ABI_VERSION_MINOR;
    in.abi_min_minor = 0;
    in.host = &ffi::host_services();
    in.options_json = options_json.c_str();
    KilnPluginInfo info{};
    info.struct_size = sizeof(info);
    debug(fmt::format("{}: negotiating (host ABI {}, options {})", m.name, abi_version(),
                      options_json));
    if (KilnError* err = entry(&in, &info)) {
      std::string message = err->message;
      delete err;
      throw LoadFailure{fmt::format("negotiation refused: {}", message)};
    }
    if (info.name == nullptr || info.version == nullptr) {
      throw LoadFailure{"the entry point returned success without describing the plugin"};
    }
    plugin->info = info;  // from here on, shutdown runs when `plugin` goes away
    status.abi = fmt::format("{}.{}", info.abi_major, info.abi_minor);
    if (info.abi_major != KILN_ABI_VERSION_MAJOR || info.abi_minor > KILN_ABI_VERSION_MINOR) {
      throw LoadFailure{fmt::format("plugin answered ABI {}.{}; this host speaks ABI {}",
                                    info.abi_major, info.abi_minor, abi_version())};
    }
    if (m.name != info.name) {
      throw LoadFailure{fmt::format("the plugin calls itself '{}' but its manifest says '{}'",
                                    info.name, m.name)};
    }
    status.version = info.version;
    if (info.num_components < 0 || (info.num_components > 0 && info.components == nullptr)) {
      throw LoadFailure{"the plugin's component list is malformed"};
    }

    std::set<std::string> declared_devices(m.devices.begin(), m.devices.end());
    for (int32_t i = 0; i < info.num_components; ++i) {
      const KilnComponent& c = info.components[i];
      if (c.struct_size < KILN_COMPONENT_SIZE_1_0) {
        throw LoadFailure{
            fmt::format("KilnComponent #{} has struct_size {}, smaller than the "
                        "1.0 layout ({} bytes)",
                        i, c.struct_size, KILN_COMPONENT_SIZE_1_0)};
      }
      const std::string name = c.name != nullptr ? c.name : "";
      if (name.empty() || c.table == nullptr) {
        throw LoadFailure{fmt::format("component #{} has no name or no table", i)};
      }
      const size_t table_size = *static_cast<const size_t*>(c.table);
      auto too_small = [&](const char* type, size_t min) {
        if (table_size < min) {
          throw LoadFailure{
              fmt::format("{} '{}' has struct_size {}, smaller than the 1.0 "
                          "layout ({} bytes)",
                          type, name, table_size, min)};
        }
      };
      switch (c.kind) {
        case KILN_COMPONENT_DEVICE: {
          too_small("KilnDeviceBackend", KILN_DEVICE_BACKEND_SIZE_1_0);
          if (!declared_devices.count(name)) {
            log(LogLevel::kWarn, m.name,
                fmt::format("ignoring device type '{}': not declared in {}", name,
                            m.manifest_path.string()));
            continue;
          }
          if (refused_device_types.count(name)) continue;
          auto table = copy_table<KilnDeviceBackend>(c.table);
          for (auto [slot, ptr] : std::initializer_list<std::pair<const char*, const void*>>{
                   {"device_count", reinterpret_cast<const void*>(table->device_count)},
                   {"alloc", reinterpret_cast<const void*>(table->alloc)},
                   {"free", reinterpret_cast<const void*>(table->free)},
                   {"copy_to_device", reinterpret_cast<const void*>(table->copy_to_device)},
                   {"copy_to_host", reinterpret_cast<const void*>(table->copy_to_host)},
                   {"copy_on_device", reinterpret_cast<const void*>(table->copy_on_device)},
                   {"synchronize", reinterpret_cast<const void*>(table->synchronize)}}) {
            if (ptr == nullptr) {
              throw LoadFailure{
                  fmt::format("device backend '{}' lacks the required slot '{}'", name, slot)};
            }
          }
          plugin->device_names.push_back(name);
          plugin->devices.push_back(std::move(table));
          break;
        }
        case KILN_COMPONENT_LOADER: {
          too_small("KilnLoader", sizeof(KilnLoader));
          auto table = copy_table<KilnLoader>(c.table);
          if (table->load_file == nullptr) {
            throw LoadFailure{fmt::format("loader '{}' lacks the required slot 'load_file'", name)};
          }
          plugin->loader_names.push_back(name);
          plugin->loaders.push_back(std::move(table));
          break;
        }
        case KILN_COMPONENT_EXPORTER: {
          too_small("KilnExporter", sizeof(KilnExporter));
          auto table = copy_table<KilnExporter>(c.table);
          if (table->export_module == nullptr) {
            throw LoadFailure{
                fmt::format("exporter '{}' lacks the required slot 'export_module'", name)};
          }
          plugin->exporter_names.push_back(name);
          plugin->exporters.push_back(std::move(table));
          break;
        }
        case KILN_COMPONENT_COLLECTOR: {
          too_small("KilnMetricCollector", sizeof(KilnMetricCollector));
          auto table = copy_table<KilnMetricCollector>(c.table);
          if (!table->init || !table->start || !table->stop || !table->teardown) {
            throw LoadFailure{fmt::format("collector '{}' lacks a required slot", name)};
          }
          plugin->collector_names.push_back(name);
          plugin->collectors.push_back(std::move(table));
          break;
        }
        default:
          log(LogLevel::kWarn, m.name,
              fmt::format("ignoring component '{}' of unknown kind {}", name, c.kind));
      }
    }
    for (const auto& d : m.devices) {
      if (refused_device_types.count(d)) continue;
      if (std::find(plugin->device_names.begin(), plugin->device_names.end(), d) ==
          plugin->device_names.end()) {
        throw LoadFailure{
            fmt::format("the manifest declares device type '{}' but the plugin "
                        "provides no such backend",
                        d)};
      }
    }

    // Register, now that everything checked out.
    for (size_t i = 0; i < plugin->devices.size(); ++i) {
      const KilnDeviceBackend* table = plugin->devices[i].get();
      const std::string& name = plugin->device_names[i];
      try {
        device_types::add(name, table->dl_device_type);
      } catch (const ValueError& e) {
        throw LoadFailure{e.what()};
      }
      if (backends.count(table->dl_device_type)) {
        throw LoadFailure{fmt::format(
            "device type code {} ('{}') is already served by plugin "
            "'{}'",
            table->dl_device_type, name, backends[table->dl_device_type]->plugin_name())};
      }
    }
    for (size_t i = 0; i < plugin->devices.size(); ++i) {
      const KilnDeviceBackend* table = plugin->devices[i].get();
      backends[table->dl_device_type] =
          make_object<DeviceBackend>(table, plugin->device_names[i], m.name, plugin);
    }
    auto add_all = [&](auto& names, auto& tables, std::map<std::string, Component>& into) {
      for (size_t i = 0; i < names.size(); ++i) {
        if (into.count(names[i])) {
          log(LogLevel::kWarn, m.name,
              fmt::format("'{}' is already provided by plugin '{}'; keeping that one", names[i],
                          into[names[i]].plugin->name));
          continue;
        }
        into[names[i]] = Component{tables[i].get(), plugin};
      }
    };
    add_all(plugin->loader_names, plugin->loaders, loaders);
    add_all(plugin->exporter_names, plugin->exporters, exporters);
    add_all(plugin->collector_names, plugin->collectors, collectors);
    plugins.push_back(plugin);
    status.state = PluginStatus::State::kLoaded;
    status.reason.clear();
    debug(fmt::format("{}: loaded ({} {})", m.name, info.name, info.version));
  } catch (const LoadFailure& f) {
    status.state = PluginStatus::State::kFailed;
    status.reason = f.reason;
    log(LogLevel::kDebug, "plugins", fmt::format("{}: failed: {}", m.name, f.reason));
  }
  status.load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  const auto start = std::chrono::steady_clock::now();
  impl_->options = std::move(options);
  impl_->discover();
  impl_->startup_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

Runtime::~Runtime() = default;

Runtime& Runtime::global() {
  // Never destroyed: plugins stay loaded until the process exits, so objects in other
  // statics can still use them during exit.
  static Runtime* runtime = new Runtime();
  return *runtime;
}

const std::vector<PluginStatus>& Runtime::plugins() const { return impl_->statuses; }
const std::vector<fs::path>& Runtime::search_paths() const { return impl_->search_dirs; }
std::optional<fs::path> Runtime::plugin_set_path() const { return impl_->plugin_set_path; }
double Runtime::startup_ms() const { return impl_->startup_ms; }

Ref<DeviceBackend> Runtime::find_backend(int32_t device_type) const {
  // Devices of RPC sessions are served by their session, whatever the runtime.
  if (device_type >= kRemoteDeviceMask) return rpc::detail::remote_backend(device_type);
  auto it = impl_->backends.find(device_type);
  return it == impl_->backends.end() ? Ref<DeviceBackend>() : it->second;
}

Ref<DeviceBackend> Runtime::backend(int32_t device_type) const {
  if (auto b = find_backend(device_type)) return b;
  auto name = device_types::name_of(device_type);
  std::vector<std::string> loaded;
  for (const auto& [code, b] : impl_->backends) loaded.push_back(b->name());
  std::string hint;
  for (const auto& s : impl_->statuses) {
    for (const auto& p : s.provides) {
      if (name && p == "device:" + *name && s.state != PluginStatus::State::kLoaded) {
        hint = fmt::format("; plugin '{}' would provide it but is {}: {}", s.name,
                           to_string(s.state), s.reason);
      }
    }
  }
  throw NotFoundError(
      fmt::format("no backend serves device type '{}' (loaded backends: {}){}",
                  name ? *name : std::to_string(device_type),
                  loaded.empty() ? "none" : fmt::format("{}", fmt::join(loaded, ", ")), hint));
}

std::vector<BackendInfo> Runtime::backends() const {
  std::vector<BackendInfo> out;
  for (const auto& [code, b] : impl_->backends) {
    BackendInfo info;
    info.type_name = b->name();
    info.plugin = b->plugin_name();
    try {
      const int32_t n = b->device_count(&info.why_none);
      for (int32_t id = 0; id < n; ++id) {
        info.devices.push_back(DeviceInfo{Device{code, id}, b->attributes(id)});
      }
    } catch (const Error& e) {
      info.devices.clear();
      info.why_none = e.what();
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(),
            [](const BackendInfo& a, const BackendInfo& b) { return a.type_name < b.type_name; });
  return out;
}

namespace {

// Loads the host library artifact `host` of `package` through `runtime`.
Module load_package_library(Runtime& runtime, const Artifact& host, const fs::path& dir,
                            const fs::path& package) {
  // Loaded from a private temporary copy: the library stays mapped after the copy is removed.
  const fs::path lib = dir / host.name;
  {
    std::ofstream out(lib, std::ios::binary);
    out.write(reinterpret_cast<const char*>(host.data.data()),
              static_cast<std::streamsize>(host.data.size()));
    out.close();
    if (!out) throw RuntimeError(fmt::format("cannot write {}", lib.string()));
  }
  try {
    return runtime.load_module(lib);
  } catch (const Error& e) {
    // Name the package, not the temporary copy the message mentions.
    throw_error(e.code(), fmt::format("{} (host library '{}' of package {})", e.what(), host.name,
                                      package.string()));
  }
}

// A package with a VM executable: every host library is loaded, and the executable's imports
// resolve against them by name.
Module load_vm_package(Runtime& runtime, const Artifact& bytecode,
                       const std::vector<const Artifact*>& hosts, const fs::path& path,
                       const std::vector<Artifact>& artifacts) {
  const TemporaryDirectory dir("kiln_package_");
  std::map<std::string, Module> libraries;
  for (const Artifact* host : hosts) {
    libraries[host->name] = load_package_library(runtime, *host, dir.path(), path);
  }
  Module m = vm::load_executable_package(bytecode, std::move(libraries), path.string());
  m.get()->artifacts = artifacts;
  m.get()->set_source(path.string());
  return m;
}

}  // namespace

Module Runtime::load_module(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw NotFoundError(fmt::format("cannot find module file {}", path.string()));
  }
  std::string name = path.filename().string();
  auto dot = name.rfind('.');
  if (dot == std::string::npos || dot + 1 == name.size()) {
    throw ValueError(
        fmt::format("cannot tell the format of {}: its name has no extension", path.string()));
  }
  std::string format = name.substr(dot + 1);
  if (format == "dll" || format == "dylib" || format == "dso") format = "so";
  auto it = impl_->loaders.find(format);
  if (it == impl_->loaders.end() && vm::is_executable_format(format)) {
    return vm::load_executable_file(path, *this);
  }
  if (it == impl_->loaders.end() &&
      (device_code_format_of(format) || fs::is_regular_file(path.string() + ".json", ec))) {
    // Device code with its sidecar metadata (docs/plugin-abi.md §10.4): a loader plugin that
    // claims the extension wins; otherwise the host makes the kernels functions itself.
    std::vector<DeviceCode> code;
    code.push_back(read_device_code(path));
    Module m = make_device_code_module(std::move(code), *this);
    m.get()->set_source(path.string());
    return m;
  }
  if (it == impl_->loaders.end()) {
    auto formats = loader_formats();
    throw NotFoundError(
        fmt::format("no loader for '.{}' files ({}); loaders available: {}", format, path.string(),
                    formats.empty() ? "none" : fmt::format("{}", fmt::join(formats, ", "))));
  }
  const auto* loader = static_cast<const KilnLoader*>(it->second.table);
  KilnLoadedModule loaded{};
  loaded.struct_size = sizeof(loaded);
  const std::string path_text = fs::absolute(path).string();
  if (KilnError* err = loader->load_file(loader->self, path_text.c_str(), &loaded)) {
    const int32_t code = err->code;
    std::string message = err->message;
    delete err;
    throw_error(code, fmt::format("loading {}: {}", path.string(), message));
  }
  auto obj = ModuleObj::from_loader(loaded, it->second.plugin, path.string());
  if (obj->kind() != kPackageKind) return Module(std::move(obj));
  return load_package(std::move(obj), path);
}

Module Runtime::load_package(Ref<ModuleObj> package, const fs::path& path) {
  // A package carries its artifacts: at most one host library, loaded by the loader for its
  // own format from a private temporary copy (the library stays mapped after removal), and
  // device code blobs, each with its metadata artifact "<name>.json".
  const Artifact* host = nullptr;
  const Artifact* bytecode = nullptr;
  std::vector<const Artifact*> hosts;
  std::map<std::string, const Artifact*> metadata;
  std::vector<const Artifact*> device_blobs;
  for (const Artifact& a : package->artifacts) {
    if (a.name.empty() || a.name.find('/') != std::string::npos || a.name == "." ||
        a.name == "..") {
      throw ValueError(fmt::format("package {}: bad artifact name '{}'", path.string(), a.name));
    }
    if (a.role == "host_library") {
      hosts.push_back(&a);
      host = &a;
    } else if (a.role == "bytecode") {
      if (bytecode != nullptr) {
        throw ValueError(
            fmt::format("package {} has more than one bytecode artifact", path.string()));
      }
      bytecode = &a;
    } else if (a.role == "device_blob") {
      device_blobs.push_back(&a);
    } else if (a.role == "metadata") {
      metadata[a.name] = &a;
    }
  }
  if (bytecode != nullptr)
    return load_vm_package(*this, *bytecode, hosts, path, package->artifacts);
  if (hosts.size() > 1) {
    throw ValueError(fmt::format("package {} has more than one host_library", path.string()));
  }
  if (host == nullptr && device_blobs.empty()) {
    throw ValueError(
        fmt::format("package {} has no host_library and no device_blob artifact", path.string()));
  }
  Module device_code;
  if (!device_blobs.empty()) {
    std::vector<DeviceCode> blobs;
    for (const Artifact* blob : device_blobs) {
      auto meta = metadata.find(blob->name + ".json");
      if (meta == metadata.end()) {
        throw ValueError(
            fmt::format("package {}: device_blob '{}' has no metadata artifact '{}.json'",
                        path.string(), blob->name, blob->name));
      }
      const std::string json(meta->second->data.begin(), meta->second->data.end());
      DeviceCode code;
      code.name = blob->name;
      code.data = blob->data;
      code.metadata_json = json;
      // The metadata written with the blob names its format and target.
      const auto doc = nlohmann::json::parse(json, nullptr, false);
      if (doc.is_object()) {
        code.format = doc.value("format", "");
        code.target = doc.value("target", "");
      }
      if (code.format.empty() || code.target.empty()) {
        throw ValueError(
            fmt::format("package {}: metadata '{}' must name \"format\" and \"target\"",
                        path.string(), meta->first));
      }
      blobs.push_back(std::move(code));
    }
    try {
      device_code = make_device_code_module(std::move(blobs), *this);
    } catch (const Error& e) {
      throw_error(e.code(), fmt::format("package {}: {}", path.string(), e.what()));
    }
  }
  if (host == nullptr) {
    device_code.get()->artifacts = package->artifacts;
    device_code.get()->set_source(path.string());
    return device_code;
  }
  const TemporaryDirectory dir("kiln_package_");
  Module inner = load_package_library(*this, *host, dir.path(), path);
  // The host library calls into the device code as an import (its kernels resolve through it).
  if (device_code.defined()) inner.import_module(device_code);
  // The loaded module reports the package's artifacts, so exporting it again is lossless.
  inner.get()->artifacts = package->artifacts;
  inner.get()->set_source(path.string());
  return inner;
}

namespace {
template <typename Map>
std::vector<std::string> keys(const Map& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}
}  // namespace

std::vector<std::string> Runtime::loader_formats() const { return keys(impl_->loaders); }
std::vector<std::string> Runtime::exporter_names() const { return keys(impl_->exporters); }
std::vector<std::string> Runtime::collector_names() const { return keys(impl_->collectors); }

std::pair<const KilnExporter*, Ref<Object>> Runtime::exporter(const std::string& name) const {
  auto it = impl_->exporters.find(name);
  if (it == impl_->exporters.end()) {
    throw NotFoundError(
        fmt::format("no exporter '{}'; available: {}", name, fmt::join(exporter_names(), ", ")));
  }
  return {static_cast<const KilnExporter*>(it->second.table), it->second.plugin};
}

std::pair<const KilnMetricCollector*, Ref<Object>> Runtime::collector(
    const std::string& name) const {
  auto it = impl_->collectors.find(name);
  if (it == impl_->collectors.end()) {
    const auto names = collector_names();
    throw NotFoundError(
        fmt::format("no metric collector '{}'; available: {}", name,
                    names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))));
  }
  return {static_cast<const KilnMetricCollector*>(it->second.table), it->second.plugin};
}

}  // namespace kiln
