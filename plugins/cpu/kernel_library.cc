#include "kernel_library.h"

#include "plugin_state.h"

namespace kiln::cpu {

sdk::KernelLibraryOptions kernel_library_options(PluginState& state) {
  sdk::KernelLibraryOptions options;
  options.loader_name = "the cpu plugin";
  options.init_mutex = &state.init_mutex();
  options.make_env = [&state](void* dl_handle, const std::string& label) {
    std::shared_ptr<KernelEnv> env = state.env_for(dl_handle, label);
    const KilnKernelEnv* c_env = env->get();
    return sdk::KernelLibraryEnv{std::move(env), c_env};
  };
  return options;
}

}  // namespace kiln::cpu
