// SPDX-License-Identifier: Apache-2.0
#include "plugin_state.h"

#include <pthread.h>

#include <cstdlib>
#include <new>

#include "cpu_device.h"
#include "kiln/sdk/plugin.hpp"
#include "parallel_for.h"
#include "plugin_options.h"
#include "so_loader.h"

namespace kiln::cpu {

PluginState::PluginState()
    : device_(sdk::make_device_backend(&device_backend_, kDLCPU)),
      loader_(make_so_loader(this)),
      components_{sdk::component(KILN_COMPONENT_DEVICE, "cpu", &device_),
                  sdk::component(KILN_COMPONENT_LOADER, "so", &loader_)} {}

void ArenaPlacement::on_scheduler_entry(bool worker) {
  thread_local bool placed = false;
  if (!worker || placed) return;
  placed = true;
  pthread_setaffinity_np(pthread_self(), sizeof(cpus_), &cpus_);
}

PluginState::~PluginState() {
  placement_.reset();
  if (arena_.is_active()) arena_.terminate();
  parallelism_.reset();
  // Waits for the workers only when no one else (e.g. a host that uses oneTBB too) still
  // holds the scheduler; otherwise it returns false at once and the workers stay, which is
  // fine because libtbb then stays loaded too.
  if (scheduler_) (void)tbb::finalize(scheduler_, std::nothrow);
}

void PluginState::configure(const KilnHostServices* host, const char* options_json) {
  host_ = host;
  const ProcessCpus cpus = process_cpus();
  const PluginOptions options =
      resolve_options(options_json, std::getenv("KILN_NUM_THREADS"), cpus.count, cpus.describe);
  for (const std::string& key : options.unknown) {
    sdk::log(KILN_LOG_WARN, "ignoring unknown option '%s'", key.c_str());
  }
  num_threads_ = options.num_threads;
  threads_source_ = options.threads_source;
  if (cpus.known && cpus.calling < cpus.count) {
    // E.g. TVM pinned the main thread before this runtime was made: the plugin's threads still
    // run on all of the process's CPUs.
    sdk::log(KILN_LOG_INFO,
             "the thread that loads the plugin is pinned to %d of the process's %d CPUs; the "
             "plugin's %d threads run on all %d",
             cpus.calling, cpus.count, num_threads_, cpus.count);
  }
  if (num_threads_ > 1) {
    scheduler_ = tbb::task_scheduler_handle{tbb::attach{}};
    const auto wanted = static_cast<size_t>(num_threads_);
    if (wanted > tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)) {
      parallelism_.emplace(tbb::global_control::max_allowed_parallelism, wanted);
    }
    arena_.initialize(num_threads_);
    if (cpus.known && cpus.calling < cpus.count) {
      placement_ = std::make_unique<ArenaPlacement>(arena_, cpus.set);
    }
  }
  tbb::task_arena* arena = num_threads_ > 1 ? &arena_ : nullptr;
  kernel_envs_ = std::make_unique<sdk::DefaultKernelEnvs>(
      num_threads_, host_,
      [arena, threads = num_threads_, host](int64_t begin, int64_t end, int64_t grain,
                                            KilnParallelBody body, void* closure) {
        return run_parallel_for(arena, threads, host, begin, end, grain, body, closure);
      });
  team_ =
      std::make_unique<TaskTeam>(num_threads_, cpus.known ? &cpus.set : nullptr, threads_source_);
  device_.next = &team_->extension().header;
  sdk::log(KILN_LOG_DEBUG, "%d threads (from %s)", num_threads_, threads_source_.c_str());
}

const std::vector<CpuAttribute>& PluginState::cpu_attributes() {
  std::call_once(attributes_once_,
                 [this] { attributes_ = read_cpu_attributes(num_threads_, threads_source_); });
  return attributes_;
}

}  // namespace kiln::cpu
