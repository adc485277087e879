// SPDX-License-Identifier: Apache-2.0
// Per-kernel metadata of device code (docs/plugin-abi.md §10.2), as the device backends that
// load device code (opencl, cuda, rocm) read it from module_load's `metadata_json`:
//
//   {"format": "opencl_c", "target": "opencl", "build_options": "-cl-fast-relaxed-math",
//    "kernels": {"vector_add": {"args": ["tensor", "tensor", "tensor", "float32"],
//                               "launch": ["blockIdx.x", "threadIdx.x"]}}}
//
// Only "kernels" matters here; other keys belong to the host or to one backend.
#ifndef KILN_SDK_SUPPORT_KERNEL_METADATA_HPP_
#define KILN_SDK_SUPPORT_KERNEL_METADATA_HPP_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::sdk {

// The most arguments one kernel may declare. Launch arguments are packed into fixed storage of
// this many slots (kernel_args.hpp) so that a launch allocates nothing; 128 scalars of 8 bytes
// stay well inside the parameter space of every vendor API (CUDA's 4 KiB).
inline constexpr size_t kMaxKernelArgs = 128;

// The kind of one kernel argument.
enum class ArgKind : uint8_t {
  kTensor,  // "tensor" (alias "handle"): a device buffer
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kFloat32,
  kFloat64,
};

// The metadata name of `kind` ("tensor", "int32", ...).
const char* to_string(ArgKind kind);
// Bytes a scalar of `kind` takes in the kernel's parameter buffer (8 for a tensor: a device
// pointer or handle).
size_t arg_size(ArgKind kind);

// What one launch extent sets. Tags name the axis the kernel indexes: "blockIdx.x/y/z" set
// grid[0..2], "threadIdx.x/y/z" set block[0..2]; "dynamic_shared_bytes" (alias
// "tir.use_dyn_shared_memory") sets the dynamic shared memory size.
enum class LaunchTag : uint8_t {
  kGridX,
  kGridY,
  kGridZ,
  kBlockX,
  kBlockY,
  kBlockZ,
  kDynamicSharedBytes,
};
const char* to_string(LaunchTag tag);

struct KernelInfo {
  std::string name;
  std::vector<ArgKind> args;
  std::vector<LaunchTag> launch;
};

struct ModuleMetadata {
  std::map<std::string, KernelInfo> kernels;
  std::string build_options;  // "build_options", or empty
};

// Parses `json`. An empty string or "{}" gives no kernels. Throws kiln::sdk::Error
// (KILN_ERROR_VALUE) naming the key and the bad value for malformed JSON, an unknown argument
// kind or launch tag, a repeated launch tag, more than kMaxKernelArgs arguments, or a wrongly
// typed field.
ModuleMetadata parse_module_metadata(std::string_view json);

// The kernel `name` of `metadata`; kiln::sdk::Error (KILN_ERROR_NOT_FOUND) listing the kernels
// the metadata describes when there is none.
const KernelInfo& find_kernel(const ModuleMetadata& metadata, const std::string& name);

}  // namespace kiln::sdk

#endif  // KILN_SDK_SUPPORT_KERNEL_METADATA_HPP_
