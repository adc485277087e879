// SPDX-License-Identifier: Apache-2.0
// The cpu plugin's configuration: its options from the plugin set and the environment.
#ifndef KILN_PLUGINS_CPU_PLUGIN_OPTIONS_H_
#define KILN_PLUGINS_CPU_PLUGIN_OPTIONS_H_

#include <sched.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cpu {

// The largest thread count accepted; more is almost certainly a typo and would start that many
// worker threads.
inline constexpr int64_t kMaxThreads = 4096;

// The resolved configuration.
struct PluginOptions {
  int32_t num_threads = 1;           // the plugin's pool threads, caller included, >= 1
  std::string threads_source;        // where num_threads came from, for people
  std::vector<std::string> unknown;  // option keys this plugin does not know (warned about)
};

// Resolves the configuration from `options_json` (a JSON object text, borrowed; NULL is "{}"),
// `env_num_threads` (the value of KILN_NUM_THREADS, borrowed; NULL when unset) and
// `hardware_threads` (the default, described by `hardware_source`). The thread count is the option
// num_threads when > 0, else KILN_NUM_THREADS when set and > 0, else `hardware_threads`; 0 in
// either place means "default". Throws kiln::sdk::Error(KILN_ERROR_VALUE) naming the source and the
// value for malformed JSON, a non-object, a num_threads that is not an integer, negative or above
// kMaxThreads, and a KILN_NUM_THREADS that is not such an integer.
PluginOptions resolve_options(const char* options_json, const char* env_num_threads,
                              int32_t hardware_threads,
                              const std::string& hardware_source = "available CPUs");

// The CPUs this process may run on.
struct ProcessCpus {
  cpu_set_t set;         // valid when `known`
  bool known = false;    // false: no affinity mask could be read
  int32_t count = 1;     // CPUs in `set` (else std::thread::hardware_concurrency()), >= 1
  int32_t calling = 1;   // CPUs in the calling thread's own mask
  std::string describe;  // "the process's CPU affinity (2 CPUs)", for threads_source
};

// The union of the affinity masks of the process's threads (/proc/self/task), so that a
// thread that another runtime pinned (TVM pins its main thread to one CPU) does not narrow it;
// a taskset or a cgroup's cpuset narrows every thread and so the union too. Falls back to the
// calling thread's mask, then to std::thread::hardware_concurrency().
ProcessCpus process_cpus();

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_PLUGIN_OPTIONS_H_
