// The launch path's argument packing without allocation (docs/plugin-abi.md §9.4: no
// allocation on the success path of a launch). It accepts exactly what
// sdk::pack_kernel_args accepts, with the same conversions, for kernels of up to
// kMaxFastArgs arguments; anything else (a wrong count, kind, range or device) makes it
// return false, and the caller then runs pack_kernel_args, which reports the problem.
#ifndef KILN_PLUGINS_CUDA_FAST_ARGS_H_
#define KILN_PLUGINS_CUDA_FAST_ARGS_H_

#include <array>
#include <cstdint>

#include "kiln/sdk/support/kernel_metadata.hpp"
#include "kiln/c/abi.h"

namespace kiln::cuda {

inline constexpr int32_t kMaxFastArgs = 24;

// Argument values and the pointers to them that cuLaunchKernel takes as kernelParams.
// Not movable once packed: `pointers` point into `values`.
struct FastArgs {
  std::array<std::array<uint8_t, 8>, kMaxFastArgs> values;
  std::array<void*, kMaxFastArgs> pointers;
};

// Packs `args` for `kernel` launched on cuda device `device_id` into `out`; false when the
// arguments need pack_kernel_args (to pack them or to report what is wrong with them).
bool pack_args_fast(const sdk::KernelInfo& kernel, const KilnAny* args, int32_t num_args,
                    int32_t device_id, FastArgs& out);

}  // namespace kiln::cuda

#endif  // KILN_PLUGINS_CUDA_FAST_ARGS_H_
