// SPDX-License-Identifier: Apache-2.0
// The format loaders a Runtime registers: one per loader component of its plugins, and the
// host's own (TVM-compiled libraries, Kiln VM and TVM Relax VM executables, device code).
#ifndef KILN_SRC_RUNTIME_MODULE_FORMATS_H_
#define KILN_SRC_RUNTIME_MODULE_FORMATS_H_

#include "kiln/module_loader.h"
#include "plugin/loaded_plugin.h"

namespace kiln {

// Registers a FormatLoader for loader component `index` of `plugin` (priority
// kPluginPriority). A module it reports as a package (kPackageKind) is assembled from its
// artifacts.
void register_plugin_loader(ModuleLoaderRegistry& registry, const Ref<plugin::LoadedPlugin>& plugin,
                            size_t index);
// Registers the host's own readers: TVM-compiled libraries (tvm-ffi "so" files, priority
// kTvmLibraryPriority, ahead of plugins' "so" loaders), Kiln's VM executables and then TVM's
// Relax VM executables (kExecutablePriority), device code (kDeviceCodePriority).
void register_host_loaders(ModuleLoaderRegistry& registry);

}  // namespace kiln

#endif  // KILN_SRC_RUNTIME_MODULE_FORMATS_H_
