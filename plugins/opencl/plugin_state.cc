// SPDX-License-Identifier: Apache-2.0
// The opencl plugin's state: configuration and the composition of its concepts.
#include "plugin_state.h"

#include <cstdlib>
#include <string>

#include "kiln/sdk/plugin.hpp"

namespace kiln::opencl {

PluginState::PluginState()
    : device_table_(make_device_table()),
      components_{sdk::component(KILN_COMPONENT_DEVICE, "opencl", &device_table_)} {}

PluginState::~PluginState() {
  // The host releases every object before shutdown; what is left was leaked by a caller and is
  // released by its owner. Explicit, in reverse dependency order (as the members would go).
  launcher_.reset();
  modules_.reset();  // kernels and modules
  timers_.reset();
  programs_.reset();  // the programs cached in memory
  memory_.reset();    // buffers
  queues_.reset();    // streams (finished first), then the default queues
  devices_.reset();   // the contexts
}

void PluginState::configure(const char* options_json) {
  options_ = resolve_options(options_json, std::getenv("KILN_OPENCL_CACHE_DIR"));
  for (const std::string& key : options_.unknown) {
    sdk::log(KILN_LOG_WARN,
             "ignoring unknown option '%s' (known: platform, device, device_type, "
             "cache_dir, build_options, memory_cache_entries)",
             key.c_str());
  }
  if (!options_.cache_dir.empty()) {
    sdk::log(KILN_LOG_DEBUG, "program cache folder %s (from %s)", options_.cache_dir.c_str(),
             options_.cache_dir_source.c_str());
  }
  // None of these constructors calls OpenCL: the registry enumerates on first use.
  devices_.emplace(options_);
  queues_.emplace(*devices_);
  memory_.emplace(*devices_, *queues_);
  programs_.emplace(options_.cache_dir, options_.memory_cache_entries);
  timers_.emplace(*devices_, *queues_);
  modules_.emplace(*devices_, *programs_, options_.build_options);
  launcher_.emplace(*devices_, *queues_, *memory_, *modules_);
}

}  // namespace kiln::opencl
