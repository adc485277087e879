// SPDX-License-Identifier: Apache-2.0
// Module: a named set of functions (plus imported sub-modules), as loaded from a file by a
// loader plugin or built in C++.
#ifndef KILN_MODULE_H_
#define KILN_MODULE_H_

#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kiln/c/module.h"
#include "kiln/function.h"
#include "kiln/object.h"

namespace kiln {

class Runtime;

// One file a module is made of (what an exporter writes again).
struct Artifact {
  std::string name;  // base name inside a package, e.g. "lib0.so"
  std::string role;  // "host_library", "device_blob", "bytecode", "metadata"
  std::vector<uint8_t> data;
};

// The object behind a Module.
class ModuleObj : public Object {
 public:
  ModuleObj(std::string kind, std::string entry_name)
      : kind_(std::move(kind)), entry_name_(std::move(entry_name)) {}
  ~ModuleObj() override;

  // Adds a function; `name` must be new.
  void add_function(const std::string& name, Function f);
  // A module produced by a loader plugin: functions are looked up through `loaded` on first
  // use and cached. `plugin` stays loaded while the module lives; `loaded.release` runs in the
  // destructor.
  static Ref<ModuleObj> from_loader(const KilnLoadedModule& loaded, Ref<Object> plugin,
                                    std::string source);

  const std::string& kind() const { return kind_; }
  const std::string& entry_name() const { return entry_name_; }
  const std::string& source() const { return source_; }
  void set_source(std::string source) { source_ = std::move(source); }

  // For a module whose function set changes after it is made (a VM, whose save_function adds
  // names): `find` is asked on every lookup of a name not added with add_function, and
  // `names` on every listing; neither is cached. They must not hold this module (a cycle).
  struct FunctionSource {
    std::function<std::optional<Function>(const std::string&)> find;
    std::function<std::vector<std::string>()> names;
  };
  void set_function_source(FunctionSource source);

  std::optional<Function> find_function(const std::string& name);
  std::vector<std::string> function_names() const;
  std::vector<Ref<ModuleObj>> imports;
  std::vector<Artifact> artifacts;
  std::vector<KilnDeviceBlob> blobs;  // borrowed from the loader's module
  Ref<Object> payload;                // kind-specific data (e.g. a VM executable), or null
  // True when artifacts[0] alone loads back as this module (a TVM-compiled library): exporters
  // of one shared library ("so") then write a copy of it instead of wrapping it.
  bool self_contained = false;

 private:
  std::string kind_;
  std::string entry_name_;
  std::string source_;
  mutable std::mutex mu_;
  std::map<std::string, Function> functions_;      // added in C++
  std::map<std::string, KilnCallable> callables_;  // resolved through the loader
  std::vector<std::string> lazy_names_;
  FunctionSource source_fns_;
  KilnLoadedModule loaded_{};
  Ref<Object> plugin_;
};

class Module {
 public:
  Module() = default;
  explicit Module(Ref<ModuleObj> obj) : obj_(std::move(obj)) {}

  // Loads `path` with the loader that `runtime` has for its format (the text after the last
  // '.'; "dll", "dylib" and "dso" mean "so"). Throws NotFoundError for a missing file or a
  // format no loaded plugin reads (naming the formats that are available).
  static Module load(const std::filesystem::path& path, const Runtime& runtime);
  // API-edge default: load(path, Runtime::global()).
  static Module load(const std::filesystem::path& path);

  // The function `name` of this module or, failing that, of its imports (depth first).
  // Throws NotFoundError naming the module and listing its functions. Cached: a lookup is
  // paid once per name.
  Function get_function(const std::string& name) const;
  Function operator[](const std::string& name) const { return get_function(name); }
  bool has_function(const std::string& name) const;
  // The function named by entry_name(); NotFoundError when the module has none.
  Function entry() const;

  const std::string& kind() const { return obj_->kind(); }
  const std::string& entry_name() const { return obj_->entry_name(); }
  std::vector<std::string> function_names() const { return obj_->function_names(); }
  std::vector<Module> imports() const;
  void import_module(const Module& other) { obj_->imports.push_back(other.obj_); }
  const std::vector<Artifact>& artifacts() const { return obj_->artifacts; }
  // Writes this module to `path` with the exporter named `exporter` ("tar", "so", "ndk", ...)
  // of `runtime`. Throws NotFoundError for an unknown exporter, ValueError for a module with
  // nothing to export or with two artifacts of one name and different bytes (a package keys
  // its files by name; identical ones are written once), and the exporter's error (no partial
  // file is left behind).
  void export_library(const std::filesystem::path& path, const std::string& exporter,
                      const Runtime& runtime) const;
  // API-edge default: export_library(path, exporter, Runtime::global()).
  void export_library(const std::filesystem::path& path, const std::string& exporter = "tar") const;
  bool defined() const { return static_cast<bool>(obj_); }
  ModuleObj* get() const { return obj_.get(); }

 private:
  Ref<ModuleObj> obj_;
};

// Shorthand for Module::load(path).
inline Module load_module(const std::filesystem::path& path) { return Module::load(path); }

}  // namespace kiln

#endif  // KILN_MODULE_H_
