// The perf plugin's entry point: negotiation, configuration and shutdown.
#include <memory>

#include "kiln/c/kiln.h"
#include "kiln/sdk/plugin.hpp"
#include "plugin_state.h"

namespace {

// The version reported to the host: the project version, as in the manifest (set by CMake).
#ifndef KILN_PERF_PLUGIN_VERSION
#error "KILN_PERF_PLUGIN_VERSION must be defined by the build"
#endif

// Frees the plugin state; called once by the host after every object made through the
// plugin (every collector reference, hence every collector state) is gone.
void shutdown(void* state) { delete static_cast<kiln::perf::PluginState*>(state); }

}  // namespace

// Negotiates the ABI with the host and selects the events from `in->options_json`
// ({"events": [...]}; default: every known event). `in` is borrowed for the call; `out`
// (host-allocated) receives pointers owned by the plugin state until shutdown. Errors:
// KILN_ERROR_ABI for an incompatible host, KILN_ERROR_VALUE for a bad option (an unknown
// event lists the known ones). On error nothing is left for the host to release. Returns
// NULL without filling `out` when the host offers no usable services (no error can be
// created then). No counter is opened here: that happens in the collector's init.
extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  std::unique_ptr<kiln::perf::PluginState> state;
  try {
    state = std::make_unique<kiln::perf::PluginState>();
  } catch (...) {
    // Before negotiate() there is no error factory; an unfilled `out` tells the host.
    return nullptr;
  }
  kiln::sdk::PluginDescription description{"perf", KILN_PERF_PLUGIN_VERSION, state->components(),
                                           state.get(), &shutdown};
  description.configure = [&](const KilnNegotiateIn& offer) {
    state->configure(offer.options_json);
  };
  if (KilnError* error = kiln::sdk::negotiate(in, out, description)) return error;
  if (out == nullptr || out->plugin_state != state.get()) return nullptr;  // no host services
  state.release();  // owned by the host's call of shutdown from now on
  return nullptr;
}
