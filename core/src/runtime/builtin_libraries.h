// SPDX-License-Identifier: Apache-2.0
// Builtin libraries (docs/architecture.md, "Builtin libraries"): shared libraries of global
// functions that a process without them linked in loads at one documented point, so that
// libkiln never includes or links them. The one Kiln ships is libkiln_llm.so (the LLM runtime's
// VM builtins, docs/llm.md); an RPC session's process (kiln-rpc-session) loads the set when it
// starts, so that a model library uploaded to a board finds them there.
//
// Which libraries: $KILN_BUILTIN_LIBRARIES, ':'-separated; unset, "libkiln_llm.so"; set and
// empty, none. A bare file name is looked for beside libkiln (<prefix>/lib in an install,
// <build>/lib in a build tree); a name with a '/' is a path. Each is opened with
// dlopen(RTLD_NOW | RTLD_LOCAL), never closed, and its C entry point kBuiltinLibraryEntry is
// called once with the process's DeviceContext.
#ifndef KILN_SRC_RUNTIME_BUILTIN_LIBRARIES_H_
#define KILN_SRC_RUNTIME_BUILTIN_LIBRARIES_H_

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/device_context.h"

namespace kiln {

// The symbol every builtin library exports, of type BuiltinLibraryEntry.
inline constexpr const char* kBuiltinLibraryEntry = "kiln_register_builtins";
// Registers the library's global functions for `device_context` (a `const DeviceContext*` of
// the caller's libkiln, which the functions may retain). Returns 0; on failure nonzero, with a
// NUL-terminated reason in `error` (`error_size` bytes). Must not throw.
using BuiltinLibraryEntry = int (*)(const void* device_context, char* error, size_t error_size);

// The environment variable that lists the libraries, and the list when it is unset.
inline constexpr const char* kBuiltinLibrariesVariable = "KILN_BUILTIN_LIBRARIES";
inline constexpr const char* kDefaultBuiltinLibraries = "libkiln_llm.so";

// What became of one library.
struct BuiltinLibraryLoad {
  std::string name;            // as listed ("libkiln_llm.so", "/opt/vendor/libattn.so")
  std::filesystem::path path;  // where it was opened or looked for
  bool loaded = false;         // its entry point returned 0
  std::string why_not;         // empty when loaded
  size_t new_functions = 0;    // global function names it added (it may also replace some)
};

// The libraries `variable` lists (the value of $KILN_BUILTIN_LIBRARIES; null: unset).
std::vector<std::string> builtin_library_names(const char* variable);

// Loads every library $KILN_BUILTIN_LIBRARIES lists and calls its entry point with `context`,
// in order; returns what became of each. Never throws: a library that cannot be opened, lacks
// the entry point or whose entry point fails is logged (debug level when the default
// libkiln_llm.so is simply absent, warn otherwise) and skipped. When libkiln_llm.so is not
// loaded (absent, failed, or not listed), each of its builtins that nothing registered is
// registered as a stub that throws NotFoundError naming the library and why it is not loaded,
// so a VM that calls one says what is missing instead of "Cannot find function". Loads are
// logged at debug level (KILN_LOG=debug). Meant to run once, at a process's start.
std::vector<BuiltinLibraryLoad> load_builtin_libraries(const DeviceContext& context);

}  // namespace kiln

#endif  // KILN_SRC_RUNTIME_BUILTIN_LIBRARIES_H_
