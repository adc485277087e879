// Checking and packing the arguments of a kernel launch (docs/plugin-abi.md §10.2) against the
// kernel's metadata, into the form the vendor APIs take: one value per argument plus a
// pointer to each (cuLaunchKernel / hipModuleLaunchKernel `kernelParams`, clSetKernelArg).
#ifndef KILN_SDK_SUPPORT_KERNEL_ARGS_HPP_
#define KILN_SDK_SUPPORT_KERNEL_ARGS_HPP_

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "kiln/sdk/support/kernel_metadata.hpp"
#include "kiln/c/abi.h"

namespace kiln::sdk {

// The packed arguments of one launch. Owns the values; `pointers[i]` points at `values[i]`
// and stays valid while this object is neither moved nor destroyed.
struct PackedArgs {
  std::vector<std::array<uint8_t, 8>> values;  // little-endian, `sizes[i]` bytes used
  std::vector<size_t> sizes;
  std::vector<void*> pointers;
};

// Turns a tensor argument into the 8-byte value the kernel receives (a device pointer plus
// byte_offset, a cl_mem handle, ...). Throws kiln::sdk::Error to reject the tensor (wrong
// device, unsupported offset).
using TensorToHandle = std::function<uint64_t(const DLTensor& tensor, size_t index)>;

// Checks `args` (`num_args` values) against `kernel` and packs them: tensors through
// `to_handle`, KILN_TYPE_INT / KILN_TYPE_BOOL converted to integer and floating kinds (with a
// range check for the integer ones), KILN_TYPE_FLOAT to floating kinds only. Throws
// kiln::sdk::Error naming the kernel and the argument index: KILN_ERROR_VALUE for a wrong
// count or an out-of-range integer, KILN_ERROR_TYPE for a wrong kind.
PackedArgs pack_kernel_args(const KernelInfo& kernel, const KilnAny* args, int32_t num_args,
                            const TensorToHandle& to_handle);

}  // namespace kiln::sdk

#endif  // KILN_SDK_SUPPORT_KERNEL_ARGS_HPP_
