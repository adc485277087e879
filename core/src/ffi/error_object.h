// The host's definition of the ABI's opaque KilnError, and the host services table that
// creates them. Plugins only ever see the opaque type.
#ifndef KILN_SRC_FFI_ERROR_OBJECT_H_
#define KILN_SRC_FFI_ERROR_OBJECT_H_

#include <string>

#include "kiln/c/host.h"

struct KilnError {
  int32_t code;
  std::string message;
};

namespace kiln::ffi {

// Creates an error owned by the caller (free with delete or host_services().error_free).
KilnError* new_error(int32_t code, const std::string& message);

// The host services every plugin receives. Static storage; lives for the process.
const KilnHostServices& host_services();

}  // namespace kiln::ffi

#endif  // KILN_SRC_FFI_ERROR_OBJECT_H_
