// The cuda device backend component (docs/plugin-abi.md §10.1, docs/backends/cuda.md).
#ifndef KILN_PLUGINS_CUDA_CUDA_DEVICE_H_
#define KILN_PLUGINS_CUDA_CUDA_DEVICE_H_

#include "kiln/c/kiln.h"

namespace kiln::cuda {

class PluginState;

// The backend table for device type "cuda" (kDLCUDA), every slot filled; `self` is `state`.
KilnDeviceBackend make_device_backend(PluginState* state);

}  // namespace kiln::cuda

#endif  // KILN_PLUGINS_CUDA_CUDA_DEVICE_H_
