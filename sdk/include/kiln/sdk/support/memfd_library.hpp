// SPDX-License-Identifier: Apache-2.0
// Loading a shared library from bytes in memory, for C++ callers: the exception-throwing face
// of kiln_memfd_dlopen (kiln/sdk/support/memfd_load.h), which holds the loader itself.
#ifndef KILN_SDK_SUPPORT_MEMFD_LIBRARY_HPP_
#define KILN_SDK_SUPPORT_MEMFD_LIBRARY_HPP_

#include <cstddef>
#include <string>

namespace kiln::sdk {

// Copies `size` bytes at `data` (borrowed) into an anonymous memory file named after `label`
// (for /proc/<pid>/maps and messages) and dlopen()s it with RTLD_NOW | RTLD_LOCAL under a name
// no loaded library has; see kiln_memfd_dlopen. Returns the dlopen handle, owned by the caller
// (dlclose). Throws kiln::sdk::Error naming `label`: KILN_ERROR_VALUE for empty input or bytes
// the dynamic loader rejects (with the dlerror() text), KILN_ERROR_RUNTIME when the memory file
// cannot be made, written or given a free name.
void* dlopen_bytes(const void* data, size_t size, const std::string& label);

}  // namespace kiln::sdk

#endif  // KILN_SDK_SUPPORT_MEMFD_LIBRARY_HPP_
