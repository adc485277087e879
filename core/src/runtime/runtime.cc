// SPDX-License-Identifier: Apache-2.0
// Runtime: the loaded plugins' components (backends, device-type names, exporters,
// collectors), the module format loaders, and the RPC sessions attached to it. Discovery and
// plugin loading live in core/src/plugin; the format loaders in module_formats.cc.
#include "kiln/runtime.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "kiln/error.h"
#include "kiln/logging.h"
#include "plugin/discovery.h"
#include "plugin/loaded_plugin.h"
#include "plugin/plugin_loader.h"
#include "runtime/module_formats.h"

namespace kiln {

namespace fs = std::filesystem;
using plugin::LoadedPlugin;

// The shared state every handle and every object made through the runtime holds; the
// DeviceContext they keep (retain()).
struct Runtime::Impl : DeviceContext, std::enable_shared_from_this<Runtime::Impl> {
  std::optional<fs::path> plugin_set_path;
  std::vector<fs::path> search_dirs;
  std::vector<PluginStatus> statuses;
  std::vector<Ref<LoadedPlugin>> plugins;
  DeviceTypeNames type_names;
  std::map<int32_t, Ref<DeviceBackend>> backends;  // by DLPack device type
  struct Component {
    const void* table;
    Ref<LoadedPlugin> plugin;
  };
  std::map<std::string, Component> loaders, exporters, collectors;
  ModuleLoaderRegistry module_loaders;
  double startup_ms = 0;

  mutable std::mutex remote_mu;
  std::map<int32_t, RemoteBackendLookup> remote_sessions;  // by session index
  int32_t next_remote_index = 0;

  // "; plugin 'x' would provide it but is disabled: <reason>" for each plugin not loaded whose
  // manifest provides `tag` ("device:cuda", "collector:papi"): what to append to a NotFoundError.
  std::string not_active_hint(const std::string& tag) const;
  // "; plugin 'y' may provide it, but its manifest could not be read: <error>" for each plugin
  // whose manifest did not parse (it declares nothing, so it may be what any name is missing).
  std::string unreadable_manifests_hint() const;

  // Adds `plugin`'s device backends, names and components; the reason when they conflict with
  // what is already there (then nothing is added).
  std::optional<std::string> add(const Ref<LoadedPlugin>& plugin);

  // DeviceContext (documented on Runtime).
  Ref<DeviceBackend> find_backend(int32_t device_type) const override;
  Ref<DeviceBackend> backend(int32_t device_type) const override;
  const DeviceTypeNames& device_types() const override { return type_names; }
  std::shared_ptr<const DeviceContext> retain() const override { return shared_from_this(); }
};

std::string Runtime::Impl::not_active_hint(const std::string& tag) const {
  std::string hint;
  for (const auto& s : statuses) {
    if (s.state == PluginStatus::State::kLoaded) continue;
    if (std::find(s.provides.begin(), s.provides.end(), tag) == s.provides.end()) continue;
    hint += fmt::format("; plugin '{}' would provide it but is {}: {}", s.name, to_string(s.state),
                        s.reason);
  }
  return hint + unreadable_manifests_hint();
}

std::string Runtime::Impl::unreadable_manifests_hint() const {
  std::string hint;
  for (const auto& s : statuses) {
    if (s.state != PluginStatus::State::kFailed || !s.provides.empty()) continue;
    hint += fmt::format("; plugin '{}' may provide it, but its manifest could not be read: {}",
                        s.name, s.reason);
  }
  return hint;
}

std::optional<std::string> Runtime::Impl::add(const Ref<LoadedPlugin>& plugin) {
  DeviceTypeNames names = type_names;
  for (size_t i = 0; i < plugin->devices.size(); ++i) {
    const int32_t code = plugin->devices[i]->dl_device_type;
    const std::string& name = plugin->device_names[i];
    // Codes from 128 up are RPC sessions' views of remote devices (type + (index + 1) * 128):
    // a backend there would be taken for one, and its devices named "remote0:...".
    if (code < 0 || code >= kRemoteDeviceMask) {
      return fmt::format(
          "plugin '{}' declares device type code {} ('{}'), outside the codes a plugin may "
          "serve: DLPack's (below {}) and vendor codes {} to {}; codes from {} up name the "
          "devices of RPC sessions (docs/plugin-abi.md §10.1)",
          plugin->name, code, name, kFirstVendorDeviceType, kFirstVendorDeviceType,
          kRemoteDeviceMask - 1, kRemoteDeviceMask);
    }
    try {
      names.add(name, code);
    } catch (const ValueError& e) {
      return e.what();
    }
    if (auto it = backends.find(code); it != backends.end()) {
      return fmt::format(
          "plugin '{}' declares device type code {} ('{}'), which plugin '{}' already serves "
          "(as '{}'); every vendor needs a code of its own in {} to {} (docs/plugin-abi.md "
          "§10.1, \"Reserving a device type code\")",
          plugin->name, code, name, it->second->plugin_name(), it->second->name(),
          kFirstVendorDeviceType, kRemoteDeviceMask - 1);
    }
  }
  // Discovery refuses clashes the manifests declare; these are ones only the loaded plugin
  // showed. Refused too, rather than settled by load order (DESIGN §3 rule 11).
  for (const auto& [kind, key, names_of, in] :
       {std::tuple{"loader", "loaders", &plugin->loader_names, &loaders},
        std::tuple{"exporter", "exporters", &plugin->exporter_names, &exporters},
        std::tuple{"collector", "collectors", &plugin->collector_names, &collectors}}) {
    for (const std::string& n : *names_of) {
      if (auto it = in->find(n); it != in->end()) {
        return fmt::format(
            "plugin '{}' provides {} '{}', which plugin '{}' already provides (undeclared in a "
            "manifest); declare it under provides: and choose under {}: in the plugin set",
            plugin->name, kind, n, it->second.plugin->name, key);
      }
    }
  }
  type_names = std::move(names);
  for (size_t i = 0; i < plugin->devices.size(); ++i) {
    const KilnDeviceBackend* table = plugin->devices[i].get();
    backends[table->dl_device_type] =
        make_object<DeviceBackend>(table, plugin->device_names[i], plugin->name, plugin);
  }
  // `accepted(i)` runs for each component added.
  auto add_all = [&](const std::vector<std::string>& names_of, const auto& tables,
                     std::map<std::string, Component>& into, auto&& accepted) {
    for (size_t i = 0; i < names_of.size(); ++i) {
      into[names_of[i]] = Component{tables[i].get(), plugin};
      accepted(i);
    }
  };
  add_all(plugin->loader_names, plugin->loaders, loaders,
          [&](size_t i) { register_plugin_loader(module_loaders, plugin, i); });
  add_all(plugin->exporter_names, plugin->exporters, exporters, [](size_t) {});
  add_all(plugin->collector_names, plugin->collectors, collectors, [](size_t) {});
  plugins.push_back(plugin);
  return std::nullopt;
}

namespace {

// Whether `planned` declares no device type (a loader, exporter or collector plugin) or one of
// `wanted` that the plugin set does not give to another plugin.
bool serves_any(const plugin::PlannedLoad& planned, const std::vector<std::string>& wanted) {
  const std::vector<std::string>& devices = planned.manifest.devices;
  if (devices.empty()) return true;
  return std::any_of(devices.begin(), devices.end(), [&](const std::string& type) {
    return planned.refused.count("device:" + type) == 0 &&
           std::find(wanted.begin(), wanted.end(), type) != wanted.end();
  });
}

}  // namespace

std::vector<DeclaredDeviceType> Runtime::declared_device_types(const RuntimeOptions& options) {
  const plugin::Discovery found = plugin::discover(options);
  std::map<std::string, DeclaredDeviceType> by_type;
  // The first entry of a type stays unless a selected plugin's comes later.
  const auto add = [&by_type](DeclaredDeviceType d) {
    auto [it, added] = by_type.emplace(d.type_name, d);
    if (!added && d.selected && !it->second.selected) it->second = std::move(d);
  };
  for (const plugin::PlannedLoad& planned : found.to_load) {
    for (const std::string& type : planned.manifest.devices) {
      const bool refused = planned.refused.count("device:" + type) != 0;
      add({type, planned.manifest.name, !refused,
           refused ? "the plugin set gives it to another plugin" : std::string()});
    }
  }
  std::set<size_t> planned;  // statuses of the plugins listed above
  for (const plugin::PlannedLoad& p : found.to_load) planned.insert(p.status);
  for (size_t i = 0; i < found.statuses.size(); ++i) {
    if (planned.count(i) != 0) continue;
    const PluginStatus& s = found.statuses[i];
    for (const std::string& p : s.provides) {
      if (p.rfind("device:", 0) == 0) {
        add({p.substr(7), s.name, false,
             fmt::format("plugin {}: {}", to_string(s.state), s.reason)});
      }
    }
    // As backends() lists it: a plugin-set entry named after a built-in type, never built.
    if (s.manifest.empty() && DeviceTypeNames::builtin().find(s.name)) {
      add({s.name, s.name, false, "not built: " + s.reason});
    }
  }
  std::vector<DeclaredDeviceType> out;
  out.reserve(by_type.size());
  for (auto& [type, d] : by_type) out.push_back(std::move(d));
  return out;
}

Runtime::Runtime(const RuntimeOptions& options) : impl_(std::make_shared<Impl>()) {
  const auto start = std::chrono::steady_clock::now();
  plugin::Discovery found = plugin::discover(options);
  impl_->plugin_set_path = std::move(found.plugin_set_path);
  impl_->search_dirs = std::move(found.search_dirs);
  impl_->statuses = std::move(found.statuses);
  for (const plugin::PlannedLoad& planned : found.to_load) {
    PluginStatus& status = impl_->statuses[planned.status];
    if (options.only_device_types && !serves_any(planned, *options.only_device_types)) {
      status.state = PluginStatus::State::kDisabled;
      status.reason =
          fmt::format("not loaded: it serves none of the device types asked for ({})",
                      options.only_device_types->empty()
                          ? std::string("none")
                          : fmt::format("{}", fmt::join(*options.only_device_types, ", ")));
      log(LogLevel::kDebug, "plugins", fmt::format("{}: {}", status.name, status.reason));
      continue;
    }
    Ref<LoadedPlugin> plugin = plugin::load_plugin(planned, status);
    if (!plugin) continue;
    if (std::optional<std::string> conflict = impl_->add(plugin)) {
      status.state = PluginStatus::State::kFailed;
      status.reason = *conflict;
      log(LogLevel::kDebug, "plugins", fmt::format("{}: failed: {}", status.name, *conflict));
    }
  }
  // Device types that plugins not loaded would provide: parse() then says why they are missing.
  for (const PluginStatus& s : impl_->statuses) {
    if (s.state == PluginStatus::State::kLoaded) continue;
    for (const std::string& provided : s.provides) {
      if (provided.rfind("device:", 0) != 0) continue;
      const std::string type = provided.substr(7);
      if (!impl_->type_names.find(type)) {
        impl_->type_names.add_missing_hint(type, impl_->not_active_hint(provided));
      }
    }
  }
  impl_->type_names.set_hint_for_any_missing(impl_->unreadable_manifests_hint());
  register_host_loaders(impl_->module_loaders);
  impl_->startup_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

Runtime::~Runtime() = default;

const std::vector<PluginStatus>& Runtime::plugins() const { return impl_->statuses; }
const std::vector<fs::path>& Runtime::search_paths() const { return impl_->search_dirs; }
std::optional<fs::path> Runtime::plugin_set_path() const { return impl_->plugin_set_path; }
double Runtime::startup_ms() const { return impl_->startup_ms; }
const DeviceTypeNames& Runtime::device_types() const { return impl_->type_names; }
std::shared_ptr<const DeviceContext> Runtime::retain() const { return impl_; }
Ref<DeviceBackend> Runtime::find_backend(int32_t device_type) const {
  return impl_->find_backend(device_type);
}
Ref<DeviceBackend> Runtime::backend(int32_t device_type) const {
  return impl_->backend(device_type);
}

Ref<DeviceBackend> Runtime::Impl::find_backend(int32_t device_type) const {
  if (device_type >= kRemoteDeviceMask) {
    const Device remote{device_type, 0};
    RemoteBackendLookup lookup;
    {
      std::lock_guard lock(remote_mu);
      auto it = remote_sessions.find(remote.session_index());
      if (it == remote_sessions.end()) return {};
      lookup = it->second;
    }
    return lookup(remote.server_device().type);
  }
  auto it = backends.find(device_type);
  return it == backends.end() ? Ref<DeviceBackend>() : it->second;
}

Ref<DeviceBackend> Runtime::Impl::backend(int32_t device_type) const {
  if (auto b = find_backend(device_type)) return b;
  if (device_type >= kRemoteDeviceMask) {
    const Device remote{device_type, 0};
    throw NotFoundError(
        fmt::format("device type {} belongs to RPC session {}, which is closed or was never opened "
                    "with this runtime",
                    device_type, remote.session_index()));
  }
  auto name = type_names.name_of(device_type);
  std::vector<std::string> loaded;
  for (const auto& [code, b] : backends) loaded.push_back(b->name());
  const std::string hint = name ? not_active_hint("device:" + *name) : std::string();
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
  // Device types no loaded plugin serves but one would: a plugin that is disabled or failed
  // and says it provides "device:<type>", or one the plugin set names that was not built (no
  // manifest) whose name is a device type Kiln knows ("rocm" in a build without HIP). Listed
  // with no devices and the reason, so that no backend vanishes without a word.
  const auto served = [&out](const std::string& type) {
    return std::any_of(out.begin(), out.end(),
                       [&type](const BackendInfo& b) { return b.type_name == type; });
  };
  for (const PluginStatus& s : impl_->statuses) {
    if (s.state == PluginStatus::State::kLoaded) continue;
    std::vector<std::string> types;
    for (const std::string& p : s.provides) {
      if (p.rfind("device:", 0) == 0) types.push_back(p.substr(7));
    }
    const bool unbuilt = s.manifest.empty() && DeviceTypeNames::builtin().find(s.name);
    if (unbuilt) types.push_back(s.name);
    for (const std::string& type : types) {
      if (served(type)) continue;
      BackendInfo info;
      info.type_name = type;
      info.plugin = s.name;
      info.why_none = unbuilt ? "not built: " + s.reason
                              : fmt::format("plugin {}: {}", to_string(s.state), s.reason);
      out.push_back(std::move(info));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const BackendInfo& a, const BackendInfo& b) { return a.type_name < b.type_name; });
  return out;
}

Module Runtime::load_module(const fs::path& path, const ModuleLoadOptions& options) const {
  try {
    return impl_->module_loaders.load(path, *this, options);
  } catch (const NotFoundError& e) {
    // No loader for the file's format: name the plugins that would load it and why they are
    // not active. Other not-found errors (a missing file) pass unchanged.
    const std::string format = path.extension().string().substr(path.has_extension() ? 1 : 0);
    const auto formats = loader_formats();
    if (format.empty() || std::find(formats.begin(), formats.end(), format) != formats.end()) {
      throw;
    }
    const std::string hint = impl_->not_active_hint("loader:" + format);
    if (hint.empty()) throw;
    throw NotFoundError(e.what() + hint);
  }
}

const ModuleLoaderRegistry& Runtime::module_loaders() const { return impl_->module_loaders; }

std::vector<std::string> Runtime::loader_formats() const { return impl_->module_loaders.formats(); }

namespace {
template <typename Map>
std::vector<std::string> keys(const Map& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}
}  // namespace

std::vector<std::string> Runtime::exporter_names() const { return keys(impl_->exporters); }
std::vector<std::string> Runtime::collector_names() const { return keys(impl_->collectors); }

std::pair<const KilnExporter*, Ref<Object>> Runtime::exporter(const std::string& name) const {
  auto it = impl_->exporters.find(name);
  if (it == impl_->exporters.end()) {
    throw NotFoundError(fmt::format("no exporter '{}'; available: {}{}", name,
                                    fmt::join(exporter_names(), ", "),
                                    impl_->not_active_hint("exporter:" + name)));
  }
  return {static_cast<const KilnExporter*>(it->second.table), it->second.plugin};
}

std::string Runtime::not_active_hint(const std::string& provides) const {
  return impl_->not_active_hint(provides);
}

std::pair<const KilnMetricCollector*, Ref<Object>> Runtime::collector(
    const std::string& name) const {
  auto it = impl_->collectors.find(name);
  if (it == impl_->collectors.end()) {
    const auto names = collector_names();
    throw NotFoundError(
        fmt::format("no metric collector '{}'; available: {}{}", name,
                    names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")),
                    impl_->not_active_hint("collector:" + name)));
  }
  return {static_cast<const KilnMetricCollector*>(it->second.table), it->second.plugin};
}

int32_t Runtime::attach_remote_session(RemoteBackendLookup backend_of) {
  std::lock_guard lock(impl_->remote_mu);
  // A remote type is server type + (index + 1) * 128 and must stay an int32.
  if (impl_->next_remote_index >= (INT32_MAX / kRemoteDeviceMask) - 1) {
    throw RuntimeError("this runtime has opened too many RPC sessions to number another");
  }
  const int32_t index = impl_->next_remote_index++;
  impl_->remote_sessions.emplace(index, std::move(backend_of));
  return index;
}

void Runtime::detach_remote_session(int32_t index) noexcept {
  std::lock_guard lock(impl_->remote_mu);
  impl_->remote_sessions.erase(index);
}

}  // namespace kiln
