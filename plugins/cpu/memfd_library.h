// Loading a shared library from bytes in memory, without a file on disk.
#ifndef KILN_PLUGINS_CPU_MEMFD_LIBRARY_H_
#define KILN_PLUGINS_CPU_MEMFD_LIBRARY_H_

#include <cstddef>
#include <string>

namespace kiln::cpu {

// Copies `size` bytes at `data` (borrowed) into an anonymous memory file (memfd_create with
// MFD_CLOEXEC, named after `label` for /proc/<pid>/maps) and dlopen()s it through
// /proc/self/fd/<n> with RTLD_NOW | RTLD_LOCAL, under a name no loaded library has (see the
// .cc). The descriptors are closed before returning: the mapping keeps the file alive. Returns the
// dlopen handle, owned by the caller (dlclose). Throws kiln::sdk::Error: KILN_ERROR_VALUE for empty
// input or bytes the dynamic loader rejects (with the dlerror() text), KILN_ERROR_RUNTIME when the
// memory file cannot be made or written.
void* dlopen_bytes(const void* data, size_t size, const std::string& label);

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_MEMFD_LIBRARY_H_
