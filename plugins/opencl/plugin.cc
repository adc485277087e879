// SPDX-License-Identifier: Apache-2.0
// The opencl plugin's entry point: negotiation, configuration and shutdown. Negotiation reads
// the options only; the OpenCL driver is initialised on the first device query.
#include "kiln/sdk/plugin.hpp"
#include "kiln/c/kiln.h"
#include "plugin_state.h"

#ifndef KILN_PLUGIN_VERSION
#error "KILN_PLUGIN_VERSION must be defined by the build"
#endif

// Negotiates the ABI with the host and reads the options (`in->options_json`, borrowed) and
// KILN_OPENCL_CACHE_DIR. Errors: KILN_ERROR_ABI for an incompatible host, KILN_ERROR_VALUE for
// a bad option (naming it and its value); nothing is left for the host to release then.
// Returns NULL without filling `out` when the host offers no usable services.
// The host frees the state through the shutdown slot (`delete`) once every object made through
// the plugin is gone.
extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  using kiln::opencl::PluginState;
  return kiln::sdk::negotiate_with_state<PluginState>(
      in, out, "opencl", KILN_PLUGIN_VERSION, [](PluginState& state, const KilnNegotiateIn& offer) {
        state.configure(offer.options_json);
      });
}
