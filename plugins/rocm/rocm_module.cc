// SPDX-License-Identifier: Apache-2.0
#include "rocm_module.h"

#include <cstring>

#include "code_object.h"
#include "hiprtc_compiler.h"
#include "kernel_launch.h"
#include "kiln/sdk/plugin.hpp"
#include "kiln/sdk/support/kernel_args.hpp"
#include "plugin_state.h"

namespace kiln::rocm {
namespace {

std::vector<std::string> kernel_names(const sdk::ModuleMetadata& metadata) {
  std::vector<std::string> names;
  for (const auto& [name, info] : metadata.kernels) names.push_back(name);
  return names;
}

// Compiles HIP source for `target` and returns the code object.
std::vector<uint8_t> compile_source(PluginState& state, std::span<const uint8_t> data,
                                    const std::string& target,
                                    const sdk::ModuleMetadata& metadata) {
  if (const void* nul = std::memchr(data.data(), 0, data.size())) {
    const auto at = static_cast<const uint8_t*>(nul) - data.data();
    sdk::throw_value_error("hip_source contains a NUL byte at offset " + std::to_string(at) +
                           ": it is not HIP source text (use format 'hsaco' for code objects)");
  }
  const Hiprtc& rtc = state.hiprtc();
  const std::vector<std::string> options =
      hiprtc_options(target, metadata.build_options, state.options().compile_options);
  const std::string_view source(reinterpret_cast<const char*>(data.data()), data.size());
  CompileResult result = compile_hip_source(rtc, source, "kiln_module.hip", options);
  if (!result.ok) {
    std::string joined;
    for (const std::string& o : options) joined += (joined.empty() ? "" : " ") + o;
    sdk::throw_value_error(
        "hiprtc could not compile the HIP source for " + target + " (" + rtc.library + ", " +
        result.status_text + "; options: " + joined + ")" +
        (result.log.empty() ? std::string(", and wrote no log") : ":\n" + result.log));
  }
  if (!result.log.empty()) {
    sdk::log(KILN_LOG_INFO, "hiprtc log for a hip_source module (%s):\n%s", target.c_str(),
             result.log.c_str());
  }
  return std::move(result.code);
}

}  // namespace

std::unique_ptr<RocmModule> load_module(PluginState& state, int32_t device_id,
                                        std::span<const uint8_t> data, const std::string& format,
                                        std::string_view metadata_json) {
  // Without a device every slot reports why, before looking at its arguments.
  const DeviceInfo& device = state.use_device(device_id);
  if (format != kFormatHsaco && format != kFormatHipSource) {
    sdk::throw_value_error("rocm backend cannot load format '" + format + "' (it loads '" +
                           kFormatHsaco + "' code objects and '" + kFormatHipSource +
                           "' HIP source)");
  }
  if (data.empty())
    sdk::throw_value_error("module_load: the " + format + " module is empty (0 bytes)");
  auto module = std::make_unique<RocmModule>();
  module->device_id = device_id;
  module->metadata = sdk::parse_module_metadata(metadata_json);
  if (device.gcn_arch_name.empty()) {
    throw sdk::Error(KILN_ERROR_UNAVAILABLE,
                     "rocm device " + std::to_string(device_id) +
                         " did not report a usable gcnArchName, so no code object can be chosen "
                         "or compiled for it");
  }
  std::vector<uint8_t> compiled;
  std::span<const uint8_t> bytes = data;
  if (format == kFormatHipSource) {
    compiled = compile_source(state, data, device.gcn_arch_name, module->metadata);
    bytes = compiled;
  }
  const SelectedCodeObject selected = select_code_object(bytes, device.gcn_arch_name);
  module->origin =
      (format == kFormatHipSource ? "code object hiprtc built for " + device.gcn_arch_name
                                  : selected.origin);
  check_kernels_present(selected.elf, kernel_names(module->metadata), module->origin);
  module->image.assign(selected.image.begin(), selected.image.end());
  const HipApi& api = state.api();
  check(api, api.ModuleLoadData(&module->handle, module->image.data()),
        "hipModuleLoadData (" + module->origin + ", device " + std::to_string(device_id) + " " +
            device.gcn_arch_name + ")");
  return module;
}

RocmKernel& get_kernel(PluginState& state, RocmModule& module, const std::string& name) {
  std::lock_guard<std::mutex> lock(module.mu);
  if (auto it = module.kernels.find(name); it != module.kernels.end()) return *it->second;
  const sdk::KernelInfo& info = sdk::find_kernel(module.metadata, name);
  state.use_device(module.device_id);
  const HipApi& api = state.api();
  auto kernel = std::make_unique<RocmKernel>();
  kernel->module = &module;
  kernel->info = info;
  const hipError_t e = api.ModuleGetFunction(&kernel->function, module.handle, name.c_str());
  if (e != hipSuccess) {
    throw sdk::Error(e == hipErrorNotFound ? KILN_ERROR_NOT_FOUND : error_code_of(e),
                     "hipModuleGetFunction('" + name + "') in the " + module.origin +
                         " failed: " + api.describe(e));
  }
  RocmKernel& out = *kernel;
  module.kernels.emplace(name, std::move(kernel));
  return out;
}

void unload_module(PluginState& state, RocmModule* module) {
  if (module == nullptr) return;
  std::unique_ptr<RocmModule> owned(module);
  if (module->handle == nullptr) return;
  try {
    state.use_device(module->device_id);
    const HipApi& api = state.api();
    const hipError_t e = api.ModuleUnload(module->handle);
    if (e != hipSuccess) {
      sdk::log(KILN_LOG_WARN, "hipModuleUnload (%s) failed: %s", module->origin.c_str(),
               api.describe(e).c_str());
    }
  } catch (const std::exception& e) {
    sdk::log(KILN_LOG_WARN, "cannot unload the %s: %s", module->origin.c_str(), e.what());
  }
}

void launch_kernel(PluginState& state, RocmKernel& kernel, const KilnAny* args, int32_t num_args,
                   const uint32_t* grid, const uint32_t* block, uint32_t dynamic_shared_bytes,
                   void* stream) {
  if (num_args < 0 || (num_args > 0 && args == nullptr)) {
    sdk::throw_value_error("launch of kernel '" + kernel.info.name +
                           "': the argument array is malformed (" + std::to_string(num_args) +
                           " arguments" + (args == nullptr ? ", NULL array)" : ")"));
  }
  const int32_t device_id = kernel.module->device_id;
  const DeviceInfo& device = state.use_device(device_id);
  check_launch_extents(kernel.info.name.c_str(), grid, block, dynamic_shared_bytes, device.limits);
  sdk::PackedArgs packed;  // on the stack: the launch path allocates nothing
  sdk::pack_kernel_args(
      kernel.info, args, num_args,
      [device_id](const DLTensor& tensor, size_t index) {
        return tensor_handle(tensor, index, device_id);
      },
      packed);
  const HipApi& api = state.api();
  // HIP copies the argument values into the kernel's argument buffer at launch, so `packed`
  // may go away when this returns.
  check(api,
        api.ModuleLaunchKernel(kernel.function, grid[0], grid[1], grid[2], block[0], block[1],
                               block[2], dynamic_shared_bytes, static_cast<hipStream_t>(stream),
                               packed.kernel_params(), nullptr),
        "hipModuleLaunchKernel('" + kernel.info.name + "')");
}

}  // namespace kiln::rocm
