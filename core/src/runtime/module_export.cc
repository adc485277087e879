// SPDX-License-Identifier: Apache-2.0
// Module::load and Module::export_library through a Runtime's loaders and exporters.
#include <fmt/format.h>

#include <map>

#include "ffi/error_object.h"
#include "kiln/error.h"
#include "kiln/module.h"
#include "kiln/runtime.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/atomic_file.hpp"
#include "plugin/loaded_plugin.h"

namespace kiln {

Module Module::load(const std::filesystem::path& path, const Runtime& runtime) {
  return runtime.load_module(path);
}

void Module::export_library(const std::filesystem::path& path, const std::string& exporter,
                            const Runtime& runtime) const {
  if (!obj_) throw ValueError("export_library on an undefined module");
  if (obj_->artifacts.empty()) {
    throw ValueError(
        fmt::format("module '{}' ({}) has no artifacts to export: it was not "
                    "loaded from files",
                    obj_->source(), obj_->kind()));
  }
  auto [table, plugin] = runtime.exporter(exporter);
  // load_module picks the loader by extension: a mismatch would make an unloadable file.
  const std::string extension = path.extension().string();
  if (table->output_format != nullptr && !extension.empty() &&
      extension != std::string(".") + table->output_format) {
    throw ValueError(fmt::format("exporter '{}' writes .{} files, but {} ends in {}", exporter,
                                 table->output_format, path.string(), extension));
  }
  if (obj_->self_contained && table->output_format != nullptr &&
      std::string_view(table->output_format) == "so") {
    // The file is already the shared library the exporter would make; wrapping it would only
    // hide it from its own loader.
    const Artifact& library = obj_->artifacts.front();
    try {
      sdk::write_file_atomically(
          path, std::string_view(reinterpret_cast<const char*>(library.data.data()),
                                 library.data.size()));
    } catch (const sdk::Error& e) {
      throw RuntimeError(
          fmt::format("exporting to {} with '{}': {}", path.string(), exporter, e.what()));
    }
    return;
  }
  // A package keys its members by file name, and loading resolves a VM executable's imports by
  // it: one name may stand for one content only. The same artifact reached twice (a library two
  // imports name) is written once.
  std::vector<KilnArtifact> artifacts;
  std::map<std::string, const Artifact*> by_name;
  for (const Artifact& a : obj_->artifacts) {
    const auto [seen, added] = by_name.emplace(a.name, &a);
    if (!added) {
      if (seen->second->role == a.role && seen->second->data == a.data) continue;
      throw ValueError(fmt::format(
          "cannot export module '{}' ({}) to {}: two of its artifacts are named '{}' but hold "
          "different bytes ({} '{}', {} and {} bytes), and a package keys its files by name (a "
          "VM executable importing two libraries of one file name from different folders): "
          "give them different file names",
          obj_->source(), obj_->kind(), path.string(), a.name, seen->second->role, a.role,
          seen->second->data.size(), a.data.size()));
    }
    artifacts.push_back(KilnArtifact{sizeof(KilnArtifact), a.name.c_str(), a.role.c_str(),
                                     a.data.data(), a.data.size()});
  }
  KilnExportRequest request{};
  request.struct_size = sizeof(request);
  request.module_kind = obj_->kind().c_str();
  request.entry_name = obj_->entry_name().empty() ? nullptr : obj_->entry_name().c_str();
  request.num_artifacts = static_cast<int32_t>(artifacts.size());
  request.artifacts = artifacts.data();
  const std::string target = path.string();
  if (KilnError* err = table->export_module(table->self, &request, target.c_str())) {
    ffi::raise_plugin_error(
        err, fmt::format("exporting to {} with '{}' (export_module of plugin '{}')", target,
                         exporter, plugin::name_of(plugin)));
  }
}

}  // namespace kiln
