// Loading VM executables as modules: from .kvm (binary) and .kvmt (text) files, whose
// imports are kernel libraries relative to the file, and from packages with a bytecode
// artifact. Used by Runtime::load_module and Runtime::load_package.
#ifndef KILN_CORE_VM_VM_MODULE_H_
#define KILN_CORE_VM_VM_MODULE_H_

#include <filesystem>
#include <map>
#include <string>

#include "kiln/module.h"
#include "kiln/vm/virtual_machine.h"

namespace kiln {
class Runtime;
}

namespace kiln::vm {

// True for "kvm" and "kvmt".
bool is_executable_format(const std::string& extension);
// Loads an executable file and its imports (through `runtime`); errors name the file and the
// import.
Module load_executable_file(const std::filesystem::path& path, Runtime& runtime);
// The executable module of a package: `bytecode` plus the package's host libraries by artifact
// name; each import of the executable must match one by base name (ValueError otherwise).
Module load_executable_package(const Artifact& bytecode, std::map<std::string, Module> libraries,
                               const std::string& package);

}  // namespace kiln::vm

#endif  // KILN_CORE_VM_VM_MODULE_H_
