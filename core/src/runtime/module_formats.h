// The format loaders a Runtime registers: one per loader component of its plugins, and the
// host's own (VM executables, device code).
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
// Registers the host's own readers: VM executables and device code.
void register_host_loaders(ModuleLoaderRegistry& registry);

}  // namespace kiln

#endif  // KILN_SRC_RUNTIME_MODULE_FORMATS_H_
