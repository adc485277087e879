// SPDX-License-Identifier: Apache-2.0
// The package plugin's entry point: negotiation and the component list.
#include <nlohmann/json.hpp>

#include "kiln/c/kiln.h"
#include "kiln/sdk/plugin.hpp"
#include "so_exporter.h"
#include "tar_exporter.h"
#include "tar_loader.h"

namespace {

// The version reported to the host: the project version, as in the manifest (set by CMake).
#ifndef KILN_PLUGIN_VERSION
#error "KILN_PLUGIN_VERSION must be defined by the build"
#endif

// The component tables. They are constant and hold no per-negotiation state (`self` is
// unused or points to constant data), so one static set serves every Runtime that loads the
// plugin, and there is nothing to shut down.
const KilnExporter kTarExporter = kiln::package::make_tar_exporter();
const KilnExporter kSoExporter = kiln::package::make_so_exporter();
const KilnExporter kNdkExporter = kiln::package::make_ndk_exporter();
const KilnLoader kTarLoader = kiln::package::make_tar_loader();
const KilnComponent kComponents[] = {
    kiln::sdk::component(KILN_COMPONENT_EXPORTER, "tar", &kTarExporter),
    kiln::sdk::component(KILN_COMPONENT_EXPORTER, "so", &kSoExporter),
    kiln::sdk::component(KILN_COMPONENT_EXPORTER, "ndk", &kNdkExporter),
    kiln::sdk::component(KILN_COMPONENT_LOADER, "tar", &kTarLoader),
};

// Warns about every key of `options_json` (borrowed JSON text): the plugin has no options, and
// a misspelled one should not pass silently. Never throws: options cannot make it fail.
void warn_about_options(const char* options_json) {
  if (options_json == nullptr) return;
  const auto options = nlohmann::json::parse(options_json, nullptr, /*allow_exceptions=*/false);
  if (!options.is_object()) return;
  for (const auto& [key, value] : options.items()) {
    kiln::sdk::log(KILN_LOG_WARN, "ignoring unknown option '%s' (this plugin has no options)",
                   key.c_str());
  }
}

}  // namespace

// Negotiates the ABI with the host (kiln::sdk::negotiate: KILN_ERROR_ABI for an incompatible
// host) and reports the components: exporters "tar", "so", "ndk" and the loader "tar". `in` is
// borrowed for the call; `out` (host-allocated) receives pointers to static data. No state, no
// shutdown.
extern "C" KILN_EXPORT KilnError* kiln_plugin_negotiate(const KilnNegotiateIn* in,
                                                        KilnPluginInfo* out) {
  kiln::sdk::PluginDescription description{"package", KILN_PLUGIN_VERSION, kComponents};
  description.configure = [](const KilnNegotiateIn& offer) {
    try {
      warn_about_options(offer.options_json);
    } catch (...) {
      // Logging failed (out of memory); the options are ignored either way.
    }
  };
  return kiln::sdk::negotiate(in, out, description);
}
