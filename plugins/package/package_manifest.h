// SPDX-License-Identifier: Apache-2.0
// The manifest of a module package: what it holds, built from an export request, written as
// JSON and read back with validation. Shared by the tar exporter and loader and by the
// combined-library exporters, which embed the same text.
//
//   {"format": "kiln.package", "version": 1, "module_kind": "kernel_library",
//    "entry_name": "vector_add",   (or null)
//    "artifacts": [{"name": "libvector_add.so", "role": "host_library", "size": 383672,
//                   "sha256": "<64 hex digits>"}]}
#ifndef KILN_PLUGINS_PACKAGE_PACKAGE_MANIFEST_H_
#define KILN_PLUGINS_PACKAGE_PACKAGE_MANIFEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/c/module.h"

namespace kiln::package {

// The name of the manifest inside a package; no artifact may use it.
inline constexpr const char* kManifestName = "kiln-package.json";
// The manifest's "format" and the "version" this plugin writes and reads.
inline constexpr const char* kPackageFormat = "kiln.package";
inline constexpr int kPackageVersion = 1;
// The role of the library the host loads from a package.
inline constexpr const char* kHostLibraryRole = "host_library";

// One artifact as the manifest lists it.
struct ManifestArtifact {
  std::string name;    // base file name, as validated by check_artifact_name()
  std::string role;    // "host_library", "device_blob", ...; non-empty
  uint64_t size = 0;   // in bytes
  std::string sha256;  // 64 lowercase hex digits, or empty when the manifest gives none
};

// A package manifest.
struct PackageManifest {
  std::string module_kind;
  std::optional<std::string> entry_name;
  std::vector<ManifestArtifact> artifacts;
};

// Checks that `name` can be a file in a flat package: non-empty, at most 255 bytes, no '/'
// or NUL, not "." or "..", and not the manifest's name. Throws kiln::sdk::Error(KILN_ERROR_VALUE):
// "artifact name '<name>' <reason>".
void check_artifact_name(std::string_view name);

// The manifest describing `request` (borrowed; the host's KilnExportRequest), with sizes and
// SHA-256 digests of the artifacts. Checks the request's shape and every artifact's name
// (check_artifact_name); a name used twice is KILN_ERROR_VALUE "duplicate file name <name>".
// Other errors: KILN_ERROR_ABI for a request smaller than its 1.0 layout, KILN_ERROR_VALUE
// for a NULL request, module kind, artifact name or role, a negative count, or NULL data
// with a non-zero size.
PackageManifest manifest_for(const KilnExportRequest* request);

// The manifest as JSON text (keys in the order shown above; sha256 omitted when empty).
std::string to_json(const PackageManifest& manifest);

// Parses and validates manifest `text`. `where` names it in messages ("<archive>: entry
// 'kiln-package.json'"). Unknown keys are ignored, so that later version-1 writers may add
// information. Throws kiln::sdk::Error(KILN_ERROR_VALUE) "<where>: <problem>" for text that is
// not JSON, another "format", a "version" other than kPackageVersion, a missing or mistyped
// key, an invalid artifact name, a name listed twice, or a malformed sha256.
PackageManifest parse_manifest(std::string_view text, const std::string& where);

}  // namespace kiln::package

#endif  // KILN_PLUGINS_PACKAGE_PACKAGE_MANIFEST_H_
