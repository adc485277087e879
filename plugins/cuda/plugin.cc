// The cuda plugin's entry point: negotiation, configuration and shutdown. Negotiation only
// reads the options: the driver is opened on the first device query (docs/backends/cuda.md).
#include <memory>

#include "kiln/c/kiln.h"
#include "kiln/sdk/plugin.hpp"
#include "plugin_state.h"

namespace {

#ifndef KILN_CUDA_PLUGIN_VERSION
#error "KILN_CUDA_PLUGIN_VERSION must be defined by the build"
#endif

// Frees the plugin state, releasing the primary contexts it retained; called once by the host
// after every object made through the plugin is gone.
void shutdown(void* state) { delete static_cast<kiln::cuda::PluginState*>(state); }

}  // namespace

// Negotiates the ABI and reads the options (`in->options_json`: driver_library,
// nvrtc_library, build_options). Errors: KILN_ERROR_ABI for an incompatible host,
// KILN_ERROR_VALUE for a bad option, naming it and its value; nothing is left to release then.
extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  std::unique_ptr<kiln::cuda::PluginState> state;
  try {
    state = std::make_unique<kiln::cuda::PluginState>();
  } catch (...) {
    return nullptr;  // no error factory yet; an unfilled `out` tells the host
  }
  kiln::sdk::PluginDescription description{"cuda", KILN_CUDA_PLUGIN_VERSION, state->components(),
                                           state.get(), &shutdown};
  description.configure = [&](const KilnNegotiateIn& offer) {
    state->configure(offer.options_json);
  };
  if (KilnError* error = kiln::sdk::negotiate(in, out, description)) return error;
  if (out == nullptr || out->plugin_state != state.get()) return nullptr;  // no host services
  state.release();  // owned by the host's call of shutdown from now on
  return nullptr;
}
