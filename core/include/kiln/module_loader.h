// SPDX-License-Identifier: Apache-2.0
// Module loading: a registry of format loaders. The VM (executables), device code, packages and
// plugins' loaders each register a FormatLoader; ModuleLoaderRegistry::load picks the one for a
// file. Loaders that open further files (imports, a package's host library) do so through their
// ModuleLoadContext, so one policy (which paths may be opened, how deep imports may nest)
// governs every file a load touches.
#ifndef KILN_MODULE_LOADER_H_
#define KILN_MODULE_LOADER_H_

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/module.h"

namespace kiln {

class DeviceContext;

// What one load may do.
struct ModuleLoadOptions {
  // Called with the absolute, normalised path of every file the load is about to open (the
  // module, the modules it imports, device code sidecars); throws to refuse it, and the error
  // reaches the caller unchanged. Empty: every path may be opened.
  std::function<void(const std::filesystem::path&)> check_path;
  // How deep nested loads may go (a module importing a module importing ...). Deeper, and any
  // module that imports itself directly or indirectly, is a ValueError.
  int max_depth = 16;
};

class ModuleLoaderRegistry;

// The state of one load_module call, handed to format loaders.
class ModuleLoadContext {
 public:
  ModuleLoadContext(const ModuleLoaderRegistry& registry, const DeviceContext& devices,
                    const ModuleLoadOptions& options);

  // The devices loaded modules run on (device code needs their backends).
  const DeviceContext& devices() const { return devices_; }
  // Loads `path` (an import, a sidecar's module, ...) one level deeper, under the same options.
  // Throws ValueError naming the chain for a cycle or nesting deeper than max_depth, and
  // whatever loading `path` throws.
  Module load_nested(const std::filesystem::path& path);
  // As load_nested, for a file this load wrote itself (a package member extracted into a
  // private temporary directory): depth and cycle checks apply, the path policy does not.
  Module load_member(const std::filesystem::path& path);
  // Applies options.check_path to `path` (made absolute); for loaders that open files besides
  // the one they were asked to load.
  void check_path(const std::filesystem::path& path) const;

 private:
  friend class ModuleLoaderRegistry;
  Module load_here(const std::filesystem::path& path, bool apply_policy);
  // ValueError when `id` (a file with symlinks resolved) is already being loaded, or one more
  // level would pass max_depth.
  void check_nesting(const std::filesystem::path& id) const;

  const ModuleLoaderRegistry& registry_;
  const DeviceContext& devices_;
  const ModuleLoadOptions& options_;
  std::vector<std::filesystem::path> chain_;  // the files being loaded, outermost first
};

// One way of reading module files.
class FormatLoader {
 public:
  virtual ~FormatLoader() = default;
  // For diagnostics: "VM executables", "plugin 'package' loader for .tar".
  virtual std::string describe() const = 0;
  // The file extensions (without '.') this loader reads, for listings.
  virtual std::vector<std::string> formats() const = 0;
  // Whether this loader reads `path`, whose extension (lower-level aliases already mapped:
  // dll, dylib and dso are "so") is `format`.
  virtual bool accepts(const std::filesystem::path& path, const std::string& format) const = 0;
  // Loads `path` (already checked against the context's policy). Throws kiln errors that say
  // what is wrong and where.
  virtual Module load(const std::filesystem::path& path, ModuleLoadContext& context) const = 0;
};

// The format loaders of one Runtime, asked in order of priority (higher first), then of
// registration. Filled while the Runtime is constructed; read-only afterwards.
class ModuleLoaderRegistry {
 public:
  // Priorities of the built-in loaders: a plugin's loader for an extension wins over the
  // host's own readers, which claim fixed extensions before device code guesses by sidecar.
  // TVM-compiled libraries are "so" files too, told apart by their exported symbols, so their
  // reader is asked before plugins' "so" loaders.
  static constexpr int kTvmLibraryPriority = 110;
  static constexpr int kPluginPriority = 100;
  static constexpr int kExecutablePriority = 50;
  static constexpr int kDeviceCodePriority = 10;

  void add(std::shared_ptr<const FormatLoader> loader, int priority);

  // Loads `path` with the first loader that accepts it. Throws NotFoundError for a missing
  // file or a format nobody reads (listing the formats that are read), ValueError for a name
  // without an extension, and the loader's error otherwise.
  Module load(const std::filesystem::path& path, const DeviceContext& devices,
              const ModuleLoadOptions& options = {}) const;
  // Every extension some loader reads, sorted, each once.
  std::vector<std::string> formats() const;

 private:
  friend class ModuleLoadContext;
  const FormatLoader* find(const std::filesystem::path& path, const std::string& format) const;

  struct Entry {
    int priority;
    std::shared_ptr<const FormatLoader> loader;
  };
  std::vector<Entry> loaders_;  // sorted by priority, stable
};

}  // namespace kiln

#endif  // KILN_MODULE_LOADER_H_
