// SPDX-License-Identifier: Apache-2.0
// The cpu plugin's entry point: negotiation, configuration and shutdown.
#include "kiln/sdk/plugin.hpp"
#include "kiln/c/kiln.h"
#include "plugin_state.h"

#ifndef KILN_PLUGIN_VERSION
#error "KILN_PLUGIN_VERSION must be defined by the build"
#endif

// Negotiates the ABI with the host and configures the plugin from `in->options_json` and
// KILN_NUM_THREADS. `in` is borrowed for the call; `out` (host-allocated) receives pointers
// owned by the plugin state until shutdown. Errors: KILN_ERROR_ABI for an incompatible host,
// KILN_ERROR_VALUE for a bad option or environment value (naming the source and value). On
// error nothing is left for the host to release. Returns NULL without filling `out` when the
// host offers no usable services (no error can be created then).
// The host frees the state through the shutdown slot (`delete`) once every object made through
// the plugin is gone.
extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  using kiln::cpu::PluginState;
  return kiln::sdk::negotiate_with_state<PluginState>(
      in, out, "cpu", KILN_PLUGIN_VERSION, [](PluginState& state, const KilnNegotiateIn& offer) {
        state.configure(offer.host, offer.options_json);
      });
}
