// SPDX-License-Identifier: Apache-2.0
// Libraries TVM's export_library writes (tvm-ffi ABI): recognised by their exported
// `__tvm_ffi_*` symbols, loaded with Kiln answering the runtime calls their code makes.
#ifndef KILN_TVM_LIBRARY_MODULE_H_
#define KILN_TVM_LIBRARY_MODULE_H_

#include <memory>

#include "kiln/module_loader.h"

namespace kiln::tvm_interop {

// The module kind of a TVM-compiled host library.
inline constexpr const char* kTvmLibraryKind = "tvm_ffi_library";

// The format loader for tvm-ffi libraries ("so" files that export `__tvm_ffi_*` symbols). It
// must be asked before plugins' "so" loaders (ModuleLoaderRegistry::kTvmLibraryPriority).
std::shared_ptr<const FormatLoader> tvm_library_format_loader();

}  // namespace kiln::tvm_interop

#endif  // KILN_TVM_LIBRARY_MODULE_H_
