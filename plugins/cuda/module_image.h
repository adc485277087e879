// SPDX-License-Identifier: Apache-2.0
// Checks on device code before the driver sees it, and on kernel metadata against the kernels
// a module holds. The driver trusts the bytes it is given (a cubin's ELF header says how much
// to read), so the plugin checks formats and sizes first: bad bytes become an error naming
// the problem, never a read past the buffer. All of this works without a GPU.
#ifndef KILN_PLUGINS_CUDA_MODULE_IMAGE_H_
#define KILN_PLUGINS_CUDA_MODULE_IMAGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/c/abi.h"
#include "kiln/sdk/support/kernel_metadata.hpp"

namespace kiln::cuda {

// The device code formats the cuda backend loads.
enum class ImageFormat { kPtx, kCubin, kFatbin, kCudaSource };

// The format named `format` ("ptx", "cubin", "fatbin", "cuda_source"); kiln::sdk::Error
// (KILN_ERROR_VALUE) listing the supported ones otherwise.
ImageFormat parse_image_format(std::string_view format);
const char* to_string(ImageFormat format);

// Checks that `size` bytes at `data` can be handed to the driver as `format` and returns the
// bytes to load: PTX and CUDA source as NUL-terminated text (trailing NULs dropped, other NUL
// bytes rejected), a cubin as a complete 64-bit little-endian ELF for the CUDA machine
// (EM_CUDA = 190) whose header, program and section tables lie inside the buffer, a fatbin as
// a complete fat binary (magic 0xBA55ED50, header and payload inside the buffer). Throws
// kiln::sdk::Error (KILN_ERROR_VALUE) saying what is wrong, e.g. "this is not a cubin: it does
// not start with the ELF magic" or "PTX text starts with the ELF magic: pass it as 'cubin'".
std::vector<uint8_t> prepare_image(const void* data, size_t size, ImageFormat format);

// The kernel entry points a PTX module defines: the names of its ".entry" directives.
std::set<std::string> ptx_entry_names(std::string_view ptx);

// Throws kiln::sdk::Error (KILN_ERROR_NOT_FOUND) listing every kernel of `metadata` for which
// `present(name)` is false, and the kernels the module does have when `available` is given,
// e.g. "the cubin module lacks kernels the metadata describes: scale (the module has:
// vector_add)". `what` names the module in the message.
void check_kernels_present(const sdk::ModuleMetadata& metadata,
                           const std::function<bool(const std::string&)>& present,
                           const std::string& what,
                           const std::set<std::string>* available = nullptr);

// The value a tensor argument passes to a kernel: its device address (data + byte_offset).
// Throws kiln::sdk::Error (KILN_ERROR_VALUE) naming `kernel` and the argument `index` when
// the tensor is not on cuda device `device_id` or the address overflows.
uint64_t tensor_device_address(const DLTensor& tensor, int32_t device_id, const std::string& kernel,
                               size_t index);

}  // namespace kiln::cuda

#endif  // KILN_PLUGINS_CUDA_MODULE_IMAGE_H_
