// The cpu plugin's entry point: negotiation, configuration and shutdown.
#include <memory>

#include "kiln/c/kiln.h"
#include "kiln/sdk/plugin.hpp"
#include "plugin_state.h"

namespace {

// The version reported to the host: the project version, as in the manifest (set by CMake).
#ifndef KILN_CPU_PLUGIN_VERSION
#error "KILN_CPU_PLUGIN_VERSION must be defined by the build"
#endif

// Frees the plugin state; called once by the host after every object made through the
// plugin is gone.
void shutdown(void* state) { delete static_cast<kiln::cpu::PluginState*>(state); }

}  // namespace

// Negotiates the ABI with the host and configures the plugin from `in->options_json` and
// KILN_NUM_THREADS. `in` is borrowed for the call; `out` (host-allocated) receives pointers
// owned by the plugin state until shutdown. Errors: KILN_ERROR_ABI for an incompatible host,
// KILN_ERROR_VALUE for a bad option or environment value (naming the source and value). On
// error nothing is left for the host to release. Returns NULL without filling `out` when the
// host offers no usable services (no error can be created then).
extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  std::unique_ptr<kiln::cpu::PluginState> state;
  try {
    state = std::make_unique<kiln::cpu::PluginState>();
  } catch (...) {
    // Before negotiate() there is no error factory; an unfilled `out` tells the host.
    return nullptr;
  }
  kiln::sdk::PluginDescription description{"cpu", KILN_CPU_PLUGIN_VERSION, state->components(),
                                           state.get(), &shutdown};
  description.configure = [&](const KilnNegotiateIn& offer) {
    state->configure(offer.host, offer.options_json);
  };
  if (KilnError* error = kiln::sdk::negotiate(in, out, description)) return error;
  if (out == nullptr || out->plugin_state != state.get()) return nullptr;  // no host services
  state.release();  // owned by the host's call of shutdown from now on
  return nullptr;
}
