// SPDX-License-Identifier: Apache-2.0
// Loading one plugin: dlopen, negotiation, component validation.
#include "plugin/plugin_loader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "ffi/error_object.h"
#include "kiln/logging.h"
#include "kiln/sdk/abi.hpp"
#include "kiln/version.h"
#include "plugin/copy_table.h"

namespace kiln::plugin {

namespace {

void debug_plugins(const std::string& message) { log(LogLevel::kDebug, "plugins", message); }

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

// Thrown inside loading to mark the plugin failed with a reason.
struct LoadFailure {
  std::string reason;
};

// Refuses a component table smaller than its 1.0 layout, naming the struct and component.
template <typename Table>
void check_table(const void* table, const char* type, const std::string& name) {
  const std::string label = fmt::format("{} '{}'", type, name);
  if (std::string why = sdk::check_struct<Table>(table, label.c_str()); !why.empty()) {
    throw LoadFailure{why};
  }
}

}  // namespace

Ref<LoadedPlugin> load_plugin(const PlannedLoad& planned, PluginStatus& status) {
  const PluginManifest& m = planned.manifest;
  const std::string& options_json = planned.options_json;
  const std::set<std::string>& refused = planned.refused;
  auto is_refused = [&](const char* tag, const std::string& name) {
    return refused.count(fmt::format("{}:{}", tag, name)) > 0;
  };
  Ref<LoadedPlugin> loaded;
  const auto start = std::chrono::steady_clock::now();
  try {
    debug_plugins(fmt::format("{}: dlopen {}", m.name, m.library.string()));
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
    debug_plugins(fmt::format("{}: negotiating (host ABI {}, options {})", m.name, abi_version(),
                              options_json));
    if (KilnError* err = entry(&in, &info)) {
      throw LoadFailure{fmt::format("negotiation refused: {}", ffi::release_error(err))};
    }
    if (info.name == nullptr || info.version == nullptr) {
      throw LoadFailure{"the entry point returned success without describing the plugin"};
    }
    plugin->info = info;  // from here on, shutdown runs when `plugin` goes away
    status.abi = fmt::format("{}.{}", info.abi_major, info.abi_minor);
    if (info.abi_major != KILN_ABI_VERSION_MAJOR || info.abi_minor > KILN_ABI_VERSION_MINOR) {
      throw LoadFailure{fmt::format(
          "plugin answered ABI {}.{}; this host speaks ABI {}{}", info.abi_major, info.abi_minor,
          abi_version(), info.abi_major == KILN_ABI_VERSION_MAJOR ? ": upgrade Kiln" : "")};
    }
    if (m.name != info.name) {
      throw LoadFailure{fmt::format("the plugin calls itself '{}' but its manifest says '{}'",
                                    info.name, m.name)};
    }
    status.version = info.version;
    // Read with the first element's struct_size as the stride (docs/plugin-abi.md §6.5), so a
    // plugin built against a later minor, whose components are longer, loads here.
    const sdk::StridedArray<KilnComponent> components(info.components, info.num_components);
    if (std::string why = components.check("KilnComponent"); !why.empty()) {
      throw LoadFailure{"the plugin's component list is malformed: " + why};
    }

    std::set<std::string> declared_devices(m.devices.begin(), m.devices.end());
    for (size_t i = 0; i < components.size(); ++i) {
      const KilnComponent c = components[i];
      const std::string name = c.name != nullptr ? c.name : "";
      if (name.empty() || c.table == nullptr) {
        throw LoadFailure{fmt::format("component #{} has no name or no table", i)};
      }
      switch (c.kind) {
        case KILN_COMPONENT_DEVICE: {
          check_table<KilnDeviceBackend>(c.table, "KilnDeviceBackend", name);
          if (!declared_devices.count(name)) {
            log(LogLevel::kWarn, m.name,
                fmt::format("ignoring device type '{}': not declared in {}", name,
                            m.manifest_path.string()));
            continue;
          }
          if (is_refused("device", name)) continue;
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
          if (is_refused("loader", name)) break;  // the plugin set chose another plugin
          check_table<KilnLoader>(c.table, "KilnLoader", name);
          auto table = copy_table<KilnLoader>(c.table);
          if (table->load_file == nullptr) {
            throw LoadFailure{fmt::format("loader '{}' lacks the required slot 'load_file'", name)};
          }
          plugin->loader_names.push_back(name);
          plugin->loaders.push_back(std::move(table));
          break;
        }
        case KILN_COMPONENT_EXPORTER: {
          if (is_refused("exporter", name)) break;  // the plugin set chose another plugin
          check_table<KilnExporter>(c.table, "KilnExporter", name);
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
          if (is_refused("collector", name)) break;  // the plugin set chose another plugin
          check_table<KilnMetricCollector>(c.table, "KilnMetricCollector", name);
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
      if (is_refused("device", d)) continue;
      if (std::find(plugin->device_names.begin(), plugin->device_names.end(), d) ==
          plugin->device_names.end()) {
        throw LoadFailure{
            fmt::format("the manifest declares device type '{}' but the plugin "
                        "provides no such backend",
                        d)};
      }
    }

    status.state = PluginStatus::State::kLoaded;
    status.reason.clear();
    debug_plugins(fmt::format("{}: loaded ({} {})", m.name, info.name, info.version));
    loaded = std::move(plugin);
  } catch (const LoadFailure& f) {
    status.state = PluginStatus::State::kFailed;
    status.reason = f.reason;
    log(LogLevel::kDebug, "plugins", fmt::format("{}: failed: {}", m.name, f.reason));
  }
  status.load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

}  // namespace kiln::plugin
