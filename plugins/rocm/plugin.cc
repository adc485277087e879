// The rocm plugin's entry point: negotiation, options and shutdown. The HIP runtime is not
// touched here; it is loaded on the first device query (see PluginState::driver()).
#include <memory>

#include "kiln/c/kiln.h"
#include "kiln/sdk/plugin.hpp"
#include "plugin_state.h"

namespace {

#ifndef KILN_ROCM_PLUGIN_VERSION
#error "KILN_ROCM_PLUGIN_VERSION must be defined by the build"
#endif

// Frees the plugin state after every object made through the plugin is gone. The HIP runtime
// and hiprtc stay loaded (they are never dlclosed).
void shutdown(void* state) { delete static_cast<kiln::rocm::PluginState*>(state); }

}  // namespace

// Negotiates the ABI and reads the options from `in->options_json`. Errors: KILN_ERROR_ABI for
// an incompatible host, KILN_ERROR_VALUE for a bad option (naming it). On error nothing is left
// for the host to release.
extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  std::unique_ptr<kiln::rocm::PluginState> state;
  try {
    state = std::make_unique<kiln::rocm::PluginState>();
  } catch (...) {
    return nullptr;  // no error factory yet; an unfilled `out` tells the host
  }
  kiln::sdk::PluginDescription description{"rocm", KILN_ROCM_PLUGIN_VERSION, state->components(),
                                           state.get(), &shutdown};
  description.configure = [&](const KilnNegotiateIn& offer) {
    state->configure(offer.host, offer.options_json);
  };
  if (KilnError* error = kiln::sdk::negotiate(in, out, description)) return error;
  if (out == nullptr || out->plugin_state != state.get()) return nullptr;
  state.release();  // owned by the host's call of shutdown from now on
  return nullptr;
}
