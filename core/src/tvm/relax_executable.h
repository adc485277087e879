// SPDX-License-Identifier: Apache-2.0
// TVM's Relax VM executable (`relax.VMExecutable`, SPEC.md §2.15) read onto Kiln's VM
// executable: the function table, constants and instruction words map one to one (the
// instruction encoding is the same), so Kiln's VirtualMachine runs what relax.build produced.
#ifndef KILN_TVM_RELAX_EXECUTABLE_H_
#define KILN_TVM_RELAX_EXECUTABLE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kiln/module_loader.h"
#include "kiln/vm/executable.h"

namespace kiln::tvm_interop {

// Whether `bytes` start with a VMExecutable magic (V1 or V2).
bool is_relax_executable(std::span<const uint8_t> bytes);

// Reads a VMExecutable (SaveToBytes / write_to_file) into a validated Kiln executable. Throws
// ValueError naming `where`, the section and the byte offset for a truncated or corrupt
// executable, a version other than "0.14", an unknown constant tag or function kind, a tensor
// constant not on the CPU, and anything Executable::validate() rejects (unknown opcodes,
// registers or indices out of range).
vm::Executable read_relax_executable(std::span<const uint8_t> bytes, const std::string& where);

// The loader of VMExecutable files (as `ex.mod.write_to_file` writes them), recognised by their
// magic whatever their extension. The kernels the program calls are not in such a file: they
// resolve against the global functions, or against a kernel library given to the VM.
std::shared_ptr<const FormatLoader> relax_executable_format_loader();

}  // namespace kiln::tvm_interop

#endif  // KILN_TVM_RELAX_EXECUTABLE_H_
