// SPDX-License-Identifier: Apache-2.0
// The rocm plugin's options from the plugin set (docs/backends/rocm.md).
#ifndef KILN_PLUGINS_ROCM_PLUGIN_OPTIONS_H_
#define KILN_PLUGINS_ROCM_PLUGIN_OPTIONS_H_

#include <string>
#include <vector>

namespace kiln::rocm {

struct PluginOptions {
  // The HIP runtime to dlopen; "" = libamdhip64.so.6, then .so.5, then .so.
  std::string hip_library;
  // The library with hiprtc; "" = libhiprtc.so.6, libhiprtc.so, libamdhip64.so.5, libamdhip64.so.
  std::string hiprtc_library;
  // Options added to every hiprtc compile of a hip_source module (after the metadata's
  // build_options), e.g. ["-O3"].
  std::vector<std::string> compile_options;
  // Option keys this plugin does not know (logged as warnings).
  std::vector<std::string> unknown;
};

// Parses `options_json` (a JSON object text, borrowed; NULL or "" is "{}"). Throws
// kiln::sdk::Error(KILN_ERROR_VALUE) naming the option and its value for malformed JSON, a
// non-object, or a value of the wrong type (hip_library and hiprtc_library: strings;
// compile_options: a list of strings without --gpu-architecture / --offload-arch).
PluginOptions parse_plugin_options(const char* options_json);

}  // namespace kiln::rocm

#endif  // KILN_PLUGINS_ROCM_PLUGIN_OPTIONS_H_
