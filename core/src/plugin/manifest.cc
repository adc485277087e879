// SPDX-License-Identifier: Apache-2.0
#include "plugin/manifest.h"

#include <sys/utsname.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <system_error>
#include <utility>

#include "config/yaml_reader.h"
#include "kiln/config_error.h"

namespace kiln::plugin {
namespace {

bool is_name_char(char c, bool first) {
  if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') return true;
  return !first && (c == '.' || c == '-');
}

bool is_numeric(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A semver numeric identifier: digits without a leading zero (except "0" itself).
bool is_numeric_identifier(std::string_view s) {
  return is_numeric(s) && (s.size() == 1 || s[0] != '0');
}

// Dot-separated non-empty identifiers of [0-9A-Za-z-]; numeric ones without leading zeros
// when `strict_numbers` (prerelease), any digits otherwise (build metadata).
bool is_dotted_identifiers(std::string_view s, bool strict_numbers) {
  while (true) {
    size_t dot = s.find('.');
    std::string_view part = s.substr(0, dot);
    if (part.empty()) return false;
    for (char c : part) {
      bool ok =
          (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
      if (!ok) return false;
    }
    if (strict_numbers && is_numeric(part) && !is_numeric_identifier(part)) return false;
    if (dot == std::string_view::npos) return true;
    s.remove_prefix(dot + 1);
  }
}

// Parses "MAJOR.MINOR" (decimal, each fitting an int) into the two numbers.
std::optional<std::pair<int, int>> parse_abi(std::string_view text) {
  size_t dot = text.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  std::string_view major_text = text.substr(0, dot);
  std::string_view minor_text = text.substr(dot + 1);
  if (!is_numeric(major_text) || !is_numeric(minor_text)) return std::nullopt;
  int major = 0;
  int minor = 0;
  auto major_result =
      std::from_chars(major_text.data(), major_text.data() + major_text.size(), major);
  auto minor_result =
      std::from_chars(minor_text.data(), minor_text.data() + minor_text.size(), minor);
  if (major_result.ec != std::errc() || minor_result.ec != std::errc()) return std::nullopt;
  return std::make_pair(major, minor);
}

// Reads the optional list `key` of `provides` into `*out`: strings, non-empty, no repeats.
void read_provided(config::MapReader& provides, const std::string& key,
                   std::vector<std::string>* out) {
  *out = provides.optional<std::vector<std::string>>(key, {});
  std::optional<YAML::Node> list = provides.node(key);
  for (size_t i = 0; i < out->size(); ++i) {
    const std::string& entry = (*out)[i];
    std::string path = config::index_key_path(provides.child_path(key), i);
    if (entry.empty()) {
      throw config::error_at(std::as_const(*list)[i], provides.file(), path,
                             "entries must not be empty");
    }
    auto first = std::find(out->begin(), out->begin() + static_cast<std::ptrdiff_t>(i), entry);
    if (first != out->begin() + static_cast<std::ptrdiff_t>(i)) {
      throw config::error_at(std::as_const(*list)[i], provides.file(), path,
                             "'" + entry + "' is listed twice (first at index " +
                                 std::to_string(first - out->begin()) + ")");
    }
  }
}

std::string join_names(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

const std::vector<std::string>& plugin_kinds() {
  static const std::vector<std::string> kinds = {"device", "loader", "exporter", "collector",
                                                 "bundle"};
  return kinds;
}

bool is_valid_plugin_name(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!is_name_char(name[i], i == 0)) return false;
  }
  return true;
}

bool is_valid_semver(std::string_view version) {
  size_t end = version.find_first_of("-+");
  std::string_view core = version.substr(0, end);
  for (int part = 0; part < 3; ++part) {
    size_t dot = core.find('.');
    if ((part < 2) == (dot == std::string_view::npos)) return false;
    if (!is_numeric_identifier(core.substr(0, dot))) return false;
    core.remove_prefix(part < 2 ? dot + 1 : core.size());
  }
  if (end == std::string_view::npos) return true;
  std::string_view rest = version.substr(end);
  size_t plus = rest.find('+');
  if (rest[0] == '-') {
    if (!is_dotted_identifiers(rest.substr(1, plus == std::string_view::npos ? plus : plus - 1),
                               true)) {
      return false;
    }
  }
  if (plus == std::string_view::npos) return true;
  return is_dotted_identifiers(rest.substr(plus + 1), false);
}

std::string host_arch() {
  struct utsname info {};
  if (uname(&info) != 0) return "";
  return info.machine;
}

PluginManifest parse_manifest(const std::filesystem::path& path) {
  const std::string file = path.string();
  YAML::Node root = config::load_yaml_file(path);
  config::MapReader reader(root, file, "");
  reader.allow_keys({"name", "version", "kind", "library", "abi", "description", "arch", "provides",
                     "manifest_version"});
  PluginManifest manifest;
  // Read first: it decides whether an unknown key is a typo (refused) or a newer format's key
  // (ignored), so that a plugin built for a later Kiln still loads or says "upgrade Kiln".
  manifest.manifest_version = reader.optional<int>("manifest_version", 1);
  if (manifest.manifest_version < 1) {
    throw reader.error("manifest_version", "manifest_version must be a positive integer, got " +
                                               std::to_string(manifest.manifest_version));
  }
  const bool newer_format = manifest.manifest_version > kManifestFormatVersion;
  auto settle_unknown_keys = [&](const config::MapReader& map) {
    if (!newer_format) {
      map.reject_unknown_keys();
      return;
    }
    for (std::string& key : map.unknown_keys()) manifest.ignored_keys.push_back(std::move(key));
  };
  settle_unknown_keys(reader);

  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  manifest.manifest_path = (ec ? path : absolute).lexically_normal();

  manifest.name = reader.required<std::string>("name");
  if (!is_valid_plugin_name(manifest.name)) {
    throw reader.error("name",
                       "name must match [a-z0-9_][a-z0-9_.-]*, got '" + manifest.name + "'");
  }

  manifest.version = reader.required<std::string>("version");
  if (!is_valid_semver(manifest.version)) {
    throw reader.error("version",
                       "version must be a semantic version MAJOR.MINOR.PATCH[-prerelease][+build]"
                       " such as \"0.1.0\", got '" +
                           manifest.version + "'");
  }

  manifest.kind = reader.required<std::string>("kind");
  const std::vector<std::string>& kinds = plugin_kinds();
  if (std::find(kinds.begin(), kinds.end(), manifest.kind) == kinds.end()) {
    std::string message = "unknown kind '" + manifest.kind + "'";
    if (std::optional<std::string> suggestion = config::closest_match(manifest.kind, kinds)) {
      message += " (did you mean '" + *suggestion + "'?)";
    }
    throw reader.error("kind", message + "; kinds: " + join_names(kinds));
  }

  std::string library = reader.required<std::string>("library");
  if (library.empty()) throw reader.error("library", "library must not be empty");
  std::filesystem::path library_path(library);
  if (library_path.is_relative()) library_path = manifest.manifest_path.parent_path() / library;
  manifest.library = library_path.lexically_normal();

  // The scalar's text, so that `abi: 1.10` (a float to YAML) keeps its minor version 10.
  YAML::Node abi = reader.required_node("abi");
  std::optional<std::pair<int, int>> abi_version;
  if (abi.IsScalar()) abi_version = parse_abi(abi.Scalar());
  if (!abi_version) {
    throw reader.error("abi",
                       "abi must be MAJOR.MINOR, e.g. \"1.0\", got " + config::describe_node(abi));
  }
  manifest.abi_major = abi_version->first;
  manifest.abi_minor = abi_version->second;

  manifest.description = reader.optional<std::string>("description", "");
  manifest.arch = reader.optional<std::string>("arch", "");

  std::optional<config::MapReader> provides = reader.optional_map("provides");
  if (provides) {
    provides->allow_keys({"devices", "loaders", "exporters", "collectors"});
    settle_unknown_keys(*provides);
    read_provided(*provides, "devices", &manifest.devices);
    read_provided(*provides, "loaders", &manifest.loaders);
    read_provided(*provides, "exporters", &manifest.exporters);
    read_provided(*provides, "collectors", &manifest.collectors);
  }
  if (manifest.devices.empty() && manifest.loaders.empty() && manifest.exporters.empty() &&
      manifest.collectors.empty()) {
    throw reader.error("provides",
                       "provides must list at least one device, loader, exporter or collector");
  }
  return manifest;
}

}  // namespace kiln::plugin
