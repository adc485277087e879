// SPDX-License-Identifier: Apache-2.0
// Runtime: owns the loaded plugins and everything they provide (device backends, loaders,
// exporters, metric collectors). See docs/plugin-abi.md for discovery and search order.
#ifndef KILN_RUNTIME_H_
#define KILN_RUNTIME_H_

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/any.h"
#include "kiln/device.h"
#include "kiln/device_backend.h"
#include "kiln/device_context.h"
#include "kiln/module.h"
#include "kiln/module_loader.h"
#include "kiln/plugin_discovery.h"

struct KilnExporter;
struct KilnMetricCollector;

namespace kiln {

// One device of a backend with its attributes.
struct DeviceInfo {
  Device device;
  std::vector<std::pair<std::string, Any>> attributes;
};

// One device backend: its devices, or why it has none.
struct BackendInfo {
  std::string type_name;
  std::string plugin;
  std::vector<DeviceInfo> devices;
  std::string why_none;  // set when `devices` is empty
};

// A device type a plugin declares in its manifest, as discovery sees it: nothing is loaded.
struct DeclaredDeviceType {
  std::string type_name;
  std::string plugin;
  // The plugin would be loaded to serve it (selected, its manifest and library in order, the
  // type not given to another plugin by the plugin set). Loading may still fail.
  bool selected = false;
  std::string why_not;  // set when !selected: "plugin disabled: ...", "not built: ..."
};

// The explicit context of everything Kiln does: the loaded plugins and what they provide
// (device backends and their type names, module loaders, exporters, metric collectors), the
// module format loaders, and the RPC sessions whose remote devices it serves. Library code
// takes a Runtime (or the DeviceContext it is) from its caller; nothing in the library reaches
// a process-wide default (see global()).
//
// Lifetime: a Runtime is a handle to shared state (as IREE's objects retain what they were made
// from). Copies share it; the modules, VMs, evaluators, profilers and RPC sessions made through
// it keep it alive (DeviceContext::retain), as tensors and device memory keep their backend.
// The plugins are unloaded when the last handle and the last such object are gone, so dropping
// the user's Runtime first is safe. Thread safety: after construction every member may be
// called concurrently.
class Runtime : public DeviceContext {
 public:
  // Discovers and loads plugins. Never throws for a broken plugin (its status says why);
  // throws ConfigError for a malformed plugin set file.
  explicit Runtime(const RuntimeOptions& options = {});
  ~Runtime() override;
  // Another handle to the same runtime.
  Runtime(const Runtime&) = default;
  Runtime& operator=(const Runtime&) = default;

  // A process-wide Runtime with default options, created on first use and never destroyed.
  // For callers at the API edge who want one: the convenience overloads that take no runtime
  // (Module::load(path), Tensor::empty(shape, dtype, device), local_run(mod, ...), ...) use it,
  // and are all defined in one file (core/src/api_defaults.cc). Library code never calls it.
  static Runtime& global();

  // Every plugin considered, in search order.
  const std::vector<PluginStatus>& plugins() const;
  // The directories searched for manifests, in order.
  const std::vector<std::filesystem::path>& search_paths() const;
  // The plugin set file used, if any.
  std::optional<std::filesystem::path> plugin_set_path() const;
  // Milliseconds spent in discovery and loading.
  double startup_ms() const;

  // DeviceContext: backends by DLPack device type (remote types through their session), with
  // NotFoundError naming the loaded backends (and why a plugin that would serve it is not
  // loaded); the built-in device-type names plus those of the loaded plugins.
  Ref<DeviceBackend> backend(int32_t device_type) const override;
  Ref<DeviceBackend> find_backend(int32_t device_type) const override;
  const DeviceTypeNames& device_types() const override;
  // The runtime's shared state, as a DeviceContext that keeps it alive.
  std::shared_ptr<const DeviceContext> retain() const override;
  // Every backend with its devices (or why it has none), and every device type a plugin would
  // serve but does not: disabled or failed ("plugin disabled: ..."), or named by the plugin set
  // but not built ("not built: ..."), with no devices.
  std::vector<BackendInfo> backends() const;

  // Every device type the plugins `options` lead to would provide, from their manifests and the
  // plugin set alone: no plugin is loaded and no driver started, so a tool can list device
  // types, or choose Runtime::only_device_types, without touching devices. Sorted by type name,
  // one entry per type (the selected plugin's, when one is). Includes the types of plugins that
  // are disabled or failed in discovery (with why), and plugin-set entries named after a
  // built-in device type that were not built. Throws ConfigError for a malformed plugin set.
  static std::vector<DeclaredDeviceType> declared_device_types(const RuntimeOptions& options = {});

  // Loads a module through the format loader for its file (ModuleLoaderRegistry::load).
  Module load_module(const std::filesystem::path& path,
                     const ModuleLoadOptions& options = {}) const;
  // The format loaders: plugins' loaders, VM executables, device code.
  const ModuleLoaderRegistry& module_loaders() const;
  // File formats some loader reads, sorted.
  std::vector<std::string> loader_formats() const;
  // The exporter named `name` (NotFoundError listing the others) and the plugin behind it.
  std::pair<const KilnExporter*, Ref<Object>> exporter(const std::string& name) const;
  std::vector<std::string> exporter_names() const;
  std::pair<const KilnMetricCollector*, Ref<Object>> collector(const std::string& name) const;
  std::vector<std::string> collector_names() const;
  // "; plugin 'x' would provide it but is disabled: <reason>" for each plugin not loaded whose
  // manifest declares `provides` ("device:cuda", "loader:so", "exporter:x", "collector:papi");
  // empty when none. Appended to not-found errors so they say how to get the component.
  std::string not_active_hint(const std::string& provides) const;

  // RPC client sessions register here so that their remote devices (kiln/device.h
  // kRemoteDeviceMask) resolve through this runtime. `backend_of` maps a server device type to
  // the session's backend for it (null once the session is gone). Returns the session's index
  // (never reused by this runtime); detach_remote_session forgets it.
  using RemoteBackendLookup = std::function<Ref<DeviceBackend>(int32_t server_type)>;
  int32_t attach_remote_session(RemoteBackendLookup backend_of);
  void detach_remote_session(int32_t index) noexcept;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace kiln

#endif  // KILN_RUNTIME_H_
