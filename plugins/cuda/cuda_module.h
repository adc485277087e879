// SPDX-License-Identifier: Apache-2.0
// Device code loaded into one device's primary context, and the launch of its kernels.
#ifndef KILN_PLUGINS_CUDA_CUDA_MODULE_H_
#define KILN_PLUGINS_CUDA_CUDA_MODULE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "driver_api.h"
#include "kiln/c/abi.h"
#include "kiln/sdk/support/kernel_metadata.hpp"
#include "module_image.h"

namespace kiln::cuda {

class CudaModule;
class PluginState;

// One kernel of a loaded module: the handle module_get_kernel returns.
struct CudaKernel {
  CudaModule* module = nullptr;
  CUfunction function = nullptr;
  const sdk::KernelInfo* info = nullptr;  // in module->metadata()
  // The dynamic shared memory the function is currently allowed (the driver's default is
  // 48 KiB; larger launches raise it once through cuFuncSetAttribute).
  std::atomic<uint32_t> dynamic_shared_limit{48 * 1024};
};

class CudaModule {
 public:
  // Loads `size` bytes at `data` (borrowed) of `format` with `metadata_json` (borrowed, may
  // be NULL or "") on device `device_id`: checks the bytes (module_image.h), compiles
  // cuda_source with NVRTC for the device's architecture, loads the image with
  // cuModuleLoadDataEx (the JIT error log goes into the error) and checks that every kernel
  // of the metadata is present. Throws kiln::sdk::Error: KILN_ERROR_VALUE for bad bytes,
  // formats, metadata and compile errors, KILN_ERROR_NOT_FOUND for kernels the code lacks,
  // KILN_ERROR_UNAVAILABLE without a device or NVRTC, and the driver's errors.
  static std::unique_ptr<CudaModule> load(PluginState& state, int32_t device_id, const void* data,
                                          size_t size, const char* format,
                                          const char* metadata_json);
  ~CudaModule();
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;

  // Kernel `name`; kiln::sdk::Error (KILN_ERROR_NOT_FOUND) listing the kernels otherwise.
  CudaKernel& kernel(const std::string& name);

  int32_t device_id() const { return device_id_; }
  CUcontext context() const { return context_; }
  const sdk::ModuleMetadata& metadata() const { return metadata_; }
  PluginState& state() const { return state_; }

 private:
  CudaModule(PluginState& state, int32_t device_id) : state_(state), device_id_(device_id) {}
  PluginState& state_;
  int32_t device_id_;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  sdk::ModuleMetadata metadata_;
  std::map<std::string, std::unique_ptr<CudaKernel>> kernels_;
};

// Launches `kernel` with `args` (checked and packed against its metadata; tensors become
// device addresses) and the extents, asynchronously on `stream` (NULL: the default stream).
// Throws kiln::sdk::Error for bad arguments and launch failures, naming the kernel and extents.
void launch_kernel(CudaKernel& kernel, const KilnAny* args, int32_t num_args,
                   const uint32_t grid[3], const uint32_t block[3], uint32_t dynamic_shared_bytes,
                   void* stream);

}  // namespace kiln::cuda

#endif  // KILN_PLUGINS_CUDA_CUDA_MODULE_H_
