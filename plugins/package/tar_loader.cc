// SPDX-License-Identifier: Apache-2.0
#include "tar_loader.h"

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "archive_reader.h"
#include "kiln/sdk/plugin.hpp"
#include "kiln/sdk/support/sha256.hpp"
#include "package_manifest.h"
#include "tvm_objects.h"

namespace kiln::package {
namespace {

// The module kind that tells the host to load the package's host library itself.
constexpr const char* kPackageKind = "kiln.package";

// What a KilnLoadedModule's `handle` points to: the storage behind the module's pointers.
struct LoadedPackage {
  PackageManifest manifest;
  std::vector<std::vector<uint8_t>> data;  // in manifest order
  std::vector<KilnArtifact> artifacts;     // point into `manifest` and `data`
};

// Throws kiln::sdk::Error(KILN_ERROR_VALUE, message).

// A package of one host library: TVM's object files linked together (tvm_objects.h).
std::unique_ptr<LoadedPackage> linked_tvm_package(const std::vector<ArchiveFile>& files,
                                                  const std::string& path) {
  auto package = std::make_unique<LoadedPackage>();
  std::string stem = std::filesystem::path(path).stem().string();
  package->manifest.module_kind = "tvm_ffi_library";
  package->manifest.artifacts.push_back(ManifestArtifact{});
  ManifestArtifact& a = package->manifest.artifacts.back();
  a.name = (stem.empty() ? std::string("tvm") : stem) + ".so";
  a.role = "host_library";
  package->data.push_back(link_tvm_objects(files, path));
  a.size = package->data.back().size();
  KilnArtifact artifact = sdk::make_table<KilnArtifact>();
  artifact.name = a.name.c_str();
  artifact.role = a.role.c_str();
  artifact.data = package->data.back().data();
  artifact.size = package->data.back().size();
  package->artifacts.push_back(artifact);
  return package;
}

// Reads and checks the package at `path`; see make_tar_loader.
std::unique_ptr<LoadedPackage> read_package(const std::string& path) {
  std::vector<ArchiveFile> files = read_flat_archive(path);
  std::map<std::string, std::vector<uint8_t>*> by_name;
  for (ArchiveFile& f : files) by_name.emplace(f.name, &f.data);

  const auto manifest_file = by_name.find(kManifestName);
  if (manifest_file == by_name.end()) {
    if (is_tvm_object_archive(files)) return linked_tvm_package(files, path);
    sdk::throw_value_error(path + ": no entry '" + kManifestName +
                           "': not a Kiln module package (nor a TVM "
                           "export of object files)");
  }
  const std::vector<uint8_t>& text = *manifest_file->second;
  auto package = std::make_unique<LoadedPackage>();
  package->manifest =
      parse_manifest(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()),
                     path + ": entry '" + kManifestName + "'");
  by_name.erase(manifest_file);

  for (const ManifestArtifact& a : package->manifest.artifacts) {
    const std::string where = path + ": entry '" + a.name + "'";
    const auto it = by_name.find(a.name);
    if (it == by_name.end())
      sdk::throw_value_error(where + ", listed in " + kManifestName + ", is missing");
    std::vector<uint8_t>& data = *it->second;
    if (data.size() != a.size) {
      sdk::throw_value_error(where + " has " + std::to_string(data.size()) + " bytes but " +
                             kManifestName + " says " + std::to_string(a.size));
    }
    if (!a.sha256.empty()) {
      const std::string actual = sdk::Sha256::hex(sdk::Sha256::of(data.data(), data.size()));
      if (actual != a.sha256) {
        sdk::throw_value_error(where, " has SHA-256 ", actual, " but ", kManifestName, " says ",
                               a.sha256, ": the package is corrupt or was altered");
      }
    }
    package->data.push_back(std::move(data));
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    sdk::throw_value_error(path + ": entry '" + by_name.begin()->first + "' is not listed in " +
                           kManifestName);
  }
  for (size_t i = 0; i < package->manifest.artifacts.size(); ++i) {
    const ManifestArtifact& a = package->manifest.artifacts[i];
    KilnArtifact artifact = sdk::make_table<KilnArtifact>();
    artifact.name = a.name.c_str();
    artifact.role = a.role.c_str();
    artifact.data = package->data[i].data();
    artifact.size = package->data[i].size();
    package->artifacts.push_back(artifact);
  }
  return package;
}

// KilnLoadedModule::release: frees the package.
void release(void* handle) { delete static_cast<LoadedPackage*>(handle); }

// KilnLoader::load_file; see make_tar_loader.
KilnError* load_file(void* /*self*/, const char* path, KilnLoadedModule* out) {
  return sdk::guard("tar loader", [&] {
    if (path == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "path is NULL");
    if (out == nullptr || out->struct_size < KILN_LOADED_MODULE_SIZE_1_0) {
      throw sdk::Error(KILN_ERROR_ABI,
                       "KilnLoadedModule from the host is smaller than its 1.0 layout");
    }
    std::unique_ptr<LoadedPackage> package = read_package(path);
    out->kind = kPackageKind;
    out->entry_name =
        package->manifest.entry_name ? package->manifest.entry_name->c_str() : nullptr;
    out->num_functions = 0;
    out->function_names = nullptr;
    out->get_function = nullptr;
    out->num_blobs = 0;
    out->blobs = nullptr;
    out->num_artifacts = static_cast<int32_t>(package->artifacts.size());
    out->artifacts = package->artifacts.data();
    out->release = &release;
    out->handle = package.release();
  });
}

}  // namespace

KilnLoader make_tar_loader() {
  KilnLoader loader = sdk::make_table<KilnLoader>();
  loader.load_file = &load_file;
  return loader;
}

}  // namespace kiln::package
