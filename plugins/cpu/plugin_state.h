// SPDX-License-Identifier: Apache-2.0
// Everything the cpu plugin owns between negotiation and shutdown.
#ifndef KILN_PLUGINS_CPU_PLUGIN_STATE_H_
#define KILN_PLUGINS_CPU_PLUGIN_STATE_H_

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_scheduler_observer.h>
#include <sched.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cpu_device.h"
#include "cpu_info.h"
#include "kiln/c/kiln.h"
#include "kiln/sdk/support/kernel_library.hpp"
#include "task_team.h"

namespace kiln::cpu {

// Places the arena's worker threads on `cpus` the first time each enters the arena: oneTBB's
// workers inherit the mask of the thread that starts them, which may be one another runtime
// pinned (TVM pins its main thread).
class ArenaPlacement : public tbb::task_scheduler_observer {
 public:
  ArenaPlacement(tbb::task_arena& arena, const cpu_set_t& cpus)
      : tbb::task_scheduler_observer(arena), cpus_(cpus) {
    observe(true);
  }
  ~ArenaPlacement() override { observe(false); }
  void on_scheduler_entry(bool worker) override;

 private:
  cpu_set_t cpus_;
};

// The plugin's state: configuration, its CPU engine (the oneTBB arena SDK kernels'
// parallel_for runs in and the task team TVM-compiled parallel loops run on, one thread count
// for both), the component tables and the kernel environments of loaded libraries. Created by
// kiln_plugin_negotiate and destroyed by the plugin's shutdown; every table's `self` points here.
// Not copyable: the tables hold its address.
class PluginState {
 public:
  // Builds the component tables; configure() must run before any of them is used.
  PluginState();
  PluginState(const PluginState&) = delete;
  PluginState& operator=(const PluginState&) = delete;
  // Terminates the arena and waits for oneTBB's workers to leave, so that the plugin (and
  // libtbb with it) can be unloaded safely.
  ~PluginState();

  // Resolves the options (`options_json`, borrowed JSON text) and KILN_NUM_THREADS, and
  // creates the arena. `host` is borrowed and must outlive this object. Throws
  // kiln::sdk::Error(KILN_ERROR_VALUE) naming the bad source and value.
  void configure(const KilnHostServices* host, const char* options_json);

  // The host's services (borrowed).
  const KilnHostServices* host() const { return host_; }
  // The thread count of the arena and the team: the parallelism kernels get.
  int32_t num_threads() const { return num_threads_; }
  // Where num_threads came from ("option num_threads", "KILN_NUM_THREADS", "the process's CPU
  // affinity (2 CPUs)").
  const std::string& threads_source() const { return threads_source_; }
  // The CPU's attributes, read once on first use. Thread-safe.
  const std::vector<CpuAttribute>& cpu_attributes();

  // The kernel environments of loaded libraries (one per dlopen handle): errors and logs to
  // the host, parallel_for in the plugin's arena. Made by configure().
  sdk::DefaultKernelEnvs& kernel_envs() { return *kernel_envs_; }
  // Serialises library initialisation: kiln_kernel_library() writes the library's globals.
  std::mutex& init_mutex() { return init_mu_; }

  // The components reported to the host; valid as long as this object.
  std::span<const KilnComponent> components() const { return components_; }

 private:
  const KilnHostServices* host_ = nullptr;
  int32_t num_threads_ = 1;
  std::string threads_source_ = "default";
  // Created before the arena so that the destructor can wait for the workers.
  tbb::task_scheduler_handle scheduler_;
  // Raises oneTBB's process-wide worker limit when more threads than CPUs were asked for;
  // oneTBB otherwise caps every arena at the CPU count. oneTBB applies the smallest limit in
  // force, so a host that set its own lower limit still wins.
  std::optional<tbb::global_control> parallelism_;
  tbb::task_arena arena_;
  // Set when the loading thread's mask is narrower than the process's CPUs.
  std::unique_ptr<ArenaPlacement> placement_;
  std::once_flag attributes_once_;
  std::vector<CpuAttribute> attributes_;
  std::mutex init_mu_;
  std::unique_ptr<sdk::DefaultKernelEnvs> kernel_envs_;
  // Chained from the device table's `next` by configure().
  std::unique_ptr<TaskTeam> team_;
  CpuDevice device_backend_{*this};
  KilnDeviceBackend device_;
  KilnLoader loader_;
  std::array<KilnComponent, 2> components_;
};

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_PLUGIN_STATE_H_
