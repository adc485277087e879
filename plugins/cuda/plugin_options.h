// SPDX-License-Identifier: Apache-2.0
// The cuda plugin's options, from its plugin-set entry (docs/backends/cuda.md).
#ifndef KILN_PLUGINS_CUDA_PLUGIN_OPTIONS_H_
#define KILN_PLUGINS_CUDA_PLUGIN_OPTIONS_H_

#include <string>
#include <vector>

namespace kiln::cuda {

// The default driver library: the driver's SONAME, found by the dynamic loader.
inline constexpr const char* kDefaultDriverLibrary = "libcuda.so.1";

struct PluginOptions {
  // The CUDA driver library to dlopen (a file name or a path).
  std::string driver_library = kDefaultDriverLibrary;
  // The NVRTC libraries to try, in order (default: NvrtcApi::default_libraries()).
  std::vector<std::string> nvrtc_libraries;
  // NVRTC options for every cuda_source module, before the module's own build_options.
  std::string build_options;
  std::vector<std::string> unknown;  // option keys this plugin does not know (warned about)
};

// Parses `options_json` (a JSON object text, borrowed; NULL or "" is "{}"). Keys:
// driver_library (non-empty string), nvrtc_library (non-empty string, or a list of them,
// tried in order), build_options (string of NVRTC options, quotes allowed). Throws
// kiln::sdk::Error (KILN_ERROR_VALUE) naming the option and its value for malformed JSON, a
// non-object, a wrong type or an empty library name, and for build_options that do not split
// (an unterminated quote).
PluginOptions parse_options(const char* options_json);

}  // namespace kiln::cuda

#endif  // KILN_PLUGINS_CUDA_PLUGIN_OPTIONS_H_
