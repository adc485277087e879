// SPDX-License-Identifier: Apache-2.0
// Device code (OpenCL C, PTX, cubin, HIP code objects, ...) as a module whose functions are
// its kernels (docs/plugin-abi.md §10.2).
//
// A kernel function takes the kernel's arguments in the order of its metadata "args", then one
// integer per launch tag of its metadata "launch" (blockIdx.* = grid extents, threadIdx.* =
// block extents, dynamic_shared_bytes). Every tensor argument must live on one device of the
// code's target type; the code is loaded into that device's backend on first use (once per
// device) and the kernel is launched asynchronously on the device's default stream.
#ifndef KILN_DEVICE_CODE_H_
#define KILN_DEVICE_CODE_H_

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kiln/module.h"

namespace kiln {

class DeviceContext;

// One blob of device code and its per-kernel metadata.
struct DeviceCode {
  std::string name;    // file base name, also its artifact name, e.g. "vector_add.cl"
  std::string format;  // "opencl_c", "spirv", "opencl_binary", "ptx", "cubin", "fatbin",
                       // "cuda_source", "hsaco", "hip_source", or a vendor's own
  std::string target;  // device type name of the backend that loads it: "opencl", "cuda", ...
  std::vector<uint8_t> data;
  std::string metadata_json;  // {"kernels": {...}, ...}: passed as is to module_load
};

// The module kind of device code modules.
inline constexpr const char* kDeviceCodeKind = "device_code";

// The (format, target) a file extension ("cl", without the dot) stands for, or nullopt:
// cl -> (opencl_c, opencl), clbin -> (opencl_binary, opencl), spv -> (spirv, opencl),
// ptx/cubin/fatbin -> (same, cuda), cu -> (cuda_source, cuda), hsaco -> (hsaco, rocm),
// hip -> (hip_source, rocm).
std::optional<std::pair<std::string, std::string>> device_code_format_of(
    const std::string& extension);

// Reads the device code at `path` with its metadata from the sidecar file `<path>.json`
// (e.g. vector_add.cl.json). "format" and "target" in the sidecar win over the extension.
// Throws NotFoundError for a missing file or sidecar, ValueError for malformed metadata
// (naming the sidecar) or an extension with no known format and no "format"/"target" keys.
DeviceCode read_device_code(const std::filesystem::path& path);

// Makes a module of kind kDeviceCodeKind with one function per kernel of every blob, and
// artifacts "<name>" (role device_blob) and "<name>.json" (role metadata) so that exporting
// and loading it again is lossless. Throws ValueError for malformed metadata, a blob without
// kernels or a kernel name that two blobs define. Backends are looked up in `context` (which
// the module keeps alive) when a kernel is first called.
Module make_device_code_module(std::vector<DeviceCode> blobs, const DeviceContext& context);

}  // namespace kiln

#endif  // KILN_DEVICE_CODE_H_
