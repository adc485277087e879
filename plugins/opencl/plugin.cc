// The opencl plugin's entry point: negotiation, configuration and shutdown. Negotiation reads
// the options only; the OpenCL driver is initialised on the first device query.
#include <memory>

#include "kiln/c/kiln.h"
#include "kiln/sdk/plugin.hpp"
#include "plugin_state.h"

namespace {

#ifndef KILN_OPENCL_PLUGIN_VERSION
#error "KILN_OPENCL_PLUGIN_VERSION must be defined by the build"
#endif

// Releases everything the plugin made; called once by the host after every object made
// through the plugin is gone.
void shutdown(void* state) { delete static_cast<kiln::opencl::PluginState*>(state); }

}  // namespace

// Negotiates the ABI with the host and reads the options (`in->options_json`, borrowed) and
// KILN_OPENCL_CACHE_DIR. Errors: KILN_ERROR_ABI for an incompatible host, KILN_ERROR_VALUE for
// a bad option (naming it and its value); nothing is left for the host to release then.
// Returns NULL without filling `out` when the host offers no usable services.
extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  std::unique_ptr<kiln::opencl::PluginState> state;
  try {
    state = std::make_unique<kiln::opencl::PluginState>();
  } catch (...) {
    return nullptr;  // before negotiate() there is no error factory; an unfilled `out` says it
  }
  kiln::sdk::PluginDescription description{"opencl", KILN_OPENCL_PLUGIN_VERSION,
                                           state->components(), state.get(), &shutdown};
  description.configure = [&](const KilnNegotiateIn& offer) {
    state->configure(offer.options_json);
  };
  if (KilnError* error = kiln::sdk::negotiate(in, out, description)) return error;
  if (out == nullptr || out->plugin_state != state.get()) return nullptr;  // no host services
  state.release();  // owned by the host's call of shutdown from now on
  return nullptr;
}
