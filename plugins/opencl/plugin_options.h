// SPDX-License-Identifier: Apache-2.0
// The opencl plugin's configuration: its options from the plugin set and the environment.
#ifndef KILN_PLUGINS_OPENCL_PLUGIN_OPTIONS_H_
#define KILN_PLUGINS_OPENCL_PLUGIN_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::opencl {

// Which kinds of OpenCL device the plugin offers (option device_type).
enum class DeviceTypeFilter { kAll, kGpu, kCpu, kAccelerator };
const char* to_string(DeviceTypeFilter filter);

// The default capacity of the in-memory program cache (built programs kept per plugin).
inline constexpr int64_t kDefaultMemoryCacheEntries = 64;
inline constexpr int64_t kMaxMemoryCacheEntries = 1 << 20;

// The resolved configuration.
struct PluginOptions {
  // Case-insensitive text a platform's name or vendor must contain; empty: every platform.
  std::string platform;
  // Case-insensitive text a device's name must contain; empty: every device.
  std::string device;
  DeviceTypeFilter device_type = DeviceTypeFilter::kAll;
  // Folder of the on-disk program cache; empty: no disk cache.
  std::string cache_dir;
  std::string cache_dir_source;  // "option cache_dir" or "KILN_OPENCL_CACHE_DIR", for logs
  // Appended to every program's build options (after the metadata's "build_options").
  std::string build_options;
  // Programs kept in memory (least recently used dropped first); 0 disables the memory cache.
  int64_t memory_cache_entries = kDefaultMemoryCacheEntries;
  std::vector<std::string> unknown;  // option keys this plugin does not know (warned about)
};

// Resolves the configuration from `options_json` (a JSON object text, borrowed; NULL or empty
// is "{}") and `env_cache_dir` (the value of KILN_OPENCL_CACHE_DIR; NULL when unset). The
// option cache_dir wins over the variable; an empty string in either place means "none".
// Throws kiln::sdk::Error(KILN_ERROR_VALUE) naming the option and its value for malformed
// JSON, a non-object, a value of the wrong type, an unknown device_type or a
// memory_cache_entries outside [0, kMaxMemoryCacheEntries].
PluginOptions resolve_options(const char* options_json, const char* env_cache_dir);

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_PLUGIN_OPTIONS_H_
