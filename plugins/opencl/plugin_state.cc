#include "plugin_state.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "kiln/sdk/plugin.hpp"

namespace kiln::opencl {
namespace {

// Keeps the ICD loader (and with it the drivers it opened, whose threads may outlive this
// plugin's objects) loaded for the rest of the process, even after this plugin is unloaded.
void pin_icd_loader() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&clGetPlatformIDs), &info) != 0 && info.dli_fname != nullptr) {
    if (void* handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE)) {
      dlclose(handle);  // RTLD_NODELETE stays in force
    }
  }
}

}  // namespace

PluginState::PluginState()
    : device_table_(sdk::make_device_backend(this, kDLOpenCL)),
      components_{sdk::component(KILN_COMPONENT_DEVICE, "opencl", &device_table_)} {}

PluginState::~PluginState() {
  // The host releases every object before shutdown; what is left was leaked by a caller. The
  // registries own it: clearing them in this order releases kernels and modules, timers,
  // streams (finished first), then buffers, before the devices' contexts go.
  for (Kernel* k : kernels_) k->module = nullptr;
  handles_epoch_.fetch_add(1, std::memory_order_release);  // no launch may skip a lookup now
  kernels_.clear();
  modules_.clear();  // each module owns its kernels
  timers_.clear();
  if (cache_) cache_->clear();
  streams_.clear();
  buffers_.clear();
  cache_.reset();
  enumeration_.devices.clear();  // finishes the default queues, releases the contexts
}

void PluginState::configure(const char* options_json) {
  options_ = resolve_options(options_json, std::getenv("KILN_OPENCL_CACHE_DIR"));
  for (const std::string& key : options_.unknown) {
    sdk::log(KILN_LOG_WARN,
             "ignoring unknown option '%s' (known: platform, device, device_type, "
             "cache_dir, build_options, memory_cache_entries)",
             key.c_str());
  }
  cache_ = std::make_unique<ProgramCache>(options_.cache_dir, options_.memory_cache_entries);
  if (!options_.cache_dir.empty()) {
    sdk::log(KILN_LOG_DEBUG, "program cache folder %s (from %s)", options_.cache_dir.c_str(),
             options_.cache_dir_source.c_str());
  }
}

// ---- devices ----

const Enumeration& PluginState::enumeration() {
  std::call_once(enumerate_once_, [this] {
    pin_icd_loader();
    enumeration_ = enumerate_devices(options_);
    if (enumeration_.devices.empty()) {
      sdk::log(KILN_LOG_DEBUG, "no devices: %s", enumeration_.why_none.c_str());
    }
    for (const auto& d : enumeration_.devices) {
      sdk::log(KILN_LOG_DEBUG, "%s: %s", d->label().c_str(), d->version.c_str());
    }
  });
  return enumeration_;
}

void PluginState::require_devices() {
  const Enumeration& e = enumeration();
  if (e.devices.empty()) {
    throw sdk::Error(KILN_ERROR_UNAVAILABLE, "no OpenCL devices: " + e.why_none);
  }
}

DeviceRecord& PluginState::device(int32_t id) {
  require_devices();
  const auto& devices = enumeration_.devices;
  if (id < 0 || static_cast<size_t>(id) >= devices.size()) {
    const size_t n = devices.size();
    throw sdk::Error(
        KILN_ERROR_INDEX,
        "device id " + std::to_string(id) + " is out of range: the opencl backend has " +
            std::to_string(n) +
            (n == 1 ? " device (id 0)" : " devices (ids 0.." + std::to_string(n - 1) + ")"));
  }
  return *devices[static_cast<size_t>(id)];
}

}  // namespace kiln::opencl
