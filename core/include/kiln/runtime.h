// Runtime: owns the loaded plugins and everything they provide (device backends, loaders,
// exporters, metric collectors). See docs/plugin-abi.md for discovery and search order.
#ifndef KILN_RUNTIME_H_
#define KILN_RUNTIME_H_

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/any.h"
#include "kiln/device.h"
#include "kiln/device_backend.h"
#include "kiln/module.h"

struct KilnExporter;
struct KilnMetricCollector;

namespace kiln {

// The kind a loader reports for a module package: a module made only of artifacts, whose
// host library the runtime loads with the loader for that library's format.
inline constexpr const char* kPackageKind = "kiln.package";

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

// How a Runtime finds plugins.
struct RuntimeOptions {
  // The plugin set YAML. Unset: $KILN_PLUGIN_SET, else <prefix>/share/kiln/plugins.yaml when
  // it exists, else none. An empty path means none. Without a plugin set every discovered
  // plugin loads.
  std::optional<std::filesystem::path> plugin_set;
  // Searched after the plugin set's search_paths and before $KILN_PLUGIN_PATH.
  std::vector<std::filesystem::path> search_paths;
  // Read KILN_PLUGIN_SET, KILN_PLUGIN_PATH, KILN_PLUGINS and KILN_PLUGINS_DISABLE.
  bool read_environment = true;
  // Search <prefix>/lib/kiln/plugins last, where <prefix> is libkiln's install prefix.
  bool search_install_prefix = true;
};

class Runtime {
 public:
  // Discovers and loads plugins. Never throws for a broken plugin (its status says why);
  // throws ConfigError for a malformed plugin set file.
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The process-wide default runtime, created with default options on first use.
  static Runtime& global();

  // Every plugin considered, in search order.
  const std::vector<PluginStatus>& plugins() const;
  // The directories searched for manifests, in order.
  const std::vector<std::filesystem::path>& search_paths() const;
  // The plugin set file used, if any.
  std::optional<std::filesystem::path> plugin_set_path() const;
  // Milliseconds spent in discovery and loading.
  double startup_ms() const;

  // The backend serving `device_type` (a DLPack code); NotFoundError naming the type and the
  // loaded backends when none does.
  Ref<DeviceBackend> backend(int32_t device_type) const;
  Ref<DeviceBackend> find_backend(int32_t device_type) const;  // null when none
  // Every backend with its devices (or why it has none).
  std::vector<BackendInfo> backends() const;

  // Loads a module through the loader for its file format.
  Module load_module(const std::filesystem::path& path);
  // File formats with a loader, sorted.
  std::vector<std::string> loader_formats() const;
  // The exporter named `name` (NotFoundError listing the others) and the plugin behind it.
  std::pair<const KilnExporter*, Ref<Object>> exporter(const std::string& name) const;
  std::vector<std::string> exporter_names() const;
  std::pair<const KilnMetricCollector*, Ref<Object>> collector(const std::string& name) const;
  std::vector<std::string> collector_names() const;

  struct Impl;

 private:
  Module load_package(Ref<ModuleObj> package, const std::filesystem::path& path);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln

#endif  // KILN_RUNTIME_H_
