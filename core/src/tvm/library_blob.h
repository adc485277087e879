// SPDX-License-Identifier: Apache-2.0
// The module tree TVM's export_library embeds in a library as `__tvm_ffi__library_bin`
// (SPEC.md §5.4), and the device modules in it (kinds "opencl", "cuda", "rocm") as Kiln device
// code. Every reader here takes hostile bytes: counts and lengths are bounded by the bytes left
// before anything is allocated, and errors name the byte offset.
#ifndef KILN_TVM_LIBRARY_BLOB_H_
#define KILN_TVM_LIBRARY_BLOB_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/device_code.h"

namespace kiln::tvm_interop {

// One module of the tree. `kind` "_lib" stands for the library itself and has no bytes.
struct BlobModule {
  std::string kind;
  std::vector<uint8_t> bytes;   // the module's serialized form (its SaveToBytes)
  std::vector<size_t> imports;  // indices of the modules it imports
};

// Parses `blob` (the symbol's bytes: u64 length, then the tree). Module 0 is the root. Throws
// ValueError naming `where` and the byte offset for a truncated blob, a length beyond the
// symbol, a malformed or cyclic import tree, or more than one "_lib".
std::vector<BlobModule> parse_library_blob(std::span<const uint8_t> blob, const std::string& where);

// Whether `kind` is a device module kind device_code_from_tvm reads.
bool is_device_module_kind(const std::string& kind);

// The device code of a device module (kind "opencl", "cuda" or "rocm"/"hip"): its code as Kiln
// device code, with kernel metadata from TVM's function table (argument types, launch tags).
// Throws ValueError naming `where` (and the function or byte offset) for malformed bytes, a
// code format Kiln cannot load, or an argument type / launch tag it does not know.
DeviceCode device_code_from_tvm(const BlobModule& module, const std::string& where);

}  // namespace kiln::tvm_interop

#endif  // KILN_TVM_LIBRARY_BLOB_H_
