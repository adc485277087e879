// SPDX-License-Identifier: Apache-2.0
#include "kernel_library.h"

#include "plugin_state.h"

namespace kiln::cpu {

sdk::KernelLibraryOptions kernel_library_options(PluginState& state) {
  sdk::KernelLibraryOptions options;
  options.loader_name = "the cpu plugin";
  options.init_mutex = &state.init_mutex();
  options.make_env = state.kernel_envs().factory();
  return options;
}

}  // namespace kiln::cpu
