#include "plugin_state.h"

#include <cstdlib>
#include <new>

#include "cpu_device.h"
#include "kiln/sdk/plugin.hpp"
#include "plugin_options.h"
#include "so_loader.h"

namespace kiln::cpu {

PluginState::PluginState()
    : device_(sdk::make_device_backend(&device_backend_, kDLCPU)),
      loader_(make_so_loader(this)),
      components_{sdk::component(KILN_COMPONENT_DEVICE, "cpu", &device_),
                  sdk::component(KILN_COMPONENT_LOADER, "so", &loader_)} {}

PluginState::~PluginState() {
  if (arena_.is_active()) arena_.terminate();
  parallelism_.reset();
  // Waits for the workers only when no one else (e.g. a host that uses oneTBB too) still
  // holds the scheduler; otherwise it returns false at once and the workers stay, which is
  // fine because libtbb then stays loaded too.
  if (scheduler_) (void)tbb::finalize(scheduler_, std::nothrow);
}

void PluginState::configure(const KilnHostServices* host, const char* options_json) {
  host_ = host;
  const PluginOptions options =
      resolve_options(options_json, std::getenv("KILN_NUM_THREADS"), available_cpus());
  for (const std::string& key : options.unknown) {
    sdk::log(KILN_LOG_WARN, "ignoring unknown option '%s'", key.c_str());
  }
  num_threads_ = options.num_threads;
  if (num_threads_ > 1) {
    scheduler_ = tbb::task_scheduler_handle{tbb::attach{}};
    const auto wanted = static_cast<size_t>(num_threads_);
    if (wanted > tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)) {
      parallelism_.emplace(tbb::global_control::max_allowed_parallelism, wanted);
    }
    arena_.initialize(num_threads_);
  }
  sdk::log(KILN_LOG_DEBUG, "%d threads (from %s)", num_threads_, options.threads_source.c_str());
}

const std::vector<CpuAttribute>& PluginState::cpu_attributes() {
  std::call_once(attributes_once_, [this] { attributes_ = read_cpu_attributes(num_threads_); });
  return attributes_;
}

std::shared_ptr<KernelEnv> PluginState::env_for(void* dl_handle, const std::string& label) {
  // Drop the entries of libraries that are gone, so the map does not grow without bound.
  for (auto it = envs_.begin(); it != envs_.end();) {
    it = it->second.expired() ? envs_.erase(it) : std::next(it);
  }
  if (auto it = envs_.find(dl_handle); it != envs_.end()) {
    if (std::shared_ptr<KernelEnv> env = it->second.lock()) return env;
  }
  auto env =
      std::make_shared<KernelEnv>(host_, num_threads_ > 1 ? &arena_ : nullptr, num_threads_, label);
  envs_[dl_handle] = env;
  return env;
}

}  // namespace kiln::cpu
