// SPDX-License-Identifier: Apache-2.0
// Module packages (what the "tar" exporter writes): see package_loader.cc.
#ifndef KILN_SRC_RUNTIME_PACKAGE_LOADER_H_
#define KILN_SRC_RUNTIME_PACKAGE_LOADER_H_

#include <filesystem>

#include "kiln/module.h"
#include "kiln/module_loader.h"

namespace kiln {

// The kind a loader reports for a module package: a module made only of artifacts.
inline constexpr const char* kPackageKind = "kiln.package";

// Turns the artifacts of `package` (read from `path` by a loader plugin) into a module: a VM
// executable with its host libraries, or one host library (loaded by the loader for its own
// format from a private temporary copy) importing the package's device code, or the device
// code alone. Throws ValueError naming the package for malformed artifacts.
Module load_package(Ref<ModuleObj> package, const std::filesystem::path& path,
                    ModuleLoadContext& context);

}  // namespace kiln

#endif  // KILN_SRC_RUNTIME_PACKAGE_LOADER_H_
