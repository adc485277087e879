// SPDX-License-Identifier: Apache-2.0
// The "so" loader component: reads SDK-built kernel libraries from disk.
#ifndef KILN_PLUGINS_CPU_SO_LOADER_H_
#define KILN_PLUGINS_CPU_SO_LOADER_H_

#include "kiln/c/module.h"

namespace kiln::cpu {

class PluginState;

// The KilnLoader table of the "so" component, with `state` (borrowed; it owns the table) as
// `self`. load_file dlopen()s the library, initialises it (see KernelLibrary) and fills the
// KilnLoadedModule: kind "kernel_library", the table's entry and function names, its blobs,
// and one "host_library" artifact holding the file's bytes (read once, at load) under the
// file's base name. Errors: KILN_ERROR_NOT_FOUND for a missing file, KILN_ERROR_VALUE for a
// file that is not a Kiln kernel library, KILN_ERROR_ABI for an incompatible one,
// KILN_ERROR_RUNTIME when it cannot be read; `out` is left untouched on error.
KilnLoader make_so_loader(PluginState* state);

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_SO_LOADER_H_
