// SPDX-License-Identifier: Apache-2.0
// Reading YAML configuration files with precise errors: every problem becomes a
// kiln::ConfigError naming the file, the 1-based line and column, and the dotted key path.
// Internal to libkiln.
#ifndef KILN_CONFIG_YAML_READER_H_
#define KILN_CONFIG_YAML_READER_H_

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/config_error.h"

namespace kiln::config {

// Reads and parses the first YAML document of the file at `path`. An empty file gives a null
// node. Throws kiln::NotFoundError (naming the path) when the file is missing or unreadable,
// ConfigError for a syntax error (position and yaml-cpp's message) or a key that appears twice
// in one mapping ("duplicate key 'x' (first defined at line N)", at the second occurrence).
YAML::Node load_yaml_file(const std::filesystem::path& path);

// Like load_yaml_file for in-memory `text`; `source_name` stands for the file in errors.
// Throws ConfigError.
YAML::Node load_yaml_string(const std::string& text, const std::string& source_name);

// Converts the YAML subtree `node` to compact JSON text: plain scalars that are integers or
// floats become numbers, true/false booleans, null/~/empty null; quoted scalars and everything
// else strings; mappings objects (key order kept), sequences arrays. Throws ConfigError (without
// a file) when the tree nests deeper than 256 levels (e.g. a self-referencing alias).
std::string yaml_to_json(const YAML::Node& node);

// Levenshtein distance between `a` and `b` (insertions, deletions, substitutions cost 1).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` by edit_distance when that distance is at most
// max(2, word.size() / 3); the first one on ties; nullopt when none is close enough.
std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates);

// Describes `node` for "got ..." messages: `'text'` for a scalar (shortened when long), "null",
// "a sequence", "a mapping", "nothing" for an undefined node.
std::string describe_node(const YAML::Node& node);

// `parent.key`, or `key` when `parent` is empty.
std::string join_key_path(const std::string& parent, const std::string& key);

// `parent[index]`.
std::string index_key_path(const std::string& parent, size_t index);

// A ConfigError in `file` at the position of `node` (0 when the node has no position), about
// `key_path` (may be empty), with the bare `message`.
ConfigError error_at(const YAML::Node& node, const std::string& file, const std::string& key_path,
                     const std::string& message);

// Converters used by MapReader and value_as<T>. Each converts `node` (the value at `key_path`
// in `file`) into `*out`, or throws ConfigError at the node's position naming the expected type
// and what was found, e.g. "expected an integer, got 'many'". Strings accept any scalar
// (numbers included) but no null, sequence or mapping; booleans accept true/false (and
// yaml-cpp's yes/no/on/off); integers decimal, 0x hex and 0o octal within the type's range;
// doubles integers, decimals, exponents, .inf and .nan. `*out` is owned by the caller.
void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  std::string* out);
void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  bool* out);
void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  int64_t* out);
void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  int32_t* out);
void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  double* out);
void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  std::vector<std::string>* out);
void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  std::vector<int64_t>* out);
void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  std::vector<double>* out);
void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  std::map<std::string, std::string>* out);

// Converts `node` (the value at `key_path` in `file`) to T, one of the types decode_value
// supports. Throws ConfigError as decode_value does.
template <typename T>
T value_as(const YAML::Node& node, const std::string& file, const std::string& key_path) {
  T out{};
  decode_value(node, file, key_path, &out);
  return out;
}

// Reads one YAML mapping key by key and remembers which keys were asked about, so that
// reject_unknown_keys() can report typos. Holds a reference-counted handle to the node (the
// document stays alive as long as the reader). Errors are ConfigErrors in `file` whose key is
// the dotted path below `key_path`.
class MapReader {
 public:
  // `node`: the mapping to read; `file`: the file name for errors; `key_path`: the mapping's
  // own dotted path ("" for the document root). Throws ConfigError when `node` is not a
  // mapping ("expected a mapping, got a sequence" / "a scalar '...'" / "null").
  MapReader(const YAML::Node& node, std::string file, std::string key_path);

  // Copies share the mapping; assignment rebinds to the other reader's mapping (it never
  // writes into the document, unlike YAML::Node's own assignment).
  MapReader(const MapReader& other) = default;
  MapReader& operator=(const MapReader& other);

  // The value of `key` converted to T (see decode_value for the supported types). Throws
  // ConfigError at the mapping's position when the key is missing ("missing required key
  // 'name'"), or at the value's position when it does not convert (null included).
  template <typename T>
  T required(const std::string& key) {
    return convert<T>(key, required_node(key));
  }

  // The value of `key` converted to T, or `fallback` when the key is missing or its value is
  // null. Throws ConfigError at the value's position when it does not convert.
  template <typename T>
  T optional(const std::string& key, T fallback) {
    std::optional<YAML::Node> value = node(key);
    if (!value || value->IsNull()) return fallback;
    return convert<T>(key, *value);
  }

  // The raw value of `key` (possibly a null node). Throws ConfigError at the mapping's position
  // when the key is missing ("missing required key 'name'").
  YAML::Node required_node(const std::string& key);

  // The raw value of `key` (possibly a null node), or nullopt when the key is missing. Marks
  // the key as known. Never throws.
  std::optional<YAML::Node> node(const std::string& key);

  // A reader for the mapping under `key`. Throws ConfigError when the key is missing or its
  // value is not a mapping.
  MapReader map(const std::string& key);

  // A reader for the mapping under `key`, or nullopt when the key is missing or null. Throws
  // ConfigError when the value is something other than a mapping.
  std::optional<MapReader> optional_map(const std::string& key);

  // Marks `keys` as known without reading them, so that reject_unknown_keys() can run before
  // the values are read (a typo then reads "unknown key", not "missing required key").
  void allow_keys(const std::vector<std::string>& keys);

  // Throws ConfigError at the first key of the mapping that was never asked about through
  // required/optional/node/map/optional_map: "unknown key 'verison' (did you mean
  // 'version'?); known keys: name, version". Also rejects keys that are not scalars.
  void reject_unknown_keys() const;

  // The scalar keys of the mapping never asked about (see reject_unknown_keys), in document
  // order, as dotted paths; for readers that tolerate keys of a newer format.
  std::vector<std::string> unknown_keys() const;

  // Whether `key` is present. Does not mark it as known.
  bool contains(const std::string& key) const;

  // A ConfigError about `key` with `message`: at the key's value when present (at the key
  // itself when the value is null), else at the mapping. The caller throws it.
  ConfigError error(const std::string& key, const std::string& message) const;

  // The dotted path of `key` inside this mapping.
  std::string child_path(const std::string& key) const { return join_key_path(key_path_, key); }

  // The mapping node, the file name, and the mapping's own dotted path.
  const YAML::Node& yaml() const { return node_; }
  const std::string& file() const { return file_; }
  const std::string& key_path() const { return key_path_; }

  // The keys asked about so far, in the order first asked.
  const std::vector<std::string>& known_keys() const { return known_; }

 private:
  // Converts the value of `key`; an error about a null value points at the key, since yaml-cpp
  // places an empty value at the start of the next token.
  template <typename T>
  T convert(const std::string& key, const YAML::Node& value) const {
    if (!value.IsNull()) return value_as<T>(value, file_, child_path(key));
    try {
      return value_as<T>(value, file_, child_path(key));
    } catch (const ConfigError& e) {
      throw error(key, e.message());
    }
  }

  // The key and value nodes of `key`, or nullopt when absent.
  std::optional<std::pair<YAML::Node, YAML::Node>> find(const std::string& key) const;
  ConfigError missing_key(const std::string& key) const;

  YAML::Node node_;
  std::string file_;
  std::string key_path_;
  std::vector<std::string> known_;
};

}  // namespace kiln::config

#endif  // KILN_CONFIG_YAML_READER_H_
