// SPDX-License-Identifier: Apache-2.0
// Tests of the plugin manifest and plugin set parsers: good files, and for every kind of
// mistake an error naming file:line:column and the key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/config_error.h"
#include "kiln/error.h"
#include "plugin/manifest.h"
#include "plugin/plugin_set.h"

namespace kiln::plugin {
namespace {

namespace fs = std::filesystem;

// A fresh folder under the system temp folder, removed with everything in it on destruction.
class ManifestTempDir {
 public:
  ManifestTempDir() {
    static std::atomic<int> counter{0};
    std::random_device random;
    path_ =
        fs::temp_directory_path() / ("kiln_manifest_test_" + std::to_string(getpid()) + "_" +
                                     std::to_string(counter++) + "_" + std::to_string(random()));
    fs::create_directories(path_);
    // The canonical form, so that expectations compare equal to parsed absolute paths.
    path_ = fs::canonical(path_);
  }
  ~ManifestTempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ManifestTempDir(const ManifestTempDir&) = delete;
  ManifestTempDir& operator=(const ManifestTempDir&) = delete;

  // Writes `text` to `name` in the folder and returns the file's path.
  fs::path write(const std::string& name, const std::string& text) const {
    fs::path file = path_ / name;
    fs::create_directories(file.parent_path());
    std::ofstream out(file, std::ios::binary);
    out << text;
    return file;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

constexpr const char* kCpuManifest = R"(name: cpu
version: 0.1.0            # semver
kind: device
library: libkiln_cpu.so
abi: "1.0"
description: CPU backend
arch: x86_64
provides:
  devices: [cpu]
  loaders: [so]
  exporters: []
  collectors: []
)";

// Runs `body` and returns the ConfigError it throws; records a failure when it throws none.
ConfigError expect_config_error(const std::function<void()>& body) {
  try {
    body();
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "expected a ConfigError";
  return ConfigError("", 0, 0, "", "no error");
}

// Checks that `e` is at `file`:`line`:`column` about `key` and that its message contains
// `message_part`.
void expect_error_at(const ConfigError& e, const fs::path& file, int line, int column,
                     const std::string& key, const std::string& message_part) {
  std::string prefix = file.string() + ":" + std::to_string(line) + ":" + std::to_string(column) +
                       ": " + (key.empty() ? "" : key + ": ");
  std::string what = e.what();
  EXPECT_EQ(what.rfind(prefix, 0), 0u) << what << "\nexpected prefix: " << prefix;
  EXPECT_NE(e.message().find(message_part), std::string::npos)
      << e.message() << "\nexpected to contain: " << message_part;
  EXPECT_EQ(e.file(), file.string());
  EXPECT_EQ(e.line(), line);
  EXPECT_EQ(e.column(), column);
  EXPECT_EQ(e.key(), key);
}

// The manifest error for `text` written to `<dir>/bad.yaml`, checked with expect_error_at.
void expect_manifest_error(const std::string& text, int line, int column, const std::string& key,
                           const std::string& message_part) {
  ManifestTempDir dir;
  fs::path file = dir.write("bad.yaml", text);
  ConfigError e = expect_config_error([&] { parse_manifest(file); });
  expect_error_at(e, file, line, column, key, message_part);
}

// The plugin set error for `text` written to `<dir>/plugins.yaml`, checked likewise.
void expect_set_error(const std::string& text, int line, int column, const std::string& key,
                      const std::string& message_part) {
  ManifestTempDir dir;
  fs::path file = dir.write("plugins.yaml", text);
  ConfigError e = expect_config_error([&] { parse_plugin_set(file); });
  expect_error_at(e, file, line, column, key, message_part);
}

// A valid manifest with `line` replacing the line that starts with the same key.
std::string manifest_with(const std::string& line) {
  std::string key = line.substr(0, line.find(':') + 1);
  std::string text = std::string("\n") + kCpuManifest;
  size_t at = text.find("\n" + key);
  if (at == std::string::npos) return text.substr(1) + line + "\n";
  size_t end = text.find('\n', at + 1);
  return text.substr(1, at) + line + text.substr(end);
}

TEST(PluginManifestTest, ParsesTheExample) {
  ManifestTempDir dir;
  fs::path file = dir.write("cpu.yaml", kCpuManifest);
  PluginManifest m = parse_manifest(file);
  EXPECT_EQ(m.manifest_path, file);
  EXPECT_EQ(m.name, "cpu");
  EXPECT_EQ(m.version, "0.1.0");
  EXPECT_EQ(m.kind, "device");
  EXPECT_EQ(m.description, "CPU backend");
  EXPECT_EQ(m.arch, "x86_64");
  EXPECT_EQ(m.library, dir.path() / "libkiln_cpu.so");
  EXPECT_TRUE(m.library.is_absolute());
  EXPECT_EQ(m.abi_major, 1);
  EXPECT_EQ(m.abi_minor, 0);
  EXPECT_EQ(m.devices, std::vector<std::string>{"cpu"});
  EXPECT_EQ(m.loaders, std::vector<std::string>{"so"});
  EXPECT_TRUE(m.exporters.empty());
  EXPECT_TRUE(m.collectors.empty());
}

TEST(PluginManifestTest, MinimalManifest) {
  ManifestTempDir dir;
  fs::path file = dir.write("sub/x.yaml",
                            "name: x_exp.v2-beta\nversion: 2.0.0-rc.1+sha.abc\nkind: exporter\n"
                            "library: ../lib/libx.so\nabi: 1.0\nprovides: {exporters: [json]}\n");
  PluginManifest m = parse_manifest(file);
  EXPECT_EQ(m.name, "x_exp.v2-beta");
  EXPECT_EQ(m.version, "2.0.0-rc.1+sha.abc");
  EXPECT_EQ(m.library, dir.path() / "lib" / "libx.so");
  EXPECT_EQ(m.abi_major, 1);
  EXPECT_EQ(m.abi_minor, 0);
  EXPECT_EQ(m.description, "");
  EXPECT_EQ(m.arch, "");
  EXPECT_EQ(m.exporters, std::vector<std::string>{"json"});
}

TEST(PluginManifestTest, AbiUsesTheScalarText) {
  ManifestTempDir dir;
  // Unquoted, 1.10 is a float equal to 1.1; the text keeps minor version 10.
  PluginManifest m = parse_manifest(dir.write("a.yaml", manifest_with("abi: 1.10")));
  EXPECT_EQ(m.abi_major, 1);
  EXPECT_EQ(m.abi_minor, 10);
  m = parse_manifest(dir.write("b.yaml", manifest_with("abi: '3.2'")));
  EXPECT_EQ(m.abi_major, 3);
  EXPECT_EQ(m.abi_minor, 2);
}

TEST(PluginManifestTest, AbsoluteLibraryIsKept) {
  ManifestTempDir dir;
  PluginManifest m =
      parse_manifest(dir.write("a.yaml", manifest_with("library: /opt/kiln/libkiln_cpu.so")));
  EXPECT_EQ(m.library, fs::path("/opt/kiln/libkiln_cpu.so"));
}

TEST(PluginManifestTest, BundleWithSeveralKinds) {
  ManifestTempDir dir;
  // The example provides devices and loaders, which a bundle may.
  PluginManifest m = parse_manifest(dir.write("b.yaml", manifest_with("kind: bundle")));
  EXPECT_EQ(m.kind, "bundle");
  EXPECT_EQ(m.devices.size() + m.loaders.size(), 2u);
}

TEST(PluginManifestTest, UnknownKeyWithSuggestion) {
  expect_manifest_error(manifest_with("verison: 0.1.0"), 13, 1, "verison",
                        "unknown key 'verison' (did you mean 'version'?); known keys: name, "
                        "version, kind, library, abi, description, arch, provides, "
                        "manifest_version");
}

TEST(PluginManifestTest, KeysOfANewerManifestFormatAreIgnoredNotRefused) {
  ManifestTempDir dir;
  // Format 1 (the default, and explicit): an unknown key is a typo.
  expect_manifest_error(manifest_with("signature: abc"), 13, 1, "signature",
                        "unknown key 'signature'");
  // A newer format: unknown keys, top-level and under provides, are listed and skipped.
  const std::string text = std::string("manifest_version: 2\nsignature: abc\n") + kCpuManifest +
                           "  kernel_formats: [fake]\n";  // its last mapping is `provides`
  PluginManifest m = parse_manifest(dir.write("newer.yaml", text));
  EXPECT_EQ(m.manifest_version, 2);
  EXPECT_EQ(m.ignored_keys, (std::vector<std::string>{"signature", "provides.kernel_formats"}));
  EXPECT_EQ(m.name, "cpu") << "known keys are still read and checked";
  expect_manifest_error(manifest_with("manifest_version: 0"), 13, 19, "manifest_version",
                        "manifest_version must be a positive integer, got 0");
}

TEST(PluginManifestTest, UnknownProvidesKey) {
  expect_manifest_error(
      "name: a\nversion: 1.0.0\nkind: device\nlibrary: l.so\nabi: '1.0'\nprovides:\n"
      "  device: [cpu]\n",
      7, 3, "provides.device", "unknown key 'device' (did you mean 'devices'?)");
}

TEST(PluginManifestTest, BadSemver) {
  expect_manifest_error(manifest_with("version: 1.0"), 2, 10, "version",
                        "version must be a semantic version MAJOR.MINOR.PATCH");
  expect_manifest_error(manifest_with("version: 01.0.0"), 2, 10, "version", "got '01.0.0'");
  expect_manifest_error(manifest_with("version: 1.0.0-"), 2, 10, "version", "got '1.0.0-'");
  expect_manifest_error(manifest_with("version: [1]"), 2, 10, "version",
                        "expected a string, got a sequence");
}

TEST(PluginManifestTest, BadAbi) {
  expect_manifest_error(manifest_with("abi: 1"), 5, 6, "abi",
                        "abi must be MAJOR.MINOR, e.g. \"1.0\", got '1'");
  expect_manifest_error(manifest_with("abi: one.two"), 5, 6, "abi", "abi must be MAJOR.MINOR");
  expect_manifest_error(manifest_with("abi: 1.0.0"), 5, 6, "abi", "got '1.0.0'");
  expect_manifest_error(manifest_with("abi: [1, 0]"), 5, 6, "abi", "got a sequence");
  expect_manifest_error(manifest_with("abi: 99999999999.0"), 5, 6, "abi", "abi must be");
}

TEST(PluginManifestTest, UnknownKindListsTheKinds) {
  expect_manifest_error(manifest_with("kind: devic"), 3, 7, "kind",
                        "unknown kind 'devic' (did you mean 'device'?); kinds: device, loader, "
                        "exporter, collector, bundle");
}

TEST(PluginManifestTest, BadName) {
  expect_manifest_error(manifest_with("name: CPU"), 1, 7, "name",
                        "name must match [a-z0-9_][a-z0-9_.-]*, got 'CPU'");
  expect_manifest_error(manifest_with("name: -cpu"), 1, 7, "name", "got '-cpu'");
  expect_manifest_error(manifest_with("name: \"\""), 1, 7, "name", "got ''");
}

TEST(PluginManifestTest, EmptyProvides) {
  expect_manifest_error(
      "name: a\nversion: 1.0.0\nkind: device\nlibrary: l.so\nabi: '1.0'\nprovides:\n"
      "  devices: []\n",
      7, 3, "provides", "provides must list at least one device, loader, exporter or collector");
  expect_manifest_error("name: a\nversion: 1.0.0\nkind: device\nlibrary: l.so\nabi: '1.0'\n", 1, 1,
                        "provides", "provides must list at least one");
}

TEST(PluginManifestTest, BadProvidesEntries) {
  const std::string head = "name: a\nversion: 1.0.0\nkind: device\nlibrary: l.so\nabi: '1.0'\n";
  expect_manifest_error(head + "provides:\n  devices: [cpu, cpu]\n", 7, 18, "provides.devices[1]",
                        "'cpu' is listed twice");
  expect_manifest_error(head + "provides:\n  loaders: so\n", 7, 12, "provides.loaders",
                        "expected a list of strings, got 'so'");
  expect_manifest_error(head + "provides: [cpu]\n", 6, 11, "provides",
                        "expected a mapping, got a sequence");
  expect_manifest_error(head + "provides:\n  devices: ['']\n", 7, 13, "provides.devices[0]",
                        "entries must not be empty");
}

TEST(PluginManifestTest, MissingRequiredKey) {
  expect_manifest_error("name: a\nversion: 1.0.0\nkind: device\nabi: '1.0'\n", 1, 1, "",
                        "missing required key 'library'");
}

TEST(PluginManifestTest, EmptyLibrary) {
  expect_manifest_error(manifest_with("library: ''"), 4, 10, "library",
                        "library must not be empty");
}

TEST(PluginManifestTest, DuplicateKey) {
  expect_manifest_error(std::string(kCpuManifest) + "name: again\n", 13, 1, "name",
                        "duplicate key 'name' (first defined at line 1)");
}

TEST(PluginManifestTest, SyntaxError) {
  expect_manifest_error("name: [cpu\n", 2, 1, "", "end of sequence flow not found");
}

TEST(PluginManifestTest, MissingFile) {
  ManifestTempDir dir;
  EXPECT_THROW(parse_manifest(dir.path() / "absent.yaml"), NotFoundError);
}

TEST(PluginManifestTest, Validators) {
  EXPECT_TRUE(is_valid_plugin_name("cpu"));
  EXPECT_TRUE(is_valid_plugin_name("_x.y-z9"));
  EXPECT_FALSE(is_valid_plugin_name(""));
  EXPECT_FALSE(is_valid_plugin_name(".x"));
  EXPECT_FALSE(is_valid_plugin_name("a b"));
  EXPECT_FALSE(is_valid_plugin_name("Cuda"));

  EXPECT_TRUE(is_valid_semver("0.1.0"));
  EXPECT_TRUE(is_valid_semver("10.20.30"));
  EXPECT_TRUE(is_valid_semver("1.0.0-alpha.1"));
  EXPECT_TRUE(is_valid_semver("1.0.0-0.3.7"));
  EXPECT_TRUE(is_valid_semver("1.0.0+build.007"));
  EXPECT_TRUE(is_valid_semver("1.0.0-rc-1+exp.sha.5114f85"));
  EXPECT_FALSE(is_valid_semver("1.0"));
  EXPECT_FALSE(is_valid_semver("1.0.0.0"));
  EXPECT_FALSE(is_valid_semver("01.0.0"));
  EXPECT_FALSE(is_valid_semver("1.0.0-01"));
  EXPECT_FALSE(is_valid_semver("1.0.0-"));
  EXPECT_FALSE(is_valid_semver("1.0.0+"));
  EXPECT_FALSE(is_valid_semver("1.0.0-a..b"));
  EXPECT_FALSE(is_valid_semver("1.0.0-a_b"));
  EXPECT_FALSE(is_valid_semver("v1.0.0"));
  EXPECT_FALSE(is_valid_semver(""));

  EXPECT_EQ(plugin_kinds().size(), 5u);
  EXPECT_FALSE(host_arch().empty());
}

constexpr const char* kPluginSet = R"(search_paths: [plugins, /opt/vendor/kiln-plugins]
plugins:
  - name: cpu
    options: {num_threads: 0, pin: [0, 1], label: fast}
    enabled: true
  - opencl
  - name: "cuda*"
    enabled: false
device_types:
  cuda: cuda_13
)";

TEST(PluginSetTest, ParsesTheExample) {
  ManifestTempDir dir;
  fs::path file = dir.write("configs/plugins.yaml", kPluginSet);
  PluginSet set = parse_plugin_set(file);
  EXPECT_EQ(set.path, file);
  ASSERT_EQ(set.search_paths.size(), 2u);
  EXPECT_EQ(set.search_paths[0], dir.path() / "configs" / "plugins");
  EXPECT_EQ(set.search_paths[1], fs::path("/opt/vendor/kiln-plugins"));
  EXPECT_TRUE(set.has_plugin_list);
  ASSERT_EQ(set.plugins.size(), 3u);
  EXPECT_EQ(set.plugins[0].name, "cpu");
  EXPECT_EQ(set.plugins[0].options_json, R"({"num_threads":0,"pin":[0,1],"label":"fast"})");
  EXPECT_TRUE(set.plugins[0].enabled);
  EXPECT_EQ(set.plugins[0].line, 3);
  EXPECT_EQ(set.plugins[1].name, "opencl");
  EXPECT_EQ(set.plugins[1].options_json, "{}");
  EXPECT_TRUE(set.plugins[1].enabled);
  EXPECT_EQ(set.plugins[1].line, 6);
  EXPECT_EQ(set.plugins[2].name, "cuda*");
  EXPECT_FALSE(set.plugins[2].enabled);
  EXPECT_EQ(set.plugins[2].line, 7);
  EXPECT_EQ(set.device_types, (std::map<std::string, std::string>{{"cuda", "cuda_13"}}));
}

TEST(PluginSetTest, NoPluginListLoadsEverything) {
  ManifestTempDir dir;
  PluginSet set = parse_plugin_set(dir.write("a.yaml", "search_paths: [../p]\n"));
  EXPECT_FALSE(set.has_plugin_list);
  EXPECT_TRUE(set.plugins.empty());
  ASSERT_EQ(set.search_paths.size(), 1u);
  EXPECT_EQ(set.search_paths[0], dir.path().parent_path() / "p");
  EXPECT_TRUE(set.device_types.empty());
}

TEST(PluginSetTest, EmptyListAndEmptyFile) {
  ManifestTempDir dir;
  PluginSet empty_list = parse_plugin_set(dir.write("a.yaml", "plugins: []\n"));
  EXPECT_TRUE(empty_list.has_plugin_list);
  EXPECT_TRUE(empty_list.plugins.empty());
  PluginSet empty_file = parse_plugin_set(dir.write("b.yaml", "# nothing\n"));
  EXPECT_FALSE(empty_file.has_plugin_list);
  EXPECT_TRUE(empty_file.search_paths.empty());
  PluginSet null_list = parse_plugin_set(dir.write("c.yaml", "plugins:\n"));
  EXPECT_FALSE(null_list.has_plugin_list);
}

TEST(PluginSetTest, NullOptionsAreEmpty) {
  ManifestTempDir dir;
  PluginSet set = parse_plugin_set(dir.write("a.yaml", "plugins:\n  - name: cpu\n    options:\n"));
  ASSERT_EQ(set.plugins.size(), 1u);
  EXPECT_EQ(set.plugins[0].options_json, "{}");
}

TEST(PluginSetTest, DuplicatePluginName) {
  expect_set_error("plugins:\n  - cpu\n  - opencl\n  - name: cpu\n", 4, 5, "plugins[2]",
                   "plugin 'cpu' is listed twice (first listed at line 2)");
}

TEST(PluginSetTest, OptionsMustBeAMapping) {
  expect_set_error("plugins:\n  - name: cpu\n    options: [1, 2]\n", 3, 14, "plugins[0].options",
                   "expected a mapping of plugin options, got a sequence");
  expect_set_error("plugins:\n  - name: cpu\n    options: fast\n", 3, 14, "plugins[0].options",
                   "got 'fast'");
}

TEST(PluginSetTest, DeviceTypesMustBeStrings) {
  expect_set_error("device_types:\n  cuda: [cuda_13]\n", 2, 9, "device_types.cuda",
                   "expected a string, got a sequence");
  expect_set_error("device_types: [cuda]\n", 1, 15, "device_types",
                   "expected a mapping of strings, got a sequence");
  expect_set_error("device_types:\n  cuda: Cuda-13\n", 2, 9, "device_types.cuda",
                   "expected a plugin name");
}

TEST(PluginSetTest, UnknownKeys) {
  expect_set_error("plugin:\n  - cpu\n", 1, 1, "plugin",
                   "unknown key 'plugin' (did you mean 'plugins'?); known keys: search_paths, "
                   "plugins, device_types");
  expect_set_error("plugins:\n  - name: cpu\n    option: {a: 1}\n", 3, 5, "plugins[0].option",
                   "unknown key 'option' (did you mean 'options'?)");
}

TEST(PluginSetTest, BadEntries) {
  expect_set_error("plugins:\n  - [cpu]\n", 2, 5, "plugins[0]",
                   "expected a plugin name or a mapping with 'name', got a sequence");
  expect_set_error("plugins:\n  - CPU\n", 2, 5, "plugins[0]", "plugin name must match");
  expect_set_error("plugins:\n  - name: Big\n", 2, 11, "plugins[0].name", "got 'Big'");
  expect_set_error("plugins:\n  - enabled: true\n", 2, 5, "plugins[0]",
                   "missing required key 'name'");
  expect_set_error("plugins:\n  - name: cpu\n    enabled: maybe\n", 3, 14, "plugins[0].enabled",
                   "expected a boolean (true or false), got 'maybe'");
  expect_set_error("plugins: cpu\n", 1, 10, "plugins", "expected a list of plugins, got 'cpu'");
}

TEST(PluginSetTest, BadSearchPaths) {
  expect_set_error("search_paths: plugins\n", 1, 15, "search_paths",
                   "expected a list of strings, got 'plugins'");
  expect_set_error("search_paths: [a, '']\n", 1, 19, "search_paths[1]",
                   "search paths must not be empty");
}

TEST(PluginSetTest, RootMustBeAMapping) {
  expect_set_error("- cpu\n", 1, 1, "", "expected a mapping, got a sequence");
}

TEST(PluginSetTest, DuplicateKey) {
  expect_set_error("device_types:\n  cuda: a\n  cuda: b\n", 3, 3, "device_types.cuda",
                   "duplicate key 'cuda' (first defined at line 2)");
}

TEST(PluginSetTest, PatternValidator) {
  EXPECT_TRUE(is_valid_plugin_pattern("cuda*"));
  EXPECT_TRUE(is_valid_plugin_pattern("*"));
  EXPECT_TRUE(is_valid_plugin_pattern("cuda_1[23]"));
  EXPECT_TRUE(is_valid_plugin_pattern("cpu"));
  EXPECT_FALSE(is_valid_plugin_pattern(""));
  EXPECT_FALSE(is_valid_plugin_pattern("CUDA"));
  EXPECT_FALSE(is_valid_plugin_pattern(".x"));
  EXPECT_FALSE(is_valid_plugin_pattern("a/b"));
}

}  // namespace
}  // namespace kiln::plugin
