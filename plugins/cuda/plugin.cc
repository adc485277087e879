// SPDX-License-Identifier: Apache-2.0
// The cuda plugin's entry point: negotiation, configuration and shutdown. Negotiation only
// reads the options: the driver is opened on the first device query (docs/backends/cuda.md).
#include "kiln/sdk/plugin.hpp"
#include "kiln/c/kiln.h"
#include "plugin_state.h"

#ifndef KILN_PLUGIN_VERSION
#error "KILN_PLUGIN_VERSION must be defined by the build"
#endif

// Negotiates the ABI and reads the options (`in->options_json`: driver_library,
// nvrtc_library, build_options). Errors: KILN_ERROR_ABI for an incompatible host,
// KILN_ERROR_VALUE for a bad option, naming it and its value; nothing is left to release then.
// The host frees the state through the shutdown slot (`delete`) once every object made through
// the plugin is gone.
extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  using kiln::cuda::PluginState;
  return kiln::sdk::negotiate_with_state<PluginState>(
      in, out, "cuda", KILN_PLUGIN_VERSION, [](PluginState& state, const KilnNegotiateIn& offer) {
        state.configure(offer.options_json);
      });
}
