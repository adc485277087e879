// SPDX-License-Identifier: Apache-2.0
// Checking and packing the arguments of a kernel launch (docs/plugin-abi.md §10.2) against the
// kernel's metadata, into the form the vendor APIs take: one value per argument plus a pointer
// to each (cuLaunchKernel / hipModuleLaunchKernel `kernelParams`, clSetKernelArg). The launch
// path allocates nothing (docs/plugin-abi.md §3 rule 8): values go into caller-provided fixed
// storage, usually on the stack, and tensors are converted through a non-owning callable.
#ifndef KILN_SDK_SUPPORT_KERNEL_ARGS_HPP_
#define KILN_SDK_SUPPORT_KERNEL_ARGS_HPP_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "kiln/c/abi.h"
#include "kiln/sdk/support/kernel_metadata.hpp"

namespace kiln::sdk {

// One packed argument: little-endian, the first arg_size(kind) bytes used, the rest zero.
using PackedArgValue = std::array<uint8_t, 8>;

// Caller-provided storage for the packed arguments of one launch (about 2 KiB; meant for the
// stack). `pointers[i]` points at `values[i]`, so the object is neither copyable nor movable.
// Holds kMaxKernelArgs arguments: parse_module_metadata refuses kernels with more.
struct PackedArgs {
  PackedArgs() = default;
  PackedArgs(const PackedArgs&) = delete;
  PackedArgs& operator=(const PackedArgs&) = delete;

  // The `kernelParams` array the vendor launch APIs take: NULL for a kernel without arguments.
  void** kernel_params() { return count == 0 ? nullptr : pointers.data(); }

  size_t count = 0;                                   // arguments packed
  std::array<PackedArgValue, kMaxKernelArgs> values;  // [0, count) valid
  std::array<void*, kMaxKernelArgs> pointers;         // pointers[i] == values[i].data()
  std::array<uint32_t, kMaxKernelArgs> sizes;         // bytes of values[i] the kernel reads
};

// Turns a tensor argument into the 8-byte value the kernel receives (a device pointer plus
// byte_offset, a cl_mem handle, ...); the callable may throw kiln::sdk::Error to reject the
// tensor (wrong device, unsupported offset). A non-owning reference to a callable
// `uint64_t(const DLTensor& tensor, size_t index)` (so no std::function allocation): the
// callable must outlive this object, which holds for a lambda passed straight to
// pack_kernel_args.
class TensorToHandle {
 public:
  using Function = uint64_t (*)(const DLTensor& tensor, size_t index);

  // A plain function: stored as is.
  TensorToHandle(Function function)  // NOLINT(google-explicit-constructor)
      : call_([](const Target& t, const DLTensor& tensor, size_t index) {
          return t.function(tensor, index);
        }) {
    target_.function = function;
  }

  // Any other callable object: referenced, not copied.
  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, TensorToHandle> &&
           !std::is_function_v<std::remove_reference_t<F>> &&
           !std::is_pointer_v<std::remove_cvref_t<F>>)
      TensorToHandle(F&& callable)  // NOLINT(google-explicit-constructor)
      : call_([](const Target& t, const DLTensor& tensor, size_t index) -> uint64_t {
          return (*static_cast<std::remove_reference_t<F>*>(t.object))(tensor, index);
        }) {
    target_.object = const_cast<void*>(static_cast<const void*>(std::addressof(callable)));
  }

  uint64_t operator()(const DLTensor& tensor, size_t index) const {
    return call_(target_, tensor, index);
  }

 private:
  union Target {
    void* object;
    Function function;
  };
  Target target_{};
  uint64_t (*call_)(const Target& target, const DLTensor& tensor, size_t index);
};

// Checks `args` (`num_args` values, borrowed) against `kernel` and packs them into `out`:
// tensors through `to_handle`, KILN_TYPE_INT / KILN_TYPE_BOOL converted to integer and floating
// kinds (with a range check for the integer ones), KILN_TYPE_FLOAT to floating kinds only.
// Allocates nothing unless it throws. Throws kiln::sdk::Error naming the kernel and the
// argument index: KILN_ERROR_VALUE for a wrong count or an out-of-range integer,
// KILN_ERROR_TYPE for a wrong kind, and whatever `to_handle` throws; `out` is unspecified then.
void pack_kernel_args(const KernelInfo& kernel, const KilnAny* args, int32_t num_args,
                      TensorToHandle to_handle, PackedArgs& out);

}  // namespace kiln::sdk

#endif  // KILN_SDK_SUPPORT_KERNEL_ARGS_HPP_
