// SPDX-License-Identifier: Apache-2.0
// Loading VM executables as modules: from .kvm (binary) and .kvmt (text) files, whose
// imports are kernel libraries relative to the file, and from packages with a bytecode
// artifact. Registered with every Runtime's module loaders.
#ifndef KILN_CORE_VM_VM_MODULE_H_
#define KILN_CORE_VM_VM_MODULE_H_

#include <filesystem>
#include <map>
#include <string>

#include "kiln/device_context.h"
#include "kiln/module.h"
#include "kiln/module_loader.h"
#include "kiln/vm/virtual_machine.h"

namespace kiln::vm {

// The loader of .kvm (binary) and .kvmt (text) executable files; their imports are kernel
// libraries relative to the file, loaded through the same ModuleLoadContext (so cycles, depth
// and the path policy apply to them). Errors name the file and the import.
std::shared_ptr<const FormatLoader> executable_format_loader();
// Loads an executable file and its imports.
Module load_executable_file(const std::filesystem::path& path, ModuleLoadContext& context);
// The executable module of a package: `bytecode` plus the package's host libraries by artifact
// name; each import of the executable must match one by base name (ValueError otherwise). Its
// VMs run on devices of `context`.
Module load_executable_package(const Artifact& bytecode, std::map<std::string, Module> libraries,
                               const std::string& package, const DeviceContext& context);
// The DeviceContext an executable module was made with; null for other modules.
const DeviceContext* device_context_of(const Module& m);

}  // namespace kiln::vm

#endif  // KILN_CORE_VM_VM_MODULE_H_
