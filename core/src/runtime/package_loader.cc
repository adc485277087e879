// SPDX-License-Identifier: Apache-2.0
// Module packages: a loader plugin reads the package (kiln.package kind) and hands over its
// artifacts; the host library, device code and bytecode in it become one module here.
#include "runtime/package_loader.h"

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "kiln/device_code.h"
#include "kiln/error.h"
#include "kiln/temp_dir.h"
#include "vm/vm_module.h"

namespace kiln {

namespace fs = std::filesystem;

namespace {

// Loads the host library artifact `host` of `package` with the loader for its own format.
Module load_package_library(ModuleLoadContext& context, const Artifact& host, const fs::path& dir,
                            const fs::path& package) {
  // Loaded from a private temporary copy: the library stays mapped after the copy is removed.
  const fs::path lib = dir / host.name;
  {
    std::ofstream out(lib, std::ios::binary);
    out.write(reinterpret_cast<const char*>(host.data.data()),
              static_cast<std::streamsize>(host.data.size()));
    out.close();
    if (!out) throw RuntimeError(fmt::format("cannot write {}", lib.string()));
  }
  try {
    return context.load_member(lib);
  } catch (const Error& e) {
    // Name the package, not the temporary copy the message mentions.
    throw_error(e.code(), fmt::format("{} (host library '{}' of package {})", e.what(), host.name,
                                      package.string()));
  }
}

// A package with a VM executable: every host library is loaded, and the executable's imports
// resolve against them by name.
Module load_vm_package(ModuleLoadContext& context, const Artifact& bytecode,
                       const std::vector<const Artifact*>& hosts, const fs::path& path,
                       const std::vector<Artifact>& artifacts) {
  const TemporaryDirectory dir("kiln_package_");
  std::map<std::string, Module> libraries;
  for (const Artifact* host : hosts) {
    libraries[host->name] = load_package_library(context, *host, dir.path(), path);
  }
  Module m =
      vm::load_executable_package(bytecode, std::move(libraries), path.string(), context.devices());
  m.get()->artifacts = artifacts;
  m.get()->set_source(path.string());
  return m;
}

}  // namespace

Module load_package(Ref<ModuleObj> package, const fs::path& path, ModuleLoadContext& context) {
  // A package carries its artifacts: at most one host library, loaded by the loader for its
  // own format from a private temporary copy (the library stays mapped after removal), and
  // device code blobs, each with its metadata artifact "<name>.json".
  const Artifact* host = nullptr;
  const Artifact* bytecode = nullptr;
  std::vector<const Artifact*> hosts;
  std::map<std::string, const Artifact*> metadata;
  std::vector<const Artifact*> device_blobs;
  // Names key everything below (a blob's metadata, a VM executable's imports, the files written
  // for the host libraries): one name is one artifact, whatever loader read the package.
  std::set<std::string> names;
  for (const Artifact& a : package->artifacts) {
    if (a.name.empty() || a.name.find('/') != std::string::npos || a.name == "." ||
        a.name == "..") {
      throw ValueError(fmt::format("package {}: bad artifact name '{}'", path.string(), a.name));
    }
    if (!names.insert(a.name).second) {
      throw ValueError(
          fmt::format("package {}: two artifacts are named '{}'; a package's names must be unique",
                      path.string(), a.name));
    }
    if (a.role == "host_library") {
      hosts.push_back(&a);
      host = &a;
    } else if (a.role == "bytecode") {
      if (bytecode != nullptr) {
        throw ValueError(
            fmt::format("package {} has more than one bytecode artifact", path.string()));
      }
      bytecode = &a;
    } else if (a.role == "device_blob") {
      device_blobs.push_back(&a);
    } else if (a.role == "metadata") {
      metadata[a.name] = &a;
    }
  }
  if (bytecode != nullptr)
    return load_vm_package(context, *bytecode, hosts, path, package->artifacts);
  if (hosts.size() > 1) {
    throw ValueError(fmt::format("package {} has more than one host_library", path.string()));
  }
  if (host == nullptr && device_blobs.empty()) {
    throw ValueError(
        fmt::format("package {} has no host_library and no device_blob artifact", path.string()));
  }
  Module device_code;
  if (!device_blobs.empty()) {
    std::vector<DeviceCode> blobs;
    for (const Artifact* blob : device_blobs) {
      auto meta = metadata.find(blob->name + ".json");
      if (meta == metadata.end()) {
        throw ValueError(
            fmt::format("package {}: device_blob '{}' has no metadata artifact '{}.json'",
                        path.string(), blob->name, blob->name));
      }
      const std::string json(meta->second->data.begin(), meta->second->data.end());
      DeviceCode code;
      code.name = blob->name;
      code.data = blob->data;
      code.metadata_json = json;
      // The metadata written with the blob names its format and target.
      const auto doc = nlohmann::json::parse(json, nullptr, false);
      if (doc.is_object()) {
        code.format = doc.value("format", "");
        code.target = doc.value("target", "");
      }
      if (code.format.empty() || code.target.empty()) {
        throw ValueError(
            fmt::format("package {}: metadata '{}' must name \"format\" and \"target\"",
                        path.string(), meta->first));
      }
      blobs.push_back(std::move(code));
    }
    try {
      device_code = make_device_code_module(std::move(blobs), context.devices());
    } catch (const Error& e) {
      throw_error(e.code(), fmt::format("package {}: {}", path.string(), e.what()));
    }
  }
  if (host == nullptr) {
    device_code.get()->artifacts = package->artifacts;
    device_code.get()->set_source(path.string());
    return device_code;
  }
  const TemporaryDirectory dir("kiln_package_");
  Module inner = load_package_library(context, *host, dir.path(), path);
  // The host library calls into the device code as an import (its kernels resolve through it).
  if (device_code.defined()) inner.import_module(device_code);
  // The loaded module reports the package's artifacts, so exporting it again is lossless.
  inner.get()->artifacts = package->artifacts;
  inner.get()->set_source(path.string());
  return inner;
}

}  // namespace kiln
