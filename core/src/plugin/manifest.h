// SPDX-License-Identifier: Apache-2.0
// Plugin manifests: the `<name>.yaml` file beside a plugin's shared library that says what the
// plugin is and provides, read before the library is ever opened. Internal to libkiln.
#ifndef KILN_PLUGIN_MANIFEST_H_
#define KILN_PLUGIN_MANIFEST_H_

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::plugin {

// The parsed content of one plugin manifest.
struct PluginManifest {
  std::filesystem::path manifest_path;  // absolute path of the manifest file
  std::string name;                     // matches [a-z0-9_][a-z0-9_.-]*
  std::string version;                  // semver MAJOR.MINOR.PATCH[-prerelease][+build]
  std::string kind;                     // device | loader | exporter | collector | bundle
  std::string description;              // empty when not given
  std::string arch;                     // empty when not given (any architecture)
  std::filesystem::path library;        // absolute path of the shared library
  int abi_major = 0;                    // Kiln plugin ABI the plugin was built against
  int abi_minor = 0;
  int manifest_version = 1;  // the manifest format (`manifest_version`, default 1)
  // Keys of a newer manifest format that this Kiln does not know and ignored, as dotted paths.
  std::vector<std::string> ignored_keys;
  std::vector<std::string> devices;     // device types provided
  std::vector<std::string> loaders;     // module formats loaded
  std::vector<std::string> exporters;   // exporters provided
  std::vector<std::string> collectors;  // collectors provided
};

// The newest manifest format this Kiln reads. A manifest of a newer format loads: keys this Kiln
// does not know are ignored (and listed in PluginManifest::ignored_keys) instead of refused.
inline constexpr int kManifestFormatVersion = 1;

// Reads the manifest at `path`. Keys: name, version, kind, library, abi (required);
// manifest_version, description, arch, provides {devices, loaders, exporters, collectors}
// (optional, but provides must list at least one entry). `library` is resolved against the
// manifest's folder. Throws kiln::NotFoundError when the file cannot be read, kiln::ConfigError
// (with file, line, column and key) for bad YAML, unknown keys, wrong types or invalid values.
PluginManifest parse_manifest(const std::filesystem::path& path);

// The plugin kinds a manifest may declare, in the order error messages list them.
const std::vector<std::string>& plugin_kinds();

// Whether `name` is a valid plugin name: [a-z0-9_][a-z0-9_.-]*.
bool is_valid_plugin_name(std::string_view name);

// Whether `version` is a semantic version MAJOR.MINOR.PATCH with optional -prerelease and
// +build parts (semver.org 2.0.0: no leading zeros in numeric parts).
bool is_valid_semver(std::string_view version);

// The host's machine name as uname(2) reports it (e.g. "x86_64"), which a manifest's `arch`
// must equal for the plugin to load; empty when uname fails.
std::string host_arch();

}  // namespace kiln::plugin

#endif  // KILN_PLUGIN_MANIFEST_H_
