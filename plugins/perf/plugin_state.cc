// SPDX-License-Identifier: Apache-2.0
#include "plugin_state.h"

#include <string>

#include "kiln/sdk/plugin.hpp"
#include "perf_collector.h"
#include "plugin_options.h"

namespace kiln::perf {

PluginState::PluginState()
    : collector_(make_perf_collector(this)),
      components_{sdk::component(KILN_COMPONENT_COLLECTOR, "perf", &collector_)} {}

void PluginState::configure(const char* options_json) {
  PluginOptions options = resolve_options(options_json);
  for (const std::string& key : options.unknown) {
    sdk::log(KILN_LOG_WARN, "ignoring unknown option '%s' (the only option is 'events')",
             key.c_str());
  }
  events_ = std::move(options.events);
}

}  // namespace kiln::perf
