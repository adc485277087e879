// SPDX-License-Identifier: Apache-2.0
// Who answers the tvm-ffi C functions that Kiln's copies of TVM-compiled libraries import:
// Kiln's libkiln_tvm_ffi_abi, under Kiln-private names (tvm/tvm_ffi_abi.h, kFfiImports), loaded
// on first use. Never a libtvm_ffi.so in the process: Kiln and TVM keep their own error state.
// Process state by nature: the dynamic linker binds those names process-wide.
#ifndef KILN_TVM_FFI_PROVIDER_H_
#define KILN_TVM_FFI_PROVIDER_H_

#include <string>

#include "tvm/tvm_ffi_abi.h"

namespace kiln::tvm_interop {

struct FfiProvider {
  void (*move_from_raised)(void** result);
  int (*dec_ref)(void* object);
  std::string origin;  // the library that answers, for messages
};

// The provider, made available on first call. Throws UnavailableError saying why when
// libkiln_tvm_ffi_abi cannot be loaded (then no TVM library can run).
const FfiProvider& ffi_provider();

// Takes the error raised on this thread (after compiled code returned nonzero) and throws it as
// the kiln error of its kind (ValueError, TypeError, IndexError, ...), its message prefixed by
// `context`. When nothing was raised, throws RuntimeError saying the call returned `rc`.
[[noreturn]] void raise_ffi_error(int rc, const std::string& context);

}  // namespace kiln::tvm_interop

#endif  // KILN_TVM_FFI_PROVIDER_H_
