// SPDX-License-Identifier: Apache-2.0
// The host's definition of the ABI's opaque KilnError, and the host services table that
// creates them. Plugins only ever see the opaque type.
#ifndef KILN_SRC_FFI_ERROR_OBJECT_H_
#define KILN_SRC_FFI_ERROR_OBJECT_H_

#include <string>
#include <string_view>

#include "kiln/c/host.h"

struct KilnError {
  int32_t code;
  std::string message;
};

namespace kiln::ffi {

// Creates an error owned by the caller (free with delete or host_services().error_free).
KilnError* new_error(int32_t code, const std::string& message);

// Frees `error` (not null), which a plugin slot returned, and throws the kiln error of its code
// with "<context>: " in front of its message (the message alone when `context` is empty).
// The one place plugin errors are released and raised.
[[noreturn]] void raise_plugin_error(KilnError* error, std::string_view context);
// Frees `error` (not null) and returns its message, for callers that log or wrap it.
std::string release_error(KilnError* error) noexcept;

// The host services every plugin receives. Static storage; lives for the process.
const KilnHostServices& host_services();

}  // namespace kiln::ffi

#endif  // KILN_SRC_FFI_ERROR_OBJECT_H_
