// SPDX-License-Identifier: Apache-2.0
// The perf plugin's entry point: negotiation, configuration and shutdown.
#include "kiln/sdk/plugin.hpp"
#include "kiln/c/kiln.h"
#include "plugin_state.h"

#ifndef KILN_PLUGIN_VERSION
#error "KILN_PLUGIN_VERSION must be defined by the build"
#endif

// Negotiates the ABI with the host and selects the events from `in->options_json`
// ({"events": [...]}; default: every known event). `in` is borrowed for the call; `out`
// (host-allocated) receives pointers owned by the plugin state until shutdown. Errors:
// KILN_ERROR_ABI for an incompatible host, KILN_ERROR_VALUE for a bad option (an unknown
// event lists the known ones). On error nothing is left for the host to release. Returns
// NULL without filling `out` when the host offers no usable services (no error can be
// created then). No counter is opened here: that happens in the collector's init.
// The host frees the state through the shutdown slot (`delete`) once every object made through
// the plugin is gone.
extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  using kiln::perf::PluginState;
  return kiln::sdk::negotiate_with_state<PluginState>(
      in, out, "perf", KILN_PLUGIN_VERSION, [](PluginState& state, const KilnNegotiateIn& offer) {
        state.configure(offer.options_json);
      });
}
