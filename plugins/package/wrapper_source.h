// SPDX-License-Identifier: Apache-2.0
// The C source of a combined library: one shared library that embeds a module's artifacts and
// is itself a Kiln kernel library.
#ifndef KILN_PLUGINS_PACKAGE_WRAPPER_SOURCE_H_
#define KILN_PLUGINS_PACKAGE_WRAPPER_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::package {

// One artifact to embed: its manifest data and the file holding its bytes.
struct EmbeddedArtifact {
  std::string name;
  std::string role;
  uint64_t size = 0;
  std::string file;  // absolute path the assembler reads with .incbin at compile time
};

// Returns a C11 source file that includes the C library, POSIX, and the SDK headers listed by
// wrapper_headers() (embedded_headers.h; the caller writes them into a folder passed with -I),
// and that, compiled with `cc -shared -fPIC ... -I<that folder> ... -ldl`, defines:
//
//   const KilnKernelLibrary* kiln_kernel_library(const KilnKernelEnv* env);
//     On first call, loads the embedded artifact #`host_index` (the host library) from memory
//     with kiln_memfd_dlopen (kiln/sdk/support/memfd_load.h: a memfd dlopen()ed RTLD_NOW |
//     RTLD_LOCAL through a /proc/self/fd/<n> name that no loaded library has), and looks up its
//     kiln_kernel_library. Every call then forwards `env`
//     to it and returns its table, so repeated calls return the same table and pass on the
//     latest `env`, as the ABI asks (§11.1). On failure it logs the reason through env->log
//     and returns NULL (the loader then reports the NULL table); a later call tries again.
//     Calls are serialised by a mutex. The inner library is dlclose()d when this one is
//     unloaded.
//   const char* kiln_package_manifest(void);
//     The package manifest, `manifest_json` (static storage).
//   int32_t kiln_package_artifact(int32_t i, const char** name, const char** role,
//                                 const uint8_t** data, size_t* size);
//     Fills the non-NULL outputs with artifact `i` (static storage) and returns 0, or returns
//     -1 when `i` is out of range; lets a tool recover the package from the library.
//
// The bytes are embedded with the assembler's .incbin, which costs no compile time however
// large the artifacts are (a C array initialiser of a few MiB takes the compiler seconds).
// `host_index` must index `artifacts`.
std::string wrapper_source(const std::string& manifest_json,
                           const std::vector<EmbeddedArtifact>& artifacts, size_t host_index);

}  // namespace kiln::package

#endif  // KILN_PLUGINS_PACKAGE_WRAPPER_SOURCE_H_
