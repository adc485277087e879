// SPDX-License-Identifier: Apache-2.0
// The rocm plugin's entry point: negotiation, options and shutdown. The HIP runtime is not
// touched here; it is loaded on the first device query (see PluginState::driver()).
#include "kiln/sdk/plugin.hpp"
#include "kiln/c/kiln.h"
#include "plugin_state.h"

#ifndef KILN_PLUGIN_VERSION
#error "KILN_PLUGIN_VERSION must be defined by the build"
#endif

// Negotiates the ABI and reads the options from `in->options_json`. Errors: KILN_ERROR_ABI for
// an incompatible host, KILN_ERROR_VALUE for a bad option (naming it). On error nothing is left
// for the host to release.
// The host frees the state through the shutdown slot (`delete`) once every object made through
// the plugin is gone.
extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  using kiln::rocm::PluginState;
  return kiln::sdk::negotiate_with_state<PluginState>(
      in, out, "rocm", KILN_PLUGIN_VERSION, [](PluginState& state, const KilnNegotiateIn& offer) {
        state.configure(offer.host, offer.options_json);
      });
}
