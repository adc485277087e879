// SPDX-License-Identifier: Apache-2.0
#include "plugin_state.h"

#include <cstdlib>

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
  pool_ = std::make_unique<CpuPool>(num_threads_, cpus.known ? &cpus.set : nullptr);
  CpuPool* pool = pool_.get();
  kernel_envs_ = std::make_unique<sdk::DefaultKernelEnvs>(
      num_threads_, host_,
      [pool, host](int64_t begin, int64_t end, int64_t grain, KilnParallelBody body,
                   void* closure) {
        return run_parallel_for(pool, host, begin, end, grain, body, closure);
      });
  team_ = std::make_unique<TaskTeam>(*pool_, threads_source_);
  device_.next = &team_->extension().header;
  sdk::log(KILN_LOG_DEBUG, "%d threads (from %s)", num_threads_, threads_source_.c_str());
}

const std::vector<CpuAttribute>& PluginState::cpu_attributes() {
  std::call_once(attributes_once_,
                 [this] { attributes_ = read_cpu_attributes(num_threads_, threads_source_); });
  return attributes_;
}

}  // namespace kiln::cpu
