// SPDX-License-Identifier: Apache-2.0
// Tests of the YAML configuration reader: positions of syntax errors, duplicate keys, typed
// reads through MapReader, unknown-key suggestions and the YAML-to-JSON conversion.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "config/yaml_reader.h"
#include "kiln/config_error.h"
#include "kiln/error.h"

namespace kiln::config {
namespace {

namespace fs = std::filesystem;

// A fresh folder under the system temp folder, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device random;
    path_ =
        fs::temp_directory_path() / ("kiln_config_test_" + std::to_string(getpid()) + "_" +
                                     std::to_string(counter++) + "_" + std::to_string(random()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `text` to `name` in the folder and returns the file's path.
  fs::path write(const std::string& name, const std::string& text) const {
    fs::path file = path_ / name;
    std::ofstream out(file, std::ios::binary);
    out << text;
    return file;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs `body` and returns the ConfigError it throws; records a failure when it throws none.
ConfigError catch_config_error(const std::function<void()>& body) {
  try {
    body();
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "expected a ConfigError";
  return ConfigError("", 0, 0, "", "no error");
}

// The error of reading `key` as T from the document `text` (source name "test.yaml").
template <typename T>
ConfigError read_error(const std::string& text, const std::string& key) {
  return catch_config_error([&] {
    MapReader reader(load_yaml_string(text, "test.yaml"), "test.yaml", "");
    reader.required<T>(key);
  });
}

// The value of `key` read as T from the document `text`.
template <typename T>
T read_value(const std::string& text, const std::string& key) {
  MapReader reader(load_yaml_string(text, "test.yaml"), "test.yaml", "");
  return reader.required<T>(key);
}

TEST(ConfigErrorFormatTest, FormatsEveryPart) {
  ConfigError full("a.yaml", 3, 7, "plugins[1].options", "bad thing");
  EXPECT_STREQ(full.what(), "a.yaml:3:7: plugins[1].options: bad thing");
  EXPECT_EQ(full.file(), "a.yaml");
  EXPECT_EQ(full.line(), 3);
  EXPECT_EQ(full.column(), 7);
  EXPECT_EQ(full.key(), "plugins[1].options");
  EXPECT_EQ(full.message(), "bad thing");
  EXPECT_EQ(full.code(), 2);  // a ValueError

  EXPECT_STREQ(ConfigError("a.yaml", 3, 7, "", "bad").what(), "a.yaml:3:7: bad");
  EXPECT_STREQ(ConfigError("a.yaml", 0, 0, "k", "bad").what(), "a.yaml: k: bad");
  EXPECT_STREQ(ConfigError("a.yaml", 4, 0, "", "bad").what(), "a.yaml:4: bad");
  EXPECT_STREQ(ConfigError("", 0, 0, "", "bad").what(), "bad");
}

TEST(ConfigErrorFormatTest, IsCaughtAsValueError) {
  EXPECT_THROW(throw ConfigError("f", 1, 1, "", "m"), ValueError);
}

TEST(YamlLoadTest, SyntaxErrorHasFileLineAndColumn) {
  TempDir dir;
  fs::path file = dir.write("broken.yaml", "a: [1, 2\nb: 3\n");
  ConfigError e = catch_config_error([&] { load_yaml_file(file); });
  EXPECT_EQ(e.file(), file.string());
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 2);
  EXPECT_EQ(e.key(), "");
  EXPECT_EQ(e.message(), "end of sequence flow not found");
  EXPECT_EQ(std::string(e.what()), file.string() + ":2:2: end of sequence flow not found");
}

TEST(YamlLoadTest, BadIndentationIsReportedWhereItHappens) {
  ConfigError e = catch_config_error([] { load_yaml_string("a: 1\n b: 2\n", "inline.yaml"); });
  EXPECT_STREQ(e.what(), "inline.yaml:2:3: illegal map value");
}

TEST(YamlLoadTest, UnclosedFlowMapping) {
  ConfigError e = catch_config_error([] { load_yaml_string("a: 1\nb: {\n", "x.yaml"); });
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.column(), 1);
  EXPECT_EQ(e.message(), "end of map flow not found");
}

TEST(YamlLoadTest, MissingFileIsNotFound) {
  TempDir dir;
  fs::path missing = dir.path() / "nope.yaml";
  try {
    load_yaml_file(missing);
    FAIL() << "expected NotFoundError";
  } catch (const NotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
  }
}

TEST(YamlLoadTest, DirectoryIsNotFound) {
  TempDir dir;
  EXPECT_THROW(load_yaml_file(dir.path()), NotFoundError);
}

TEST(YamlLoadTest, EmptyDocumentIsNull) {
  TempDir dir;
  EXPECT_TRUE(load_yaml_file(dir.write("empty.yaml", "")).IsNull());
  EXPECT_TRUE(load_yaml_string("# only a comment\n", "c.yaml").IsNull());
}

TEST(YamlLoadTest, GoodFileLoads) {
  TempDir dir;
  YAML::Node node = load_yaml_file(dir.write("good.yaml", "name: cpu\nlist: [1, 2]\n"));
  EXPECT_EQ(node["name"].Scalar(), "cpu");
  EXPECT_EQ(node["list"].size(), 2u);
}

TEST(YamlDuplicateKeyTest, TopLevelDuplicate) {
  TempDir dir;
  fs::path file = dir.write("dup.yaml", "name: a\nversion: 1\nname: b\n");
  ConfigError e = catch_config_error([&] { load_yaml_file(file); });
  EXPECT_EQ(std::string(e.what()),
            file.string() + ":3:1: name: duplicate key 'name' (first defined at line 1)");
}

TEST(YamlDuplicateKeyTest, NestedDuplicateHasPath) {
  ConfigError e = catch_config_error([] {
    load_yaml_string("plugins:\n  - name: x\n    options:\n      a: 1\n      a: 2\n", "s.yaml");
  });
  EXPECT_EQ(e.line(), 5);
  EXPECT_EQ(e.column(), 7);
  EXPECT_EQ(e.key(), "plugins[0].options.a");
  EXPECT_EQ(e.message(), "duplicate key 'a' (first defined at line 4)");
}

TEST(YamlDuplicateKeyTest, FlowMappingDuplicate) {
  ConfigError e = catch_config_error([] { load_yaml_string("m: {a: 1, a: 2}\n", "f.yaml"); });
  EXPECT_STREQ(e.what(), "f.yaml:1:11: m.a: duplicate key 'a' (first defined at line 1)");
}

TEST(YamlDuplicateKeyTest, SameKeyInDifferentMappingsIsFine) {
  EXPECT_NO_THROW(load_yaml_string("a: {x: 1}\nb: {x: 2}\nl:\n  - x: 1\n  - x: 2\n", "ok.yaml"));
}

TEST(YamlDuplicateKeyTest, SelfReferencingAliasDoesNotLoop) {
  YAML::Node node = load_yaml_string("g: &x {k: *x}\n", "alias.yaml");
  EXPECT_TRUE(node["g"].IsMap());
  EXPECT_THROW(yaml_to_json(node), ConfigError);
}

TEST(MapReaderTest, RejectsNonMappings) {
  ConfigError seq =
      catch_config_error([] { MapReader(load_yaml_string("- a\n- b\n", "l.yaml"), "l.yaml", ""); });
  EXPECT_STREQ(seq.what(), "l.yaml:1:1: expected a mapping, got a sequence");
  ConfigError scalar =
      catch_config_error([] { MapReader(load_yaml_string("hello\n", "s.yaml"), "s.yaml", ""); });
  EXPECT_STREQ(scalar.what(), "s.yaml:1:1: expected a mapping, got a scalar 'hello'");
  ConfigError null =
      catch_config_error([] { MapReader(load_yaml_string("", "n.yaml"), "n.yaml", "root"); });
  EXPECT_STREQ(null.what(), "n.yaml: root: expected a mapping, got null");
}

TEST(MapReaderTest, MissingRequiredKeyPointsAtTheMapping) {
  ConfigError top = read_error<std::string>("version: 1\n", "name");
  EXPECT_STREQ(top.what(), "test.yaml:1:1: missing required key 'name'");
  ConfigError nested = catch_config_error([] {
    MapReader reader(load_yaml_string("outer:\n  a: 1\n", "test.yaml"), "test.yaml", "");
    reader.map("outer").required<int64_t>("b");
  });
  EXPECT_STREQ(nested.what(), "test.yaml:2:3: outer: missing required key 'b'");
}

TEST(MapReaderTest, Integers) {
  EXPECT_EQ(read_value<int64_t>("n: 42\n", "n"), 42);
  EXPECT_EQ(read_value<int64_t>("n: -7\n", "n"), -7);
  EXPECT_EQ(read_value<int64_t>("n: 0x10\n", "n"), 16);
  EXPECT_EQ(read_value<int64_t>("n: 0o17\n", "n"), 15);
  EXPECT_EQ(read_value<int64_t>("n: -9223372036854775808\n", "n"), INT64_MIN);
  EXPECT_EQ(read_value<int32_t>("n: 2147483647\n", "n"), 2147483647);

  EXPECT_STREQ(read_error<int64_t>("threads: many\n", "threads").what(),
               "test.yaml:1:10: threads: expected an integer, got 'many'");
  EXPECT_STREQ(read_error<int64_t>("n: 1.5\n", "n").what(),
               "test.yaml:1:4: n: expected an integer, got '1.5'");
  EXPECT_STREQ(read_error<int64_t>("n: [1]\n", "n").what(),
               "test.yaml:1:4: n: expected an integer, got a sequence");
  EXPECT_EQ(read_error<int64_t>("n: 99999999999999999999\n", "n").message(),
            "expected an integer, got '99999999999999999999' (out of the 64-bit range)");
  EXPECT_EQ(read_error<int32_t>("n: 5000000000\n", "n").message(),
            "expected an integer, got '5000000000' (out of the 32-bit range)");
  EXPECT_EQ(read_error<int32_t>("n: x\n", "n").message(), "expected an integer, got 'x'");
}

TEST(MapReaderTest, Doubles) {
  EXPECT_DOUBLE_EQ(read_value<double>("x: 1.5\n", "x"), 1.5);
  EXPECT_DOUBLE_EQ(read_value<double>("x: 2\n", "x"), 2.0);
  EXPECT_DOUBLE_EQ(read_value<double>("x: -3e2\n", "x"), -300.0);
  EXPECT_DOUBLE_EQ(read_value<double>("x: +.5\n", "x"), 0.5);
  EXPECT_TRUE(std::isinf(read_value<double>("x: .inf\n", "x")));
  EXPECT_TRUE(std::isnan(read_value<double>("x: .nan\n", "x")));
  EXPECT_STREQ(read_error<double>("ratio: abc\n", "ratio").what(),
               "test.yaml:1:8: ratio: expected a number, got 'abc'");
  EXPECT_EQ(read_error<double>("x: 1.2.3\n", "x").message(), "expected a number, got '1.2.3'");
  EXPECT_EQ(read_error<double>("x: inf\n", "x").message(), "expected a number, got 'inf'");
  EXPECT_EQ(read_error<double>("x: {a: 1}\n", "x").message(), "expected a number, got a mapping");
}

TEST(MapReaderTest, Booleans) {
  EXPECT_TRUE(read_value<bool>("b: true\n", "b"));
  EXPECT_FALSE(read_value<bool>("b: false\n", "b"));
  EXPECT_TRUE(read_value<bool>("b: True\n", "b"));
  EXPECT_TRUE(read_value<bool>("b: yes\n", "b"));
  EXPECT_FALSE(read_value<bool>("b: off\n", "b"));
  EXPECT_STREQ(read_error<bool>("enabled: maybe\n", "enabled").what(),
               "test.yaml:1:10: enabled: expected a boolean (true or false), got 'maybe'");
  EXPECT_EQ(read_error<bool>("b: 1\n", "b").message(),
            "expected a boolean (true or false), got '1'");
}

TEST(MapReaderTest, Strings) {
  EXPECT_EQ(read_value<std::string>("s: hello world\n", "s"), "hello world");
  EXPECT_EQ(read_value<std::string>("s: 8080\n", "s"), "8080");  // numbers are accepted
  EXPECT_EQ(read_value<std::string>("s: \"quoted\"\n", "s"), "quoted");
  EXPECT_STREQ(read_error<std::string>("name:\n  - a\n", "name").what(),
               "test.yaml:2:3: name: expected a string, got a sequence");
  EXPECT_STREQ(read_error<std::string>("name: {a: b}\n", "name").what(),
               "test.yaml:1:7: name: expected a string, got a mapping");
  // An empty value points at its key, not at the next line.
  EXPECT_STREQ(read_error<std::string>("name:\nnext: 1\n", "name").what(),
               "test.yaml:1:1: name: expected a string, got null");
}

TEST(MapReaderTest, StringLists) {
  EXPECT_EQ(read_value<std::vector<std::string>>("l: [a, b, 3]\n", "l"),
            (std::vector<std::string>{"a", "b", "3"}));
  EXPECT_TRUE(read_value<std::vector<std::string>>("l: []\n", "l").empty());
  EXPECT_STREQ(read_error<std::vector<std::string>>("paths: {a: 1}\n", "paths").what(),
               "test.yaml:1:8: paths: expected a list of strings, got a mapping");
  EXPECT_STREQ(read_error<std::vector<std::string>>("paths: one\n", "paths").what(),
               "test.yaml:1:8: paths: expected a list of strings, got 'one'");
  EXPECT_STREQ(read_error<std::vector<std::string>>("paths: [a, [b]]\n", "paths").what(),
               "test.yaml:1:12: paths[1]: expected a string, got a sequence");
}

TEST(MapReaderTest, NumberLists) {
  EXPECT_EQ(read_value<std::vector<int64_t>>("l: [1, -2, 0x3]\n", "l"),
            (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(read_value<std::vector<double>>("l: [1, 2.5]\n", "l"), (std::vector<double>{1, 2.5}));
  EXPECT_STREQ(read_error<std::vector<int64_t>>("nums:\n  - 1\n  - 2\n  - x\n", "nums").what(),
               "test.yaml:4:5: nums[2]: expected an integer, got 'x'");
  EXPECT_STREQ(read_error<std::vector<int64_t>>("nums: 3\n", "nums").what(),
               "test.yaml:1:7: nums: expected a list of integers, got '3'");
  EXPECT_STREQ(read_error<std::vector<double>>("w: [1, b]\n", "w").what(),
               "test.yaml:1:8: w[1]: expected a number, got 'b'");
  EXPECT_EQ(read_error<std::vector<double>>("w: x\n", "w").message(),
            "expected a list of numbers, got 'x'");
}

TEST(MapReaderTest, StringMaps) {
  using StringMap = std::map<std::string, std::string>;
  EXPECT_EQ(read_value<StringMap>("env: {A: x, B: 2}\n", "env"),
            (StringMap{{"A", "x"}, {"B", "2"}}));
  EXPECT_STREQ(read_error<StringMap>("env: [a]\n", "env").what(),
               "test.yaml:1:6: env: expected a mapping of strings, got a sequence");
  EXPECT_STREQ(read_error<StringMap>("env:\n  A: x\n  B: {c: d}\n", "env").what(),
               "test.yaml:3:6: env.B: expected a string, got a mapping");
  EXPECT_STREQ(read_error<StringMap>("env:\n  A:\n  B: x\n", "env").what(),
               "test.yaml:2:3: env.A: expected a string, got null");
}

TEST(MapReaderTest, OptionalValues) {
  MapReader reader(load_yaml_string("a: 5\nb:\nc: x\n", "o.yaml"), "o.yaml", "");
  EXPECT_EQ(reader.optional<int64_t>("a", 1), 5);
  EXPECT_EQ(reader.optional<int64_t>("b", 1), 1);  // null takes the fallback
  EXPECT_EQ(reader.optional<int64_t>("missing", 9), 9);
  EXPECT_EQ(reader.optional<std::string>("missing", "dflt"), "dflt");
  ConfigError e = catch_config_error([&] { reader.optional<int64_t>("c", 0); });
  EXPECT_STREQ(e.what(), "o.yaml:3:4: c: expected an integer, got 'x'");
  EXPECT_NO_THROW(reader.reject_unknown_keys());
}

TEST(MapReaderTest, NodesAndChildMaps) {
  MapReader reader(load_yaml_string("a:\n  b:\n    c: 1\nl: [1]\nn:\n", "m.yaml"), "m.yaml", "");
  EXPECT_FALSE(reader.node("missing").has_value());
  ASSERT_TRUE(reader.node("n").has_value());
  EXPECT_TRUE(reader.node("n")->IsNull());
  EXPECT_TRUE(reader.contains("a"));
  EXPECT_FALSE(reader.contains("zz"));

  MapReader b = reader.map("a").map("b");
  EXPECT_EQ(b.key_path(), "a.b");
  EXPECT_EQ(b.required<int64_t>("c"), 1);
  EXPECT_EQ(b.child_path("c"), "a.b.c");

  EXPECT_FALSE(reader.optional_map("missing").has_value());
  EXPECT_FALSE(reader.optional_map("n").has_value());
  ConfigError not_map = catch_config_error([&] { reader.map("l"); });
  EXPECT_STREQ(not_map.what(), "m.yaml:4:4: l: expected a mapping, got a sequence");
  ConfigError missing = catch_config_error([&] { reader.map("x"); });
  EXPECT_STREQ(missing.what(), "m.yaml:1:1: missing required key 'x'");
  ConfigError null_map = catch_config_error([&] { reader.map("n"); });
  EXPECT_STREQ(null_map.what(), "m.yaml:5:1: n: expected a mapping, got null");

  ConfigError custom = reader.error("l", "not allowed");
  EXPECT_STREQ(custom.what(), "m.yaml:4:4: l: not allowed");
}

TEST(MapReaderTest, UnknownKeyWithSuggestion) {
  TempDir dir;
  fs::path file = dir.write("m.yaml", "name: cpu\nverison: 1.0.0\n");
  MapReader reader(load_yaml_file(file), file.string(), "");
  reader.required<std::string>("name");
  reader.optional<std::string>("version", "");
  reader.optional<std::string>("kind", "");
  ConfigError e = catch_config_error([&] { reader.reject_unknown_keys(); });
  EXPECT_EQ(std::string(e.what()),
            file.string() +
                ":2:1: verison: unknown key 'verison' (did you mean 'version'?); known keys: "
                "name, version, kind");
}

TEST(MapReaderTest, UnknownKeyWithoutSuggestion) {
  MapReader reader(load_yaml_string("outer:\n  name: x\n  zzzzzz: 1\n", "u.yaml"), "u.yaml", "");
  MapReader outer = reader.map("outer");
  outer.node("name");
  outer.allow_keys({"version"});
  ConfigError e = catch_config_error([&] { outer.reject_unknown_keys(); });
  EXPECT_STREQ(e.what(),
               "u.yaml:3:3: outer.zzzzzz: unknown key 'zzzzzz'; known keys: name, version");
  EXPECT_NO_THROW(reader.reject_unknown_keys());
}

TEST(MapReaderTest, NothingKnownRejectsEveryKey) {
  MapReader reader(load_yaml_string("a: 1\n", "n.yaml"), "n.yaml", "opts");
  ConfigError e = catch_config_error([&] { reader.reject_unknown_keys(); });
  EXPECT_STREQ(e.what(), "n.yaml:1:1: opts.a: unknown key 'a'; no keys are allowed here");
}

TEST(EditDistanceTest, Levenshtein) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("same", "same"), 0u);
  EXPECT_EQ(edit_distance("verison", "version"), 2u);
}

TEST(EditDistanceTest, ClosestMatch) {
  std::vector<std::string> keys = {"name", "version", "description"};
  EXPECT_EQ(closest_match("verison", keys), "version");
  EXPECT_EQ(closest_match("nme", keys), "name");
  EXPECT_EQ(closest_match("xyzzy", keys), std::nullopt);
  EXPECT_EQ(closest_match("descrpition_", keys), "description");  // distance 3 <= 12 / 3
  EXPECT_EQ(closest_match("anything", {}), std::nullopt);
  EXPECT_EQ(closest_match("ab", {"xy", "ay"}), "ay");  // the closest wins
}

TEST(YamlToJsonTest, ScalarsAndCollections) {
  YAML::Node node = load_yaml_string(
      "{a: 1, b: 2.5, c: true, d: null, e: hello, f: '42', g: [1, x, false], h: {i: ~}}", "j.yaml");
  EXPECT_EQ(yaml_to_json(node),
            R"({"a":1,"b":2.5,"c":true,"d":null,"e":"hello","f":"42","g":[1,"x",false],)"
            R"("h":{"i":null}})");
}

TEST(YamlToJsonTest, ResolvesPlainScalarsOnly) {
  EXPECT_EQ(yaml_to_json(load_yaml_string("z: 1\na: -2\n", "j")), R"({"z":1,"a":-2})");
  EXPECT_EQ(yaml_to_json(load_yaml_string("x: 0x10\n", "j")), R"({"x":16})");
  EXPECT_EQ(yaml_to_json(load_yaml_string("x: 1e3\n", "j")), R"({"x":1000.0})");
  EXPECT_EQ(yaml_to_json(load_yaml_string("x: yes\n", "j")), R"({"x":"yes"})");
  EXPECT_EQ(yaml_to_json(load_yaml_string("x: \"true\"\n", "j")), R"({"x":"true"})");
  EXPECT_EQ(yaml_to_json(load_yaml_string("x: !!str 5\n", "j")), R"({"x":"5"})");
  EXPECT_EQ(yaml_to_json(load_yaml_string("x: .inf\n", "j")), R"({"x":".inf"})");
  EXPECT_EQ(yaml_to_json(load_yaml_string("x: 1.0.0\n", "j")), R"({"x":"1.0.0"})");
  EXPECT_EQ(yaml_to_json(load_yaml_string("x:\n", "j")), R"({"x":null})");
  EXPECT_EQ(yaml_to_json(load_yaml_string("x: 18446744073709551615\n", "j")),
            R"({"x":18446744073709551615})");
  EXPECT_EQ(yaml_to_json(load_yaml_string("x: \"say \\\"hi\\\"\"\n", "j")),
            R"({"x":"say \"hi\""})");
  EXPECT_EQ(yaml_to_json(load_yaml_string("", "j")), "null");
  EXPECT_EQ(yaml_to_json(load_yaml_string("5", "j")), "5");
  EXPECT_EQ(yaml_to_json(load_yaml_string("[]", "j")), "[]");
  EXPECT_EQ(yaml_to_json(load_yaml_string("{}", "j")), "{}");
}

TEST(YamlToJsonTest, NestedBlockStyle) {
  YAML::Node node = load_yaml_string(
      "opts:\n  threads: 4\n  names:\n    - a\n    - b\n  deep: {x: [1, {y: 2}]}\n", "j.yaml");
  EXPECT_EQ(yaml_to_json(node["opts"]),
            R"({"threads":4,"names":["a","b"],"deep":{"x":[1,{"y":2}]}})");
}

}  // namespace
}  // namespace kiln::config
