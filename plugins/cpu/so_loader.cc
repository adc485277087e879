// SPDX-License-Identifier: Apache-2.0
#include "so_loader.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "kernel_library.h"
#include "kiln/sdk/plugin.hpp"
#include "plugin_state.h"

namespace kiln::cpu {
namespace {

// What a KilnLoadedModule's `handle` points to: the library plus the storage behind the
// module's pointers.
struct LoadedModule {
  std::unique_ptr<KernelLibrary> library;
  std::vector<uint8_t> bytes;
  std::string base_name;
  KilnArtifact artifact{};
};

// Reads the whole file at `path`; throws KILN_ERROR_RUNTIME when it cannot.
std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw sdk::Error(KILN_ERROR_RUNTIME, "cannot read " + path + ": " + std::strerror(errno));
  }
  std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw sdk::Error(KILN_ERROR_RUNTIME, "error reading " + path);
  return bytes;
}

// The part of `path` after its last slash.
std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// KilnLoadedModule::get_function: fills `out` with function `name` of the module `handle`.
// NOT_FOUND lists the available names; `out` stays valid until release.
KilnError* get_function(void* handle, const char* name, KilnCallable* out) {
  return sdk::guard("so loader", [&] {
    if (out == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "get_function: out is NULL");
    const KilnKernelFunction& f = static_cast<LoadedModule*>(handle)->library->function(name);
    out->call = f.fn;
    out->self = f.self;
  });
}

// KilnLoadedModule::release: dlclose()s the library and frees the module's storage.
void release(void* handle) { delete static_cast<LoadedModule*>(handle); }

// KilnLoader::load_file; see make_so_loader.
KilnError* load_file(void* self, const char* path, KilnLoadedModule* out) {
  return sdk::guard("so loader", [&] {
    if (path == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "path is NULL");
    if (out == nullptr || out->struct_size < KILN_LOADED_MODULE_SIZE_1_0) {
      throw sdk::Error(KILN_ERROR_ABI,
                       "KilnLoadedModule from the host is smaller than its 1.0 layout");
    }
    auto& state = *static_cast<PluginState*>(self);
    auto module = std::make_unique<LoadedModule>();
    // Opened first so that a missing file is reported as NOT_FOUND by the library code.
    module->library = KernelLibrary::open_file(path, kernel_library_options(state));
    module->bytes = read_file(path);
    module->base_name = base_name(path);
    module->artifact = sdk::make_table<KilnArtifact>();
    module->artifact.name = module->base_name.c_str();
    module->artifact.role = "host_library";
    module->artifact.data = module->bytes.data();
    module->artifact.size = module->bytes.size();

    const KernelLibrary& library = *module->library;
    const KilnKernelLibrary& table = library.table();
    out->kind = "kernel_library";
    out->entry_name = table.entry_name;
    out->num_functions = static_cast<int32_t>(library.function_names().size());
    out->function_names = library.function_names().data();
    out->get_function = &get_function;
    out->num_blobs = table.num_blobs;
    out->blobs = table.blobs;
    out->num_artifacts = 1;
    out->artifacts = &module->artifact;
    out->release = &release;
    out->handle = module.release();
  });
}

}  // namespace

KilnLoader make_so_loader(PluginState* state) {
  KilnLoader loader = sdk::make_table<KilnLoader>();
  loader.self = state;
  loader.load_file = &load_file;
  return loader;
}

}  // namespace kiln::cpu
