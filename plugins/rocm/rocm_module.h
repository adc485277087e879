// SPDX-License-Identifier: Apache-2.0
// Device code on a rocm device: loading "hsaco" code objects and "hip_source" modules,
// looking up kernels, launching them.
#ifndef KILN_PLUGINS_ROCM_ROCM_MODULE_H_
#define KILN_PLUGINS_ROCM_ROCM_MODULE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hip_api.h"
#include "kiln/c/abi.h"
#include "kiln/sdk/support/kernel_metadata.hpp"

namespace kiln::rocm {

class PluginState;
struct RocmModule;

// The module formats the backend loads.
inline constexpr const char* kFormatHsaco = "hsaco";
inline constexpr const char* kFormatHipSource = "hip_source";

// A kernel of a loaded module; lives until its module is unloaded.
struct RocmKernel {
  RocmModule* module = nullptr;
  sdk::KernelInfo info;
  hipFunction_t function = nullptr;
};

// A module loaded on one device.
struct RocmModule {
  int32_t device_id = 0;
  hipModule_t handle = nullptr;
  std::vector<uint8_t> image;  // the code object given to hipModuleLoadData, kept alive
  std::string origin;          // what was loaded, for messages
  sdk::ModuleMetadata metadata;
  std::mutex mu;
  std::map<std::string, std::unique_ptr<RocmKernel>> kernels;
};

// Loads `data` (format "hsaco": a raw code object or an offload bundle, or "hip_source": HIP
// source compiled with hiprtc for the device's architecture) with `metadata_json` on device
// `device_id`. Checks the metadata and that every kernel it describes is in the code object.
// Throws kiln::sdk::Error: VALUE for an unknown format, bad bytes or metadata, a compile error
// (with the compiler's log); UNAVAILABLE / INDEX for the device; the HIP error otherwise.
std::unique_ptr<RocmModule> load_module(PluginState& state, int32_t device_id,
                                        std::span<const uint8_t> data, const std::string& format,
                                        std::string_view metadata_json);

// The kernel `name` of `module`, looked up once and cached. NOT_FOUND when the metadata does
// not describe it (listing the kernels it does) or the code object lacks it.
RocmKernel& get_kernel(PluginState& state, RocmModule& module, const std::string& name);

// Unloads `module` (errors are logged) and frees it with its kernels.
void unload_module(PluginState& state, RocmModule* module);

// Checks and packs `args` against the kernel's metadata and launches it on `stream`
// (asynchronously; the argument values are captured before it returns).
void launch_kernel(PluginState& state, RocmKernel& kernel, const KilnAny* args, int32_t num_args,
                   const uint32_t* grid, const uint32_t* block, uint32_t dynamic_shared_bytes,
                   void* stream);

}  // namespace kiln::rocm

#endif  // KILN_PLUGINS_ROCM_ROCM_MODULE_H_
