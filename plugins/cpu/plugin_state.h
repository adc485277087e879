// SPDX-License-Identifier: Apache-2.0
// Everything the cpu plugin owns between negotiation and shutdown.
#ifndef KILN_PLUGINS_CPU_PLUGIN_STATE_H_
#define KILN_PLUGINS_CPU_PLUGIN_STATE_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "cpu_device.h"
#include "cpu_info.h"
#include "cpu_pool.h"
#include "kiln/c/kiln.h"
#include "kiln/sdk/support/kernel_library.hpp"
#include "task_team.h"

namespace kiln::cpu {

// The plugin's state: configuration, its CPU engine (one pool of threads that SDK kernels'
// parallel_for and the task team TVM-compiled parallel loops both run on), the component tables and
// the kernel environments of loaded libraries. Created by kiln_plugin_negotiate and destroyed by
// the plugin's shutdown; every table's `self` points here. Not copyable: the tables hold its
// address.
class PluginState {
 public:
  // Builds the component tables; configure() must run before any of them is used.
  PluginState();
  PluginState(const PluginState&) = delete;
  PluginState& operator=(const PluginState&) = delete;
  // Stops and joins the pool's workers (the members' destructors), so that the plugin can be
  // unloaded safely.
  ~PluginState() = default;

  // Resolves the options (`options_json`, borrowed JSON text) and KILN_NUM_THREADS, and
  // creates the pool (its workers start on the first launch that needs them). `host` is borrowed
  // and must outlive this object. Throws kiln::sdk::Error(KILN_ERROR_VALUE) naming the bad source
  // and value.
  void configure(const KilnHostServices* host, const char* options_json);

  // The host's services (borrowed).
  const KilnHostServices* host() const { return host_; }
  // The thread count of the pool, the caller included: the parallelism kernels get.
  int32_t num_threads() const { return num_threads_; }
  // Where num_threads came from ("option num_threads", "KILN_NUM_THREADS", "the process's CPU
  // affinity (2 CPUs)").
  const std::string& threads_source() const { return threads_source_; }
  // The CPU's attributes, read once on first use. Thread-safe.
  const std::vector<CpuAttribute>& cpu_attributes();

  // The kernel environments of loaded libraries (one per dlopen handle): errors and logs to
  // the host, parallel_for on the plugin's pool. Made by configure().
  sdk::DefaultKernelEnvs& kernel_envs() { return *kernel_envs_; }
  // Serialises library initialisation: kiln_kernel_library() writes the library's globals.
  std::mutex& init_mutex() { return init_mu_; }

  // The components reported to the host; valid as long as this object.
  std::span<const KilnComponent> components() const { return components_; }

 private:
  const KilnHostServices* host_ = nullptr;
  int32_t num_threads_ = 1;
  std::string threads_source_ = "default";
  // Declared before the users of the pool, which are destroyed first.
  std::unique_ptr<CpuPool> pool_;
  std::once_flag attributes_once_;
  std::vector<CpuAttribute> attributes_;
  std::mutex init_mu_;
  std::unique_ptr<sdk::DefaultKernelEnvs> kernel_envs_;
  // The pool's all-at-once face, chained from the device table's `next` by configure().
  std::unique_ptr<TaskTeam> team_;
  CpuDevice device_backend_{*this};
  KilnDeviceBackend device_;
  KilnLoader loader_;
  std::array<KilnComponent, 2> components_;
};

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_PLUGIN_STATE_H_
