// The cpu plugin's configuration: its options from the plugin set and the environment.
#ifndef KILN_PLUGINS_CPU_PLUGIN_OPTIONS_H_
#define KILN_PLUGINS_CPU_PLUGIN_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cpu {

// The largest thread count accepted; more is almost certainly a typo and would make oneTBB
// reserve that many arena slots.
inline constexpr int64_t kMaxThreads = 4096;

// The resolved configuration.
struct PluginOptions {
  int32_t num_threads = 1;           // size of the plugin's task arena, >= 1
  std::string threads_source;        // where num_threads came from, for the log
  std::vector<std::string> unknown;  // option keys this plugin does not know (warned about)
};

// Resolves the configuration from `options_json` (a JSON object text, borrowed; NULL is "{}"),
// `env_num_threads` (the value of KILN_NUM_THREADS, borrowed; NULL when unset) and
// `hardware_threads` (the default). The thread count is the option num_threads when > 0, else
// KILN_NUM_THREADS when set and > 0, else `hardware_threads`; 0 in either place means
// "default". Throws kiln::sdk::Error(KILN_ERROR_VALUE) naming the source and the value for
// malformed JSON, a non-object, a num_threads that is not an integer, negative or above
// kMaxThreads, and a KILN_NUM_THREADS that is not such an integer.
PluginOptions resolve_options(const char* options_json, const char* env_num_threads,
                              int32_t hardware_threads);

// The number of CPUs this process may run on (its affinity mask), or
// std::thread::hardware_concurrency() when the mask is unavailable; at least 1.
int32_t available_cpus();

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_PLUGIN_OPTIONS_H_
