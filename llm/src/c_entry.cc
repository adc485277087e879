// SPDX-License-Identifier: Apache-2.0
// libkiln_llm's C entry point as a builtin library (docs/architecture.md, "Builtin libraries"):
// a process that does not link libkiln_llm (an RPC session's kiln-rpc-session) dlopens it and
// calls this one symbol, so core never includes or links the LLM runtime.
#include <cstddef>
#include <cstdio>
#include <exception>

#include "kiln/device_context.h"
#include "kiln/llm/builtins.h"

// Registers the LLM runtime's VM builtins (kiln::llm::register_builtins) for the DeviceContext
// at `device_context` (a `const kiln::DeviceContext*` of the caller's libkiln, the same build as
// this library's; the builtins keep it alive). Returns 0; on failure nonzero, with the reason
// written NUL-terminated into `error` (`error_size` bytes, may be 0). Nothing is thrown across
// it. The name is the one every builtin library exports (runtime/builtin_libraries.h).
extern "C" __attribute__((visibility("default"))) int kiln_register_builtins(
    const void* device_context, char* error, size_t error_size);

namespace {

int fail(char* error, size_t error_size, const char* what) {
  if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", what);
  return 1;
}

}  // namespace

extern "C" int kiln_register_builtins(const void* device_context, char* error, size_t error_size) {
  if (device_context == nullptr) {
    return fail(error, error_size, "kiln_register_builtins: the device context is null");
  }
  try {
    kiln::llm::register_builtins(*static_cast<const kiln::DeviceContext*>(device_context));
    return 0;
  } catch (const std::exception& e) {
    return fail(error, error_size, e.what());
  } catch (...) {
    return fail(error, error_size,
                "kiln_register_builtins: an exception that is not a "
                "std::exception");
  }
}
