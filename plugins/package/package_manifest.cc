// SPDX-License-Identifier: Apache-2.0
#include "package_manifest.h"

#include <nlohmann/json.hpp>
#include <set>

#include "kiln/sdk/abi.hpp"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/sha256.hpp"

namespace kiln::package {
namespace {

using Json = nlohmann::ordered_json;

// The longest artifact name: the common file-name limit (NAME_MAX), so a package can always
// be unpacked by hand.
constexpr size_t kMaxNameLength = 255;

// Throws kiln::sdk::Error(KILN_ERROR_VALUE, message).

// True when `text` is 64 lowercase hexadecimal digits.
bool is_sha256(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// The member `key` of object `object`, which must have the JSON type `type`; `where` and
// `what` name it in messages.
const Json& member(const Json& object, const char* key, Json::value_t type,
                   const std::string& where, const std::string& what) {
  const auto it = object.find(key);
  if (it == object.end()) sdk::throw_value_error(where + ": " + what + " has no \"" + key + "\"");
  const bool matches = it->type() == type ||
                       (type == Json::value_t::number_unsigned &&
                        it->type() == Json::value_t::number_integer && it->get<int64_t>() >= 0);
  if (!matches) {
    const char* expected = type == Json::value_t::string   ? "a string"
                           : type == Json::value_t::array  ? "an array"
                           : type == Json::value_t::object ? "an object"
                                                           : "a non-negative integer";
    sdk::throw_value_error(where + ": \"" + key + "\" of " + what + " must be " + expected +
                           ", not " + it->dump());
  }
  return *it;
}

}  // namespace

void check_artifact_name(std::string_view name) {
  const std::string quoted = "artifact name '" + std::string(name) + "'";
  if (name.empty()) sdk::throw_value_error("an artifact has an empty name");
  if (name.size() > kMaxNameLength) {
    sdk::throw_value_error(quoted + " is longer than " + std::to_string(kMaxNameLength) + " bytes");
  }
  if (name.find('\0') != std::string_view::npos)
    sdk::throw_value_error(quoted + " contains a NUL byte");
  if (name.find('/') != std::string_view::npos) {
    sdk::throw_value_error(quoted + " contains '/': packages are flat, names are base names");
  }
  // Without '/', ".." and "." are the only names that leave or alias the folder.
  if (name == "." || name == "..") sdk::throw_value_error(quoted + " is not a file name");
  if (name == kManifestName)
    sdk::throw_value_error(quoted + " is reserved for the package manifest");
}

PackageManifest manifest_for(const KilnExportRequest* request) {
  if (request == nullptr) sdk::throw_value_error("the export request is NULL");
  if (std::string why = sdk::check_struct<KilnExportRequest>(request, "KilnExportRequest");
      !why.empty()) {
    throw sdk::Error(KILN_ERROR_ABI, "the host's " + why);
  }
  if (request->module_kind == nullptr)
    sdk::throw_value_error("the export request has no module kind");
  const sdk::StridedArray<KilnArtifact> artifacts(request->artifacts, request->num_artifacts);
  if (std::string why = artifacts.check("KilnArtifact"); !why.empty()) {
    sdk::throw_value_error("the export request's artifact list is malformed (num_artifacts = " +
                           std::to_string(request->num_artifacts) + "): " + why);
  }
  PackageManifest manifest;
  manifest.module_kind = request->module_kind;
  if (request->entry_name != nullptr) manifest.entry_name = request->entry_name;
  std::set<std::string> names;
  for (size_t i = 0; i < artifacts.size(); ++i) {
    const KilnArtifact a = artifacts[i];
    const std::string index = "artifact #" + std::to_string(i);
    if (a.name == nullptr) sdk::throw_value_error(index + " has no name");
    if (a.role == nullptr || *a.role == '\0')
      sdk::throw_value_error(index + " ('" + a.name + "') has no role");
    if (a.data == nullptr && a.size > 0)
      sdk::throw_value_error(index + " ('" + a.name + "') has no data");
    check_artifact_name(a.name);
    if (!names.insert(a.name).second)
      sdk::throw_value_error(std::string("duplicate file name ") + a.name);
    manifest.artifacts.push_back(
        ManifestArtifact{a.name, a.role, static_cast<uint64_t>(a.size),
                         sdk::Sha256::hex(sdk::Sha256::of(a.data, a.size))});
  }
  return manifest;
}

std::string to_json(const PackageManifest& manifest) {
  Json artifacts = Json::array();
  for (const ManifestArtifact& a : manifest.artifacts) {
    Json entry = {{"name", a.name}, {"role", a.role}, {"size", a.size}};
    if (!a.sha256.empty()) entry["sha256"] = a.sha256;
    artifacts.push_back(std::move(entry));
  }
  Json json = {{"format", kPackageFormat},
               {"version", kPackageVersion},
               {"module_kind", manifest.module_kind},
               {"entry_name", manifest.entry_name ? Json(*manifest.entry_name) : Json(nullptr)},
               {"artifacts", std::move(artifacts)}};
  // Invalid UTF-8 in a name or kind is escaped rather than thrown on: export must not fail
  // on a name the loader would read back the same way.
  return json.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

PackageManifest parse_manifest(std::string_view text, const std::string& where) {
  Json json;
  try {
    json = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    sdk::throw_value_error(where + ": not valid JSON: " + e.what());
  }
  if (!json.is_object()) sdk::throw_value_error(where + ": the manifest must be a JSON object");
  const std::string& format = member(json, "format", Json::value_t::string, where, "the manifest")
                                  .get_ref<const std::string&>();
  if (format != kPackageFormat) {
    sdk::throw_value_error(where + ": \"format\" is '" + format + "', expected '" + kPackageFormat +
                           "'");
  }
  const uint64_t version =
      member(json, "version", Json::value_t::number_unsigned, where, "the manifest")
          .get<uint64_t>();
  if (version != static_cast<uint64_t>(kPackageVersion)) {
    sdk::throw_value_error(where + ": package format version " + std::to_string(version) +
                           " is not supported (this plugin reads version " +
                           std::to_string(kPackageVersion) + ")");
  }
  PackageManifest manifest;
  manifest.module_kind =
      member(json, "module_kind", Json::value_t::string, where, "the manifest").get<std::string>();
  const auto entry = json.find("entry_name");
  if (entry != json.end() && !entry->is_null()) {
    if (!entry->is_string())
      sdk::throw_value_error(where + ": \"entry_name\" must be a string or null");
    manifest.entry_name = entry->get<std::string>();
  }
  std::set<std::string> names;
  const Json& artifacts = member(json, "artifacts", Json::value_t::array, where, "the manifest");
  for (size_t i = 0; i < artifacts.size(); ++i) {
    const Json& a = artifacts[i];
    const std::string what = "artifact #" + std::to_string(i);
    if (!a.is_object()) sdk::throw_value_error(where, ": ", what, " must be an object");
    ManifestArtifact artifact;
    artifact.name = member(a, "name", Json::value_t::string, where, what).get<std::string>();
    try {
      check_artifact_name(artifact.name);
    } catch (const sdk::Error& e) {
      sdk::throw_value_error(where + ": " + e.what());
    }
    if (!names.insert(artifact.name).second) {
      sdk::throw_value_error(where + ": artifact '" + artifact.name + "' is listed twice");
    }
    const std::string named = what + " ('" + artifact.name + "')";
    artifact.role = member(a, "role", Json::value_t::string, where, named).get<std::string>();
    if (artifact.role.empty()) sdk::throw_value_error(where, ": ", named, " has an empty role");
    artifact.size = member(a, "size", Json::value_t::number_unsigned, where, named).get<uint64_t>();
    if (a.contains("sha256")) {
      artifact.sha256 = member(a, "sha256", Json::value_t::string, where, named).get<std::string>();
      if (!is_sha256(artifact.sha256)) {
        sdk::throw_value_error(where, ": \"sha256\" of ", named, " is not 64 lowercase hex digits");
      }
    }
    manifest.artifacts.push_back(std::move(artifact));
  }
  return manifest;
}

}  // namespace kiln::package
