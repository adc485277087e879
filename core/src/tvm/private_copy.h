// SPDX-License-Identifier: Apache-2.0
// A private copy of a TVM-compiled library: what Kiln dlopens instead of the file itself, so
// that a TVM runtime in the same process and Kiln never share anything the library holds.
//
// The dynamic loader hands out one object per file: TVM's loader and Kiln's would fill the same
// context symbols (__TVMBackendAllocWorkspace, __TVMBackendParallelLaunch, ...) and each would
// overwrite the other's. And the tvm-ffi functions the code imports bind process-wide: had Kiln
// defined them under tvm-ffi's names, TVM's own libraries loaded later would bind to Kiln's. So
// Kiln loads the bytes, with those imports renamed to Kiln's private names
// (tvm/tvm_ffi_abi.h, kFfiImports), as a new object every time, whatever else loaded the path.
// The dynamic loader knows a library by the name it was opened under: a copy is opened from an
// anonymous memory file under a /proc/self/fd name that no loaded object has (probed, since a
// descriptor number comes back once closed), and the handle dlopen() returns is claimed
// (kiln/sdk/support/library_claims.hpp): a handle another copy holds is an error, never shared.
// docs/tvm-interop.md, "Beside TVM", says why this mechanism was chosen.
#ifndef KILN_TVM_PRIVATE_COPY_H_
#define KILN_TVM_PRIVATE_COPY_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tvm/elf_symbols.h"

namespace kiln::tvm_interop {

// Renames, in `file` (the library's bytes, `symbols` its dynamic symbols as read from them),
// every undefined symbol of kFfiImports to its private name. The names are rewritten in place in
// the dynamic string table (same length). Throws ValueError naming `where` when a renamed name
// shares its bytes with a symbol that must keep its name (a string-table tail shared by the
// linker), which would rename that one too.
void rename_ffi_imports(std::vector<uint8_t>& file, const std::vector<ElfSymbol>& symbols,
                        const std::string& where);

// dlopen()s `bytes` (RTLD_NOW | RTLD_LOCAL) as a new object: from an anonymous memory file
// (memfd) named after `name`, else (no memfd_create, no /proc) from a temporary file under a name
// no loaded object has, removed once loaded. Returns the handle, claimed for the caller alone:
// release it with kiln::sdk::close_claimed_library. Throws RuntimeError naming `where` with
// dlerror()'s reason, or when the dynamic loader returned an object that another copy holds.
void* load_private_copy(std::span<const uint8_t> bytes, const std::string& name,
                        const std::string& where);

}  // namespace kiln::tvm_interop

#endif  // KILN_TVM_PRIVATE_COPY_H_
