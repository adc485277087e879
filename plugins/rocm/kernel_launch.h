// SPDX-License-Identifier: Apache-2.0
// The checks of a kernel launch that need no device: turning a tensor argument into the
// device pointer a HIP kernel receives, and validating the launch extents against the
// device's limits. Used by the backend's launch slot and by the tests.
#ifndef KILN_PLUGINS_ROCM_KERNEL_LAUNCH_H_
#define KILN_PLUGINS_ROCM_KERNEL_LAUNCH_H_

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>

namespace kiln::rocm {

// The launch limits of one device (hipDeviceProp_t).
struct LaunchLimits {
  int64_t max_threads_per_block = 1024;
  int64_t max_block[3] = {1024, 1024, 1024};
  int64_t max_grid[3] = {2147483647, 65536, 65536};
  int64_t shared_memory_per_block_bytes = 65536;
};

// The kernel argument for tensor argument `index`: its data pointer plus byte_offset. Throws
// kiln::sdk::Error naming the argument: KILN_ERROR_VALUE when the tensor is not on device
// `device_id` of type kDLROCM (the device the module was loaded on), has no data, or its
// byte_offset would overflow the address.
uint64_t tensor_handle(const DLTensor& tensor, size_t index, int32_t device_id);

// Throws kiln::sdk::Error(KILN_ERROR_VALUE) naming the kernel and the extent when `grid` or
// `block` (NULL, or an axis of 0), or the threads per block, or `dynamic_shared_bytes` exceed
// `limits`.
void check_launch_extents(const char* kernel, const uint32_t* grid, const uint32_t* block,
                          uint32_t dynamic_shared_bytes, const LaunchLimits& limits);

}  // namespace kiln::rocm

#endif  // KILN_PLUGINS_ROCM_KERNEL_LAUNCH_H_
