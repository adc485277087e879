// A loaded SDK-built kernel library: its dlopen handle, environment and validated table.
#ifndef KILN_PLUGINS_CPU_KERNEL_LIBRARY_H_
#define KILN_PLUGINS_CPU_KERNEL_LIBRARY_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernel_env.h"
#include "kiln/c/kernel.h"

namespace kiln::cpu {

class PluginState;

// One loaded kernel library, shared by the "so" loader and the cpu backend's module_load.
// Every pointer it hands out (names, functions, blobs) lives until it is destroyed, which
// dlclose()s the library and then drops its environment. Not copyable.
class KernelLibrary {
 public:
  // dlopen()s the file at `path` and initialises it. Throws kiln::sdk::Error:
  // KILN_ERROR_NOT_FOUND when the file does not exist, KILN_ERROR_VALUE when the dynamic
  // loader rejects it (with the dlerror() text) or it is not a Kiln kernel library, and the
  // errors of initialise() below.
  static std::unique_ptr<KernelLibrary> open_file(PluginState& state, const std::string& path);
  // Loads `size` bytes at `data` (borrowed; copied) through a memory file and initialises
  // them, as open_file() does.
  static std::unique_ptr<KernelLibrary> open_bytes(PluginState& state, const void* data,
                                                   size_t size);
  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;
  ~KernelLibrary();

  // The path, or a description for an in-memory library, as used in messages.
  const std::string& label() const { return label_; }
  // The library's table (borrowed from the library).
  // The library's table as this plugin compiled KilnKernelLibrary (zero-extended copy).
  const KilnKernelLibrary& table() const { return table_; }
  // The function names in table order (borrowed from the library).
  const std::vector<const char*>& function_names() const { return names_; }
  // Finds function `name` (borrowed); throws kiln::sdk::Error(KILN_ERROR_NOT_FOUND) listing
  // the available names, or KILN_ERROR_VALUE for a NULL name.
  const KilnKernelFunction& function(const char* name) const;

 private:
  // Takes ownership of `dl` (a dlopen handle) at once, so that a failing initialise() still
  // closes it.
  KernelLibrary(void* dl, std::string label);
  // Looks up kiln_kernel_library, calls it with the shared environment and validates the
  // table. Throws kiln::sdk::Error: KILN_ERROR_VALUE for a missing symbol, a malformed table,
  // duplicate function names or an entry that is not a function; KILN_ERROR_ABI for a NULL
  // table, one smaller than the 1.0 layout, another major version or a newer minor.
  void initialise(PluginState& state);
  // Lists the function names, for NOT_FOUND messages.
  std::string available() const;

  void* dl_;
  std::string label_;
  std::shared_ptr<KernelEnv> env_;
  KilnKernelLibrary table_{};
  std::vector<const char*> names_;
  std::unordered_map<std::string_view, const KilnKernelFunction*> by_name_;
};

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_KERNEL_LIBRARY_H_
