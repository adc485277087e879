// SPDX-License-Identifier: Apache-2.0
// Format loaders backed by plugins' KilnLoader tables, and the registration of the host's own.
#include "runtime/module_formats.h"

#include <fmt/format.h>

#include "ffi/error_object.h"
#include "kiln/error.h"
#include "module/format_loaders.h"
#include "runtime/package_loader.h"
#include "tvm/library_module.h"
#include "tvm/relax_executable.h"
#include "vm/vm_module.h"

namespace kiln {

namespace fs = std::filesystem;

namespace {

// Files of one extension, read by a plugin's loader.
class PluginFormatLoader : public FormatLoader {
 public:
  PluginFormatLoader(std::string format, const KilnLoader* table, Ref<plugin::LoadedPlugin> plugin)
      : format_(std::move(format)), table_(table), plugin_(std::move(plugin)) {}

  std::string describe() const override {
    return fmt::format("plugin '{}' loader for .{}", plugin_->name, format_);
  }
  std::vector<std::string> formats() const override { return {format_}; }
  bool accepts(const fs::path&, const std::string& format) const override {
    return format == format_;
  }
  Module load(const fs::path& path, ModuleLoadContext& context) const override {
    KilnLoadedModule loaded{};
    loaded.struct_size = sizeof(loaded);
    const std::string path_text = fs::absolute(path).string();
    if (KilnError* err = table_->load_file(table_->self, path_text.c_str(), &loaded)) {
      ffi::raise_plugin_error(err, fmt::format("loading {} (load_file of plugin '{}' loader '{}')",
                                               path.string(), plugin_->name, format_));
    }
    auto obj = ModuleObj::from_loader(loaded, plugin_, path.string());
    if (obj->kind() != kPackageKind) return Module(std::move(obj));
    return load_package(std::move(obj), path, context);
  }

 private:
  std::string format_;
  const KilnLoader* table_;  // owned by plugin_
  Ref<plugin::LoadedPlugin> plugin_;
};

}  // namespace

void register_plugin_loader(ModuleLoaderRegistry& registry, const Ref<plugin::LoadedPlugin>& plugin,
                            size_t index) {
  registry.add(std::make_shared<PluginFormatLoader>(plugin->loader_names[index],
                                                    plugin->loaders[index].get(), plugin),
               ModuleLoaderRegistry::kPluginPriority);
}

void register_host_loaders(ModuleLoaderRegistry& registry) {
  registry.add(tvm_interop::tvm_library_format_loader(), ModuleLoaderRegistry::kTvmLibraryPriority);
  registry.add(vm::executable_format_loader(), ModuleLoaderRegistry::kExecutablePriority);
  registry.add(tvm_interop::relax_executable_format_loader(),
               ModuleLoaderRegistry::kExecutablePriority);
  registry.add(device_code_format_loader(), ModuleLoaderRegistry::kDeviceCodePriority);
}

}  // namespace kiln
