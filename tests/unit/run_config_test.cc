// SPDX-License-Identifier: Apache-2.0
// Run configurations (kiln/detail/run_config.h): parsing with positioned errors, generated
// inputs, output checks with numpy.allclose semantics, summaries, and the examples in
// configs/runs/.
#include "kiln/detail/run_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "kiln/config_error.h"
#include "kiln/error.h"
#include "kiln/kiln.h"
#include "kiln/npy.h"
#include "kiln/testing.h"
#include "run/elements.h"
#include "test_util.h"

namespace kiln::run {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// A temporary folder with a stand-in module file ("mod.so") for run configs to point at.
class RunConfigTest : public ::testing::Test {
 protected:
  RunConfigTest() { write("mod.so", "not a real module; the parser only checks it exists"); }

  // Writes `text` to `name` in the folder and returns the path.
  fs::path write(const std::string& name, const std::string& text) const {
    const fs::path path = dir_.path() / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // Writes a float32 .npy of `values` with `shape`.
  fs::path write_floats(const std::string& name, std::vector<int64_t> shape,
                        const std::vector<float>& values) const {
    const fs::path path = dir_.path() / name;
    fs::create_directories(path.parent_path());
    write_npy(path, DataType::Float(32), shape, values.data(), values.size() * sizeof(float));
    return path;
  }

  // Parses `text` written to run.yaml.
  RunSpec parse(const std::string& text) const { return parse_run_config(write("run.yaml", text)); }

  // Parses `text` and returns the ConfigError (a test failure when none is thrown).
  ConfigError parse_error(const std::string& text) const {
    try {
      parse(text);
    } catch (const ConfigError& e) {
      return e;
    }
    ADD_FAILURE() << "no ConfigError for:\n" << text;
    return ConfigError("", 0, 0, "", "");
  }

  // "<run.yaml>:<line>:<column>" of the first occurrence of `needle` in `text`; a '|' in
  // `needle` marks the position inside it (it is not part of the text).
  std::string where(const std::string& text, const std::string& needle) const {
    const size_t bar = needle.find('|');
    std::string plain = needle;
    if (bar != std::string::npos) plain.erase(bar, 1);
    size_t at = text.find(plain);
    EXPECT_NE(at, std::string::npos) << needle;
    if (bar != std::string::npos) at += bar;
    const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
    const size_t line_start = text.rfind('\n', at);
    const size_t column = line_start == std::string::npos ? at + 1 : at - line_start;
    return (dir_.path() / "run.yaml").string() + ":" + std::to_string(line) + ":" +
           std::to_string(column);
  }

  // Expects `text` to fail at `needle` about `key` with a message containing `message`.
  void expect_error(const std::string& text, const std::string& needle, const std::string& key,
                    const std::string& message) const {
    const ConfigError e = parse_error(text);
    EXPECT_THAT(e.what(), StartsWith(where(text, needle) + ": " + (key.empty() ? "" : key + ": ")))
        << text;
    EXPECT_THAT(e.what(), HasSubstr(message)) << text;
    EXPECT_EQ(e.key(), key);
  }

  const fs::path& dir() const { return dir_.path(); }

 private:
  TempDir dir_;
};

// ---------------------------------------------------------------------------------------------
// Parsing.

TEST_F(RunConfigTest, ParsesEveryKey) {
  write_floats("data/w.npy", {2, 3}, {1, 2, 3, 4, 5, 6});
  write_floats("expected/out.npy", {4}, {0, 0, 0, 0});
  const std::string text = R"(# every key
module: mod.so
function: vector_add
device: cpu:0
export: so
evaluator:
  number: 7
  repeat: 4
  min_repeat_ms: 25
  enable_cpu_cache_flush: true
  limit_zero_time_iterations: 50
  cooldown_interval_ms: 3
  repeats_to_cooldown: 2
  cache_flush_bytes: 1048576
  keep_raw_samples: true
  noise:
    enabled: true
    target_rse: 0.02
    min_repeats: 6
    min_time_s: 0.5
    timeout_s: 30
    max_repeats: 200
    plateau_window: 8
    plateau_tolerance: 0.1
inputs:
  - {name: a, shape: [4], dtype: float32, init: arange, start: 1, step: 0.5}
  - {shape: [4], dtype: float64, init: random, seed: 9, low: -2, high: 2}
  - {name: out, shape: [4], init: ones}
  - {name: alpha, scalar: 0.5}
  - {name: count, scalar: 3}
  - {name: flag, scalar: true}
  - {name: forced, scalar: 2, dtype: float64}
  - {name: w, npy: data/w.npy, shape: [2, 3], dtype: float32}
  - {name: z, shape: [], dtype: int8}
outputs:
  - {name: out, save: results/out.npy, expected: expected/out.npy, rtol: 1e-3, atol: 1e-6}
  - {index: 1}
)";
  const RunSpec spec = parse(text);
  EXPECT_EQ(spec.file, dir() / "run.yaml");
  EXPECT_EQ(spec.module, dir() / "mod.so");
  EXPECT_TRUE(spec.module.is_absolute());
  EXPECT_EQ(spec.function, "vector_add");
  EXPECT_EQ(spec.device, "cpu:0");
  EXPECT_EQ(spec.exporter, "so");

  EXPECT_EQ(spec.evaluator.number, 7);
  EXPECT_EQ(spec.evaluator.repeat, 4);
  EXPECT_EQ(spec.evaluator.min_repeat_ms, 25);
  EXPECT_TRUE(spec.evaluator.enable_cpu_cache_flush);
  EXPECT_EQ(spec.extra.number, 7);
  EXPECT_EQ(spec.extra.repeat, 4);
  EXPECT_EQ(spec.extra.min_repeat_ms, 25);
  EXPECT_EQ(spec.extra.f_preproc, "cache_flush_cpu_non_first_arg");
  EXPECT_EQ(spec.extra.limit_zero_time_iterations, 50);
  EXPECT_EQ(spec.extra.cooldown_interval_ms, 3);
  EXPECT_EQ(spec.extra.repeats_to_cooldown, 2);
  EXPECT_EQ(spec.extra.cache_flush_bytes, 1048576);
  EXPECT_TRUE(spec.extra.keep_raw_samples);
  EXPECT_TRUE(spec.extra.noise.enabled);
  EXPECT_DOUBLE_EQ(spec.extra.noise.target_rse, 0.02);
  EXPECT_EQ(spec.extra.noise.min_repeats, 6);
  EXPECT_DOUBLE_EQ(spec.extra.noise.min_time_s, 0.5);
  EXPECT_DOUBLE_EQ(spec.extra.noise.timeout_s, 30);
  EXPECT_EQ(spec.extra.noise.max_repeats, 200);
  EXPECT_EQ(spec.extra.noise.plateau_window, 8);
  EXPECT_DOUBLE_EQ(spec.extra.noise.plateau_tolerance, 0.1);
  // Code that times the run takes both together.
  const EvaluatorSettings settings = evaluator_settings(spec);
  EXPECT_EQ(settings.config.number, 7);
  EXPECT_TRUE(settings.config.enable_cpu_cache_flush);
  EXPECT_EQ(settings.options.cooldown_interval_ms, 3);
  EXPECT_DOUBLE_EQ(settings.options.noise.timeout_s, 30);

  ASSERT_EQ(spec.inputs.size(), 9u);
  const InputSpec& a = spec.inputs[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.kind, InputSpec::Kind::kGenerated);
  EXPECT_EQ(a.shape, std::vector<int64_t>{4});
  EXPECT_EQ(a.dtype, DataType::Float(32));
  EXPECT_EQ(a.init, InputSpec::Init::kArange);
  EXPECT_DOUBLE_EQ(a.start, 1);
  EXPECT_DOUBLE_EQ(a.step, 0.5);
  EXPECT_EQ(a.line, 26);
  const InputSpec& b = spec.inputs[1];
  EXPECT_EQ(b.name, "arg1") << "the default name is arg<position>";
  EXPECT_EQ(b.dtype, DataType::Float(64));
  EXPECT_EQ(b.init, InputSpec::Init::kRandom);
  EXPECT_EQ(b.seed, 9u);
  EXPECT_DOUBLE_EQ(b.low, -2);
  EXPECT_DOUBLE_EQ(b.high, 2);
  EXPECT_EQ(spec.inputs[2].init, InputSpec::Init::kOnes);
  EXPECT_EQ(spec.inputs[2].dtype, DataType::Float(32)) << "dtype defaults to float32";
  const InputSpec& alpha = spec.inputs[3];
  EXPECT_EQ(alpha.kind, InputSpec::Kind::kScalar);
  EXPECT_EQ(alpha.scalar.type_code(), KILN_TYPE_FLOAT);
  EXPECT_DOUBLE_EQ(alpha.scalar.cast<double>(), 0.5);
  EXPECT_EQ(alpha.dtype, DataType::Float(64));
  EXPECT_EQ(spec.inputs[4].scalar.type_code(), KILN_TYPE_INT);
  EXPECT_EQ(spec.inputs[4].scalar.cast<int64_t>(), 3);
  EXPECT_EQ(spec.inputs[4].dtype, DataType::Int(64));
  EXPECT_EQ(spec.inputs[5].scalar.type_code(), KILN_TYPE_BOOL);
  EXPECT_TRUE(spec.inputs[5].scalar.cast<bool>());
  EXPECT_EQ(spec.inputs[6].scalar.type_code(), KILN_TYPE_FLOAT) << "dtype float64 forces a double";
  EXPECT_DOUBLE_EQ(spec.inputs[6].scalar.cast<double>(), 2.0);
  const InputSpec& w = spec.inputs[7];
  EXPECT_EQ(w.kind, InputSpec::Kind::kNpy);
  EXPECT_EQ(w.npy, dir() / "data" / "w.npy");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.dtype, DataType::Float(32));
  EXPECT_TRUE(spec.inputs[8].shape.empty()) << "shape [] is a 0-d tensor";
  EXPECT_EQ(spec.inputs[8].dtype, DataType::Int(8));

  ASSERT_EQ(spec.outputs.size(), 2u);
  const OutputSpec& out = spec.outputs[0];
  EXPECT_EQ(out.index, 2);
  EXPECT_EQ(out.name, "out");
  EXPECT_EQ(out.save, dir() / "results" / "out.npy");
  EXPECT_EQ(out.expected, dir() / "expected" / "out.npy");
  EXPECT_DOUBLE_EQ(out.rtol, 1e-3);
  EXPECT_DOUBLE_EQ(out.atol, 1e-6);
  EXPECT_EQ(spec.outputs[1].index, 1);
  EXPECT_EQ(spec.outputs[1].name, "arg1");
  EXPECT_FALSE(spec.outputs[1].save);
  EXPECT_FALSE(spec.outputs[1].expected);
  EXPECT_DOUBLE_EQ(spec.outputs[1].rtol, 1e-5);
  EXPECT_DOUBLE_EQ(spec.outputs[1].atol, 1e-8);
}

TEST_F(RunConfigTest, Defaults) {
  const RunSpec spec = parse("module: mod.so\n");
  EXPECT_EQ(spec.function, "");
  EXPECT_EQ(spec.device, "cpu");
  EXPECT_EQ(spec.exporter, "tar");
  EXPECT_EQ(spec.evaluator.number, 3);
  EXPECT_EQ(spec.evaluator.repeat, 1);
  EXPECT_EQ(spec.evaluator.min_repeat_ms, 100);
  EXPECT_FALSE(spec.evaluator.enable_cpu_cache_flush);
  EXPECT_EQ(spec.extra.number, 3);
  EXPECT_EQ(spec.extra.min_repeat_ms, 100);
  EXPECT_EQ(spec.extra.f_preproc, "");
  EXPECT_EQ(spec.extra.limit_zero_time_iterations, 100);
  EXPECT_FALSE(spec.extra.noise.enabled);
  EXPECT_TRUE(spec.inputs.empty());
  EXPECT_TRUE(spec.outputs.empty());

  const RunSpec seeded = parse(
      "module: mod.so\ninputs:\n  - {shape: [2], init: random}\n  - {shape: [2], init: random}\n");
  EXPECT_EQ(seeded.inputs[0].seed, 0u) << "seed defaults to the input's position";
  EXPECT_EQ(seeded.inputs[1].seed, 1u);
  EXPECT_EQ(seeded.inputs[0].init, InputSpec::Init::kRandom);
  EXPECT_DOUBLE_EQ(seeded.inputs[0].low, 0);
  EXPECT_DOUBLE_EQ(seeded.inputs[0].high, 1);
  EXPECT_EQ(parse("module: mod.so\ninputs:\n  - {shape: [2]}\n").inputs[0].init,
            InputSpec::Init::kZeros);
}

TEST_F(RunConfigTest, MissingRunFileIsNotFound) {
  EXPECT_THROW(parse_run_config(dir() / "nope.yaml"), NotFoundError);
}

TEST_F(RunConfigTest, UnknownKeysSuggestTheClosest) {
  std::string text = "modul: mod.so\n";
  expect_error(text, "modul", "modul", "unknown key 'modul' (did you mean 'module'?)");
  text = "module: mod.so\ninputs:\n  - {name: a, shap: [3]}\n";
  expect_error(text, "shap", "inputs[0].shap", "unknown key 'shap' (did you mean 'shape'?)");
  text = "module: mod.so\nevaluator:\n  number: 1\n  repaet: 2\n";
  expect_error(text, "repaet", "evaluator.repaet", "(did you mean 'repeat'?)");
  text = "module: mod.so\nevaluator:\n  noise: {enabled: true, target_rsee: 0.1}\n";
  expect_error(text, "target_rsee", "evaluator.noise.target_rsee", "(did you mean 'target_rse'?)");
  text = "module: mod.so\ninputs: [{shape: [1], name: o}]\noutputs:\n  - {name: o, atoll: 1}\n";
  expect_error(text, "atoll", "outputs[0].atoll", "(did you mean 'atol'?)");
  text = "module: mod.so\ninputs:\n  - {shape: [2], init: rand}\n";
  expect_error(text, "rand}", "inputs[0].init",
               "unknown init 'rand' (did you mean 'random'?); expected one of zeros, ones, "
               "random, arange");
}

TEST_F(RunConfigTest, TabsInTheIndentationAreNamed) {
  // yaml-cpp calls these "illegal block entry", "illegal map value", "illegal tab when looking
  // for indentation": the message names the tab, at its own line and column.
  const std::string tabs = "tabs are not allowed for indentation in YAML; use spaces";
  expect_error("module: mod.so\ninputs:\n\t- {shape: [4]}\n", "|\t-", "", tabs);
  expect_error("module: mod.so\nevaluator:\n\tnumber: 3\n", "|\tnumber", "", tabs);
  expect_error("module: mod.so\nevaluator:\n  number: 3\n \trepeat: 2\n", " |\trepeat", "", tabs);
  // A tab where YAML allows one (inside a flow mapping) is no error; other syntax errors keep
  // yaml-cpp's message.
  EXPECT_EQ(parse("module: mod.so\nevaluator: {number: 3,\n\trepeat: 2}\n").evaluator.repeat, 2);
  EXPECT_THAT(parse_error("module: mod.so\ninputs: [1, 2\n").what(), Not(HasSubstr("tab")));
}

TEST_F(RunConfigTest, ErrorAtPointsAtTopLevelKeys) {
  // For what the caller finds after parsing: a device the backend lacks, a function the module
  // lacks, an exporter no plugin has.
  const std::string text = "module: mod.so\ndevice: cpu:3\nfunction: rleu\n";
  const RunSpec spec = parse(text);
  EXPECT_EQ(std::string(error_at(spec, "device", "no such device").what()),
            where(text, "cpu:3") + ": device: no such device");
  EXPECT_EQ(std::string(error_at(spec, "function", "no such function").what()),
            where(text, "rleu") + ": function: no such function");
  // A key the file does not have (a default): the file and the key, no position.
  const ConfigError e = error_at(spec, "export", "unknown exporter");
  EXPECT_EQ(std::string(e.what()), (dir() / "run.yaml").string() + ": export: unknown exporter");
  EXPECT_EQ(e.line(), 0);
}

TEST_F(RunConfigTest, FPreprocNamesARegisteredGlobalFunction) {
  RunSpec spec = parse("module: mod.so\nevaluator: {f_preproc: cache_flush_device_l2}\n");
  EXPECT_EQ(spec.extra.f_preproc, "cache_flush_device_l2");
  EXPECT_FALSE(spec.evaluator.enable_cpu_cache_flush);
  std::string text = "module: mod.so\nevaluator: {f_preproc: cache_flush_devcie_l2}\n";
  expect_error(text, "cache_flush_devcie_l2", "evaluator.f_preproc",
               "'cache_flush_devcie_l2' is not a registered global function");
  text = "module: mod.so\nevaluator: {enable_cpu_cache_flush: true, f_preproc: testing.x}\n";
  expect_error(text, "testing.x", "evaluator.f_preproc",
               "cannot be combined with enable_cpu_cache_flush");
}

// f_preproc from a run config reaches the evaluator the way `kiln run` passes it
// (RunHooks::evaluator = RunSpec::extra): it runs once before each repeat.
TEST_F(RunConfigTest, FPreprocRunsBeforeEachRepeatOfALocalRun) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  registry::set("testing.run_config_preproc",
                Function::from_packed("testing.run_config_preproc",
                                      [calls](const Any*, int32_t) {
                                        ++*calls;
                                        return Any();
                                      }),
                true);
  const RunSpec spec = parse("module: " + std::string(KILN_EXAMPLE_KERNEL_DIR) +
                             "/libvector_add.so\nfunction: vector_add\nexport: tar\n"
                             "evaluator: {number: 1, repeat: 3, min_repeat_ms: 0, "
                             "f_preproc: testing.run_config_preproc}\n"
                             "inputs:\n  - {shape: [16]}\n  - {shape: [16]}\n"
                             "  - {shape: [16]}\n  - {scalar: 0.5}\n");
  const EvaluatorSettings settings = evaluator_settings(spec);
  testing::RunHooks hooks;
  hooks.function = spec.function;
  hooks.evaluator = settings.options;
  testing::local_run(load_module(spec.module), spec.device, make_inputs(spec), settings.config,
                     spec.exporter, std::nullopt, hooks);
  registry::remove("testing.run_config_preproc");
  EXPECT_EQ(calls->load(), 3) << "once per repeat";
}

TEST_F(RunConfigTest, WrongTypes) {
  std::string text = "module: mod.so\nevaluator: {number: many}\n";
  expect_error(text, "many", "evaluator.number", "expected an integer, got 'many'");
  text = "module: mod.so\nevaluator:\n  enable_cpu_cache_flush: maybe\n";
  expect_error(text, "maybe", "evaluator.enable_cpu_cache_flush", "expected a boolean");
  text = "module: mod.so\ninputs: {a: 1}\n";
  expect_error(text, "{a", "inputs", "expected a list of inputs, got a mapping");
  text = "module: mod.so\ninputs:\n  - 5\n";
  expect_error(text, "5", "inputs[0]", "expected a mapping");
  text = "module: mod.so\ninputs:\n  - {shape: 5}\n";
  expect_error(text, "5}", "inputs[0].shape", "expected a list of integers, got '5'");
  text = "module: mod.so\ninputs:\n  - {shape: [2, x]}\n";
  expect_error(text, "x]", "inputs[0].shape[1]", "expected an integer, got 'x'");
  text = "module: [mod.so]\n";
  expect_error(text, "[mod", "module", "expected a string, got a sequence");
  text = "module: mod.so\ninputs:\n  - {shape: [2], init: random, low: low}\n";
  expect_error(text, "low}", "inputs[0].low", "expected a number, got 'low'");
  text = "module: mod.so\ninputs:\n  - {scalar: \"3\"}\n";
  expect_error(text, "\"3\"", "inputs[0].scalar", "got the quoted string '3'");
  text = "module: mod.so\ninputs:\n  - {scalar: [1]}\n";
  expect_error(text, "[1]", "inputs[0].scalar", "expected a number or a boolean");
  text = "module: mod.so\ninputs:\n  - {scalar: abc}\n";
  expect_error(text, "abc", "inputs[0].scalar",
               "expected an integer, a number or a boolean (true / false), got 'abc'");
  text = "module: mod.so\ninputs:\n  - {scalar: 1.5, dtype: int64}\n";
  expect_error(text, "1.5", "inputs[0].scalar", "expected an integer, got '1.5'");
  text = "module: mod.so\ninputs:\n  - {scalar: 1, dtype: int32}\n";
  expect_error(text, "int32", "inputs[0].dtype", "a scalar's dtype must be int64, float64 or bool");
}

TEST_F(RunConfigTest, MissingFiles) {
  std::string text = "module: missing.so\n";
  expect_error(text, "missing.so", "module",
               "module file not found: '" + (dir() / "missing.so").string() + "'");
  text = "module: mod.so\ninputs:\n  - {name: w, npy: data/none.npy}\n";
  expect_error(text, "data/none.npy", "inputs[0].npy",
               ".npy file not found: '" + (dir() / "data" / "none.npy").string() + "'");
  text =
      "module: mod.so\ninputs: [{name: o, shape: [1]}]\noutputs:\n  - {name: o, expected: e.npy}\n";
  expect_error(text, "e.npy", "outputs[0].expected", "expected .npy file not found");
  write("bad.npy", "this is not an npy file");
  text = "module: mod.so\ninputs:\n  - {npy: bad.npy}\n";
  expect_error(text, "bad.npy", "inputs[0].npy", "bad.npy");
  text = "module: .\n";
  expect_error(text, ".", "module", "is a directory");
  text = "function: f\n";
  expect_error(text, "function", "", "missing required key 'module'");
  EXPECT_THAT(parse_error("").what(), HasSubstr("empty"));
}

TEST_F(RunConfigTest, NpyShapeAndDtypeChecks) {
  write_floats("w.npy", {2, 3}, {1, 2, 3, 4, 5, 6});
  std::string text = "module: mod.so\ninputs:\n  - {npy: w.npy, shape: [3, 2]}\n";
  expect_error(text, "[3, 2]", "inputs[0].shape",
               "shape [3, 2] does not match the shape [2, 3] of '" + (dir() / "w.npy").string());
  text = "module: mod.so\ninputs:\n  - {npy: w.npy, dtype: float64}\n";
  expect_error(text, "float64", "inputs[0].dtype",
               "dtype float64 does not match the dtype float32 of '" + (dir() / "w.npy").string());
  text = "module: mod.so\ninputs:\n  - {npy: w.npy, init: ones}\n";
  expect_error(text, "ones", "inputs[0].init", "'init' does not apply to an .npy input");
  const RunSpec spec = parse("module: mod.so\ninputs:\n  - {npy: w.npy}\n");
  EXPECT_EQ(spec.inputs[0].shape, (std::vector<int64_t>{2, 3})) << "filled from the file";
}

TEST_F(RunConfigTest, BadValues) {
  std::string text = "module: mod.so\ndevice: gpu0\n";
  expect_error(text, "gpu0", "device", "gpu0");
  text = "module: mod.so\ndevice: cpu:x\n";
  expect_error(text, "cpu:x", "device", "cpu:x");
  text = "module: mod.so\ninputs:\n  - {shape: [2], dtype: float33}\n";
  expect_error(text, "float33", "inputs[0].dtype", "float33");
  text = "module: mod.so\ninputs:\n  - {shape: [2, -3]}\n";
  expect_error(text, "-3", "inputs[0].shape[1]", "dimensions must be >= 0, got -3");
  text = "module: mod.so\ninputs:\n  - {shape: [2], dtype: int8x4}\n";
  expect_error(text, "int8x4", "inputs[0].dtype", "cannot generate elements of dtype int8x4");
  text = "module: mod.so\nevaluator: {number: 0}\n";
  expect_error(text, "0}", "evaluator.number", "must be >= 1, got 0");
  text = "module: mod.so\nevaluator: {repeat: 0}\n";
  expect_error(text, "0}", "evaluator.repeat", "must be >= 1, got 0");
  text = "module: mod.so\nevaluator: {min_repeat_ms: -1}\n";
  expect_error(text, "-1", "evaluator.min_repeat_ms", "must be >= 0, got -1");
  text = "module: mod.so\nevaluator: {cache_flush_bytes: -5}\n";
  expect_error(text, "-5", "evaluator.cache_flush_bytes", "must be >= 0");
  text = "module: mod.so\nevaluator:\n  noise: {min_repeats: 10, max_repeats: 5}\n";
  expect_error(text, "5}", "evaluator.noise.max_repeats", "max_repeats (5) must be >= min_repeats");
  text = "module: mod.so\nevaluator:\n  noise: {target_rse: 0}\n";
  expect_error(text, "0}", "evaluator.noise.target_rse", "must be > 0");
  text = "module: mod.so\nfunction: ''\n";
  expect_error(text, "''", "function", "must not be empty");
  text = "module: mod.so\nexport: ''\n";
  expect_error(text, "''", "export", "must not be empty");
  text = "module: ${HOME}/mod.so\n";
  expect_error(text, "${HOME}", "module", "unknown variable '${HOME}'");
}

TEST_F(RunConfigTest, GenerationParameters) {
  std::string text = "module: mod.so\ninputs:\n  - {shape: [2], init: zeros, seed: 3}\n";
  expect_error(text, "3}", "inputs[0].seed",
               "'seed' applies only to init: random (this input has init: zeros)");
  text = "module: mod.so\ninputs:\n  - {shape: [2], init: random, step: 3}\n";
  expect_error(text, "3}", "inputs[0].step", "'step' applies only to init: arange");
  text = "module: mod.so\ninputs:\n  - {shape: [2], init: random, low: 1, high: 1}\n";
  expect_error(text, "1}", "inputs[0].high", "must be greater than low (1), got 1");
  text = "module: mod.so\ninputs:\n  - {shape: [2], dtype: int32, init: random, low: 0.5}\n";
  expect_error(text, "0.5", "inputs[0].low", "must be a whole number for dtype int32, got 0.5");
  text =
      "module: mod.so\ninputs:\n  - {shape: [2], dtype: uint8, init: random, low: -1, high: 3}\n";
  expect_error(text, "-1", "inputs[0].low", "-1 is outside the range [0, 255] of dtype uint8");
  text = "module: mod.so\ninputs:\n  - {shape: [2], dtype: int8, init: random, high: 1000}\n";
  expect_error(text, "1000", "inputs[0].high", "outside the range");
  text = "module: mod.so\ninputs:\n  - {shape: [2], init: random, seed: -1}\n";
  expect_error(text, "-1", "inputs[0].seed", "must be >= 0, got -1");
  text = "module: mod.so\ninputs:\n  - {shape: [2], init: random, high: .inf}\n";
  expect_error(text, ".inf", "inputs[0].high", "must be a finite number");
  text =
      "module: mod.so\ninputs:\n  - {shape: [2], dtype: float16, init: random, low: 1.0001, "
      "high: 1.0002}\n";
  expect_error(text, "1.0002", "inputs[0].high", "no float16 value lies in [1.0001, 1.0002)");
  text = "module: mod.so\ninputs:\n  - {shape: [300], dtype: int8, init: arange}\n";
  // No `step` key to point at: the error is at the input, about the key to add.
  expect_error(text, "{shape", "inputs[0].step",
               "the last value, start + 299 * step = 299, is outside the range [-128, 127] of "
               "dtype int8");
  text = "module: mod.so\ninputs:\n  - {shape: [3], dtype: int8, init: arange, step: 0.5}\n";
  expect_error(text, "0.5", "inputs[0].step", "must be a whole number");
  text = "module: mod.so\ninputs:\n  - {shape: [3], dtype: float16, init: arange, start: 70000}\n";
  expect_error(text, "70000", "inputs[0].start", "70000 overflows dtype float16");
}

TEST_F(RunConfigTest, InputKindsAndNames) {
  std::string text = "module: mod.so\ninputs:\n  - {name: a}\n";
  expect_error(text, "{name", "inputs[0]", "an input needs 'npy'");
  write_floats("w.npy", {1}, {1});
  text = "module: mod.so\ninputs:\n  - {npy: w.npy, scalar: 1}\n";
  expect_error(text, "1}", "inputs[0].scalar", "'scalar' does not apply to an .npy input");
  text = "module: mod.so\ninputs:\n  - {scalar: 1, shape: [2]}\n";
  expect_error(text, "[2]", "inputs[0].shape", "'shape' does not apply to a scalar input");
  text = "module: mod.so\ninputs:\n  - {name: a, shape: [1]}\n  - {name: a, scalar: 1}\n";
  expect_error(text, "a, scalar", "inputs[1].name", "inputs[0] is already named 'a'");
  text = "module: mod.so\ninputs:\n  - {name: '', shape: [1]}\n";
  expect_error(text, "''", "inputs[0].name", "must not be empty");
}

TEST_F(RunConfigTest, Outputs) {
  const std::string inputs =
      "module: mod.so\ninputs:\n  - {name: a, shape: [2]}\n  - {name: out, shape: [2]}\n"
      "  - {name: alpha, scalar: 1}\noutputs:\n";
  std::string text = inputs + "  - {index: 3}\n";
  expect_error(text, "3}", "outputs[0].index",
               "index 3 is out of range: the run has 3 inputs (0..2)");
  text = inputs + "  - {index: -1}\n";
  expect_error(text, "-1", "outputs[0].index", "index -1 is out of range");
  text = inputs + "  - {name: ot}\n";
  expect_error(text, "ot}", "outputs[0].name",
               "no input is named 'ot' (did you mean 'out'?); inputs: a, out, alpha");
  text = inputs + "  - {name: out, index: 0}\n";
  expect_error(text, "out, index", "outputs[0].name",
               "input 'out' is at index 1, but index says 0");
  text = inputs + "  - {name: alpha}\n";
  expect_error(text, "alpha}", "outputs[0].name", "input 'alpha' is a scalar");
  text = inputs + "  - {save: x.npy}\n";
  expect_error(text, "{save", "outputs[0]", "an output needs 'name'");
  text = inputs + "  - {name: out}\n  - {index: 1}\n";
  expect_error(text, "{index: |1}", "outputs[1].index",
               "input 'out' is already checked by outputs[0]");
  text = inputs + "  - {name: out, rtol: -1}\n";
  expect_error(text, "-1", "outputs[0].rtol", "must be >= 0, got -1");
  text = inputs + "  - {name: out, atol: .nan}\n";
  expect_error(text, ".nan", "outputs[0].atol", "must be >= 0");
  write_floats("e.npy", {2}, {0, 0});
  text = inputs + "  - {name: out, expected: e.npy, save: ./e.npy}\n";
  expect_error(text, "./e.npy", "outputs[0].save", "save and expected name the same file");
}

TEST_F(RunConfigTest, ExamplesVariable) {
  TempDir examples;
  std::ofstream(examples.path() / "libfoo.so") << "x";
  {
    ScopedEnv env("KILN_EXAMPLES", examples.path().string());
    EXPECT_EQ(examples_dir(), examples.path());
    const RunSpec spec = parse("module: ${KILN_EXAMPLES}/libfoo.so\n");
    EXPECT_EQ(spec.module, examples.path() / "libfoo.so");
    const std::string text = "module: ${KILN_EXAMPLES}/libbar.so\n";
    const ConfigError e = parse_error(text);
    EXPECT_THAT(e.what(), HasSubstr("module file not found: '" +
                                    (examples.path() / "libbar.so").string() + "'"));
    EXPECT_THAT(e.what(), HasSubstr("from '${KILN_EXAMPLES}/libbar.so', KILN_EXAMPLES='" +
                                    examples.path().string() + "'"));
  }
  {
    // Unset (or empty): the build tree's example kernels, beside libkiln.
    ScopedEnv env("KILN_EXAMPLES", std::nullopt);
    EXPECT_TRUE(fs::equivalent(examples_dir(), KILN_EXAMPLE_KERNEL_DIR)) << examples_dir();
    const RunSpec spec = parse("module: ${KILN_EXAMPLES}/libvector_add.so\n");
    EXPECT_TRUE(
        fs::equivalent(spec.module, fs::path(KILN_EXAMPLE_KERNEL_DIR) / "libvector_add.so"));
  }
  {
    ScopedEnv env("KILN_EXAMPLES", "");
    EXPECT_TRUE(fs::equivalent(examples_dir(), KILN_EXAMPLE_KERNEL_DIR));
  }
}

// ---------------------------------------------------------------------------------------------
// Inputs.

// The bytes of tensor argument `i`.
std::vector<uint8_t> bytes_of(const std::vector<Any>& args, size_t i) {
  const Tensor t = args.at(i).cast<Tensor>();
  const auto* p = static_cast<const uint8_t*>(t.data());
  return {p, p + t.nbytes()};
}

class RunInputsTest : public RunConfigTest {};

TEST_F(RunInputsTest, RandomIsDeterministicPerSeed) {
  const std::string text = R"(module: mod.so
inputs:
  - {shape: [1000], init: random, seed: 5}
  - {shape: [1000], init: random, seed: 5}
  - {shape: [1000], init: random, seed: 6}
  - {shape: [10, 100], dtype: int32, init: random, seed: 5, low: -50, high: 50}
  - {shape: [1000], dtype: int32, init: random, seed: 5, low: -50, high: 50}
)";
  const RunSpec spec = parse(text);
  const std::vector<Any> first = make_inputs(spec);
  const std::vector<Any> again = make_inputs(spec);
  ASSERT_EQ(first.size(), 5u);
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(bytes_of(first, i), bytes_of(again, i));
  EXPECT_EQ(bytes_of(first, 0), bytes_of(first, 1)) << "same seed, same bytes";
  EXPECT_NE(bytes_of(first, 0), bytes_of(first, 2)) << "another seed, other bytes";
  EXPECT_EQ(bytes_of(first, 3), bytes_of(first, 4)) << "the shape does not change the stream";
  // Pinned values: the mapping from the generator is part of the format.
  const auto a = first[0].cast<Tensor>().host_span<float>();
  std::mt19937_64 engine(5);
  const double unit = static_cast<double>(engine() >> 11) * 0x1p-53;
  EXPECT_EQ(a[0], static_cast<float>(unit));
}

TEST_F(RunInputsTest, RandomRanges) {
  const std::string text = R"(module: mod.so
inputs:
  - {shape: [20000], dtype: float32, init: random, low: -1, high: 1}
  - {shape: [20000], dtype: float16, init: random, low: 0.5, high: 0.5625}
  - {shape: [20000], dtype: float64, init: random, low: 10, high: 20}
  - {shape: [20000], dtype: int32, init: random, low: -3, high: 4}
  - {shape: [20000], dtype: uint8, init: random, low: 250, high: 256}
  - {shape: [20000], dtype: bool, init: random, high: 2}
  - {shape: [20000], dtype: bfloat16, init: random, low: -8, high: 8}
  - {shape: [20000], dtype: int64, init: random, low: -9007199254740992, high: 9007199254740992}
)";
  const std::vector<Any> args = make_inputs(parse(text));
  auto check = [&](size_t i, double low, double high, size_t min_distinct, size_t max_distinct) {
    const Tensor t = args[i].cast<Tensor>();
    std::set<double> distinct;
    for (int64_t k = 0; k < t.numel(); ++k) {
      const double v = detail::load_element(t.data(), t.dtype(), k);
      ASSERT_GE(v, low) << "input " << i;
      ASSERT_LT(v, high) << "input " << i;
      distinct.insert(v);
    }
    EXPECT_GE(distinct.size(), min_distinct) << "input " << i;
    EXPECT_LE(distinct.size(), max_distinct) << "input " << i;
  };
  check(0, -1, 1, 10000, 20000);
  check(1, 0.5, 0.5625, 128, 128);  // every float16 in [0.5, 0.5625): 128 values
  check(2, 10, 20, 20000, 20000);
  check(3, -3, 4, 7, 7);
  check(4, 250, 256, 6, 6);
  check(5, 0, 2, 2, 2);
  check(6, -8, 8, 100, 20000);
  check(7, -9007199254740992.0, 9007199254740992.0, 19990, 20000);
  // Uniform: the mean of 20000 draws of U[-1, 1) is within a few standard errors of 0.
  const auto floats = args[0].cast<Tensor>().host_span<float>();
  double sum = 0;
  for (float f : floats) sum += f;
  EXPECT_NEAR(sum / floats.size(), 0.0, 0.03);
}

TEST_F(RunInputsTest, ArangeOnesZerosAndScalars) {
  write_floats("w.npy", {2, 2}, {1.5f, -2, 3, 4});
  const std::string text = R"(module: mod.so
inputs:
  - {shape: [5], init: arange}
  - {shape: [2, 3], dtype: int16, init: arange, start: -3, step: 2}
  - {shape: [4], dtype: float64, init: arange, start: 0.5, step: 0.25}
  - {shape: [3], dtype: uint8, init: ones}
  - {shape: [3], dtype: float16, init: ones}
  - {shape: [3], dtype: float32}
  - {shape: [0], init: random}
  - {npy: w.npy}
  - {scalar: 7}
  - {scalar: -2.5}
  - {scalar: false}
  - {scalar: 4, dtype: float64}
  - {scalar: 0x10}
)";
  const std::vector<Any> args = make_inputs(parse(text));
  ASSERT_EQ(args.size(), 13u);
  const auto f = args[0].cast<Tensor>().host_span<float>();
  EXPECT_EQ(std::vector<float>(f.begin(), f.end()), (std::vector<float>{0, 1, 2, 3, 4}));
  const Tensor i16 = args[1].cast<Tensor>();
  EXPECT_EQ(std::vector<int64_t>(i16.shape().begin(), i16.shape().end()),
            (std::vector<int64_t>{2, 3}));
  const auto s = i16.host_span<int16_t>();
  EXPECT_EQ(std::vector<int16_t>(s.begin(), s.end()), (std::vector<int16_t>{-3, -1, 1, 3, 5, 7}));
  const auto d = args[2].cast<Tensor>().host_span<double>();
  EXPECT_EQ(std::vector<double>(d.begin(), d.end()), (std::vector<double>{0.5, 0.75, 1, 1.25}));
  const auto u = args[3].cast<Tensor>().host_span<uint8_t>();
  EXPECT_EQ(std::vector<uint8_t>(u.begin(), u.end()), (std::vector<uint8_t>{1, 1, 1}));
  const auto h = args[4].cast<Tensor>().host_span<uint16_t>();
  EXPECT_EQ(std::vector<uint16_t>(h.begin(), h.end()),
            (std::vector<uint16_t>{0x3c00, 0x3c00, 0x3c00}));
  const auto z = args[5].cast<Tensor>().host_span<float>();
  EXPECT_EQ(std::vector<float>(z.begin(), z.end()), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(args[6].cast<Tensor>().numel(), 0);
  const Tensor w = args[7].cast<Tensor>();
  EXPECT_EQ(w.device(), Device::cpu());
  const auto wf = w.host_span<float>();
  EXPECT_EQ(std::vector<float>(wf.begin(), wf.end()), (std::vector<float>{1.5f, -2, 3, 4}));
  EXPECT_EQ(args[8].type_code(), KILN_TYPE_INT);
  EXPECT_EQ(args[8].cast<int64_t>(), 7);
  EXPECT_EQ(args[9].type_code(), KILN_TYPE_FLOAT);
  EXPECT_DOUBLE_EQ(args[9].cast<double>(), -2.5);
  EXPECT_EQ(args[10].type_code(), KILN_TYPE_BOOL);
  EXPECT_FALSE(args[10].cast<bool>());
  EXPECT_EQ(args[11].type_code(), KILN_TYPE_FLOAT);
  EXPECT_EQ(args[12].cast<int64_t>(), 16);
}

TEST_F(RunInputsTest, HandMadeSpecsAreChecked) {
  RunSpec spec;
  InputSpec bad;
  bad.name = "x";
  bad.shape = {4};
  bad.init = InputSpec::Init::kRandom;
  bad.low = 2;
  bad.high = 1;
  spec.inputs.push_back(bad);
  try {
    make_inputs(spec);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("input 'x': high: must be greater than low (2), got 1"));
  }
}

TEST(RunElementsTest, HalfAndBfloat16Conversions) {
  EXPECT_EQ(detail::float16_bits(1.0), 0x3c00);
  EXPECT_EQ(detail::float16_bits(-2.0), 0xc000);
  EXPECT_EQ(detail::float16_bits(65504.0), 0x7bff);
  EXPECT_EQ(detail::float16_bits(65519.0), 0x7bff);
  EXPECT_EQ(detail::float16_bits(65520.0), 0x7c00) << "rounds to infinity";
  EXPECT_EQ(detail::float16_bits(0x1p-24), 0x0001);
  EXPECT_EQ(detail::float16_bits(0x1p-26), 0x0000) << "below half the smallest subnormal";
  EXPECT_EQ(detail::float16_bits(0.1), 0x2e66);
  EXPECT_EQ(detail::float16_bits(1.0 + 0x1p-11), 0x3c00) << "tie to even";
  EXPECT_EQ(detail::float16_bits(1.0 + 3 * 0x1p-11), 0x3c02) << "tie to even";
  EXPECT_TRUE(std::isnan(detail::float16_value(detail::float16_bits(NAN))));
  EXPECT_DOUBLE_EQ(detail::float16_value(0x3555), 0.333251953125);
  EXPECT_DOUBLE_EQ(detail::float16_value(0x0001), 0x1p-24);
  EXPECT_EQ(detail::bfloat16_bits(1.0), 0x3f80);
  EXPECT_EQ(detail::bfloat16_bits(0.1), 0x3dcd);
  EXPECT_DOUBLE_EQ(detail::bfloat16_value(0x3f80), 1.0);
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) {  // every finite positive half round-trips
    ASSERT_EQ(detail::float16_bits(detail::float16_value(static_cast<uint16_t>(bits))), bits);
  }
}

// ---------------------------------------------------------------------------------------------
// Checks.

// A float32 host tensor of `values` with `shape`.
Tensor float_tensor(std::vector<int64_t> shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty(std::move(shape), DataType::Float(32));
  t.copy_from(values.data(), values.size() * sizeof(float));
  return t;
}

class RunChecksTest : public RunConfigTest {
 protected:
  // A spec with one float32 input "out" of `shape` checked against `expected` values.
  RunSpec spec_with_expected(std::vector<int64_t> shape, const std::vector<float>& expected,
                             double rtol = 1e-5, double atol = 1e-8) {
    RunSpec spec;
    InputSpec in;
    in.name = "out";
    in.shape = shape;
    spec.inputs.push_back(in);
    OutputSpec out;
    out.index = 0;
    out.name = "out";
    out.expected = write_floats("expected.npy", shape, expected);
    out.rtol = rtol;
    out.atol = atol;
    spec.outputs.push_back(out);
    return spec;
  }
  std::string expected_path() const { return (dir() / "expected.npy").string(); }
};

TEST_F(RunChecksTest, Passes) {
  const RunSpec spec = spec_with_expected({4}, {1, 2, 3, 4});
  const CheckResult r = check_outputs(spec, {float_tensor({4}, {1, 2, 3, 4.00001f})});
  EXPECT_TRUE(r.ok) << r.summary;
  EXPECT_THAT(r.summary, StartsWith("out: ok (4 elements match '" + expected_path() +
                                    "' within rtol=1e-05 atol=1e-08; max abs diff 1.00136e-05)"));
}

TEST_F(RunChecksTest, FailsWithCountsMaxDiffsAndPositions) {
  std::vector<float> expected(24, 1.0f);
  std::vector<float> got = expected;
  got[5] = 1.5f;    // [1, 1]: abs 0.5, rel 0.5
  got[6] = 1.25f;   // [1, 2]
  expected[7] = 0;  // [1, 3]: got 1, expected 0: abs 1, rel inf
  got[20] = NAN;    // [5, 0]
  const RunSpec spec = spec_with_expected({6, 4}, expected);
  const CheckResult r = check_outputs(spec, {float_tensor({6, 4}, got)});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.summary,
            "out: 4 of 24 elements differ (max abs diff 1 at [1, 3], max rel diff inf at [1, 3]); "
            "first mismatches: [1, 1] got 1.5 expected 1, [1, 2] got 1.25 expected 1, [1, 3] got "
            "1 expected 0, [5, 0] got nan expected 1; compared with '" +
                expected_path() + "' at rtol=1e-05 atol=1e-08");
}

TEST_F(RunChecksTest, ListsAtMostFiveMismatches) {
  std::vector<float> expected(10, 0.0f);
  std::vector<float> got(10, 0.0f);
  for (int i = 0; i < 10; ++i) got[i] = 0.1f * static_cast<float>(i + 1);
  expected[9] = 2.0f;  // got 1: abs 1, rel 0.5
  const RunSpec spec = spec_with_expected({10}, expected);
  const CheckResult r = check_outputs(spec, {float_tensor({10}, got)});
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.summary, StartsWith("out: 10 of 10 elements differ (max abs diff 1 at [9], max rel "
                                    "diff inf at [0]); first mismatches: [0] got 0.1 expected 0, "
                                    "[1] got 0.2 expected 0, [2] got 0.3 expected 0, [3] got 0.4 "
                                    "expected 0, [4] got 0.5 expected 0, ...; compared with"));
}

TEST_F(RunChecksTest, ToleranceSemantics) {
  // |got - expected| <= atol + rtol * |expected|: asymmetric, as numpy.allclose.
  const RunSpec spec = spec_with_expected({2}, {100, 0}, 0.01, 0.5);
  EXPECT_TRUE(check_outputs(spec, {float_tensor({2}, {101.5f, 0.5f})}).ok) << "at the bounds";
  EXPECT_FALSE(check_outputs(spec, {float_tensor({2}, {101.5625f, 0})}).ok) << "past rtol";
  EXPECT_FALSE(check_outputs(spec, {float_tensor({2}, {100, 0.5625f})}).ok) << "past atol";
  const RunSpec exact = spec_with_expected({1}, {1}, 0, 0);
  EXPECT_TRUE(check_outputs(exact, {float_tensor({1}, {1})}).ok);
  EXPECT_FALSE(check_outputs(exact, {float_tensor({1}, {std::nextafter(1.0f, 2.0f)})}).ok);
  const float inf = std::numeric_limits<float>::infinity();
  const RunSpec infinities = spec_with_expected({2}, {inf, -inf});
  EXPECT_TRUE(check_outputs(infinities, {float_tensor({2}, {inf, -inf})}).ok);
  EXPECT_FALSE(check_outputs(infinities, {float_tensor({2}, {-inf, -inf})}).ok);
  const RunSpec nans = spec_with_expected({1}, {NAN});
  const CheckResult r = check_outputs(nans, {float_tensor({1}, {NAN})});
  EXPECT_FALSE(r.ok) << "equal_nan is false, as numpy's default";
  EXPECT_THAT(r.summary, HasSubstr("1 of 1 element differ (every mismatch involves NaN)"));
}

TEST_F(RunChecksTest, ShapeAndDtypeMismatches) {
  const RunSpec spec = spec_with_expected({4}, {1, 2, 3, 4});
  CheckResult r = check_outputs(spec, {float_tensor({2, 2}, {1, 2, 3, 4})});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.summary,
            "out: shape mismatch: got [2, 2], expected [4] (from '" + expected_path() + "')");
  Tensor doubles = Tensor::empty({4}, DataType::Float(64));
  r = check_outputs(spec, {doubles});
  EXPECT_EQ(r.summary,
            "out: dtype mismatch: got float64, expected float32 (from '" + expected_path() + "')");
  r = check_outputs(spec, {Tensor::empty({3}, DataType::Int(32))});
  EXPECT_EQ(r.summary, "out: shape and dtype mismatch: got int32[3], expected float32[4] (from '" +
                           expected_path() + "')");
  r = check_outputs(spec, {Any(int64_t{3})});
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.summary, StartsWith("out: expected a tensor, got int"));
  EXPECT_THROW(check_outputs(spec, {}), ValueError);
}

TEST_F(RunChecksTest, IntegerAndBoolComparisons) {
  RunSpec spec;
  InputSpec in;
  in.name = "n";
  spec.inputs.push_back(in);
  const std::vector<int32_t> expected = {1, 2, 1000000, -7};
  OutputSpec out;
  out.name = "n";
  out.expected = dir() / "ints.npy";
  write_npy(*out.expected, DataType::Int(32), std::vector<int64_t>{4}, expected.data(), 16);
  spec.outputs.push_back(out);
  Tensor got = Tensor::empty({4}, DataType::Int(32));
  const std::vector<int32_t> values = {1, 2, 1000001, -8};
  got.copy_from(values.data(), 16);
  // The same formula as floats: 1000001 is within rtol=1e-5 of 1000000, -8 is not close to -7.
  CheckResult r = check_outputs(spec, {got});
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.summary, HasSubstr("n: 1 of 4 elements differ (max abs diff 1 at [3], max rel "
                                   "diff 0.142857 at [3]); first mismatches: [3] got -8 expected "
                                   "-7;"));
  spec.outputs[0].rtol = 0;
  spec.outputs[0].atol = 0;
  r = check_outputs(spec, {got});
  EXPECT_THAT(r.summary, HasSubstr("n: 2 of 4 elements differ"));

  const uint8_t bools[] = {1, 0, 1};
  spec.outputs[0].expected = dir() / "bools.npy";
  write_npy(*spec.outputs[0].expected, DataType::Bool(), std::vector<int64_t>{3}, bools, 3);
  Tensor b = Tensor::empty({3}, DataType::Bool());
  const uint8_t got_bools[] = {1, 1, 1};
  b.copy_from(got_bools, 3);
  r = check_outputs(spec, {b});
  EXPECT_THAT(r.summary, HasSubstr("first mismatches: [1] got true expected false;"));
}

TEST_F(RunChecksTest, SaveWritesAnNpy) {
  RunSpec spec = spec_with_expected({3}, {1, 2, 3});
  spec.outputs[0].save = dir() / "results" / "deep" / "out.npy";
  const CheckResult r = check_outputs(spec, {float_tensor({3}, {1, 2, 3})});
  EXPECT_TRUE(r.ok) << r.summary;
  EXPECT_THAT(r.summary, HasSubstr("\nout: saved float32[3] to '" +
                                   (dir() / "results" / "deep" / "out.npy").string() + "'"));
  const NpyArray saved = read_npy(dir() / "results" / "deep" / "out.npy");
  EXPECT_EQ(saved.dtype, DataType::Float(32));
  EXPECT_EQ(saved.shape, std::vector<int64_t>{3});
  float values[3];
  std::memcpy(values, saved.data.data(), sizeof(values));
  EXPECT_EQ(values[2], 3.0f);

  // A failed save is reported, not thrown.
  write("blocker", "a file where a folder should be");
  spec.outputs[0].save = dir() / "blocker" / "out.npy";
  const CheckResult failed = check_outputs(spec, {float_tensor({3}, {1, 2, 3})});
  EXPECT_FALSE(failed.ok);
  EXPECT_THAT(failed.summary, HasSubstr("out: cannot save to '"));
  // Saving bfloat16 is impossible in .npy: reported too.
  spec.outputs[0].expected.reset();
  spec.outputs[0].save = dir() / "bf16.npy";
  const CheckResult bf16 = check_outputs(spec, {Tensor::empty({3}, DataType::BFloat16())});
  EXPECT_FALSE(bf16.ok);
  EXPECT_THAT(bf16.summary, HasSubstr("bfloat16"));
}

// ---------------------------------------------------------------------------------------------
// Summaries.

TEST(RunSummarizeTest, Format) {
  std::vector<float> values(1000);
  for (int i = 0; i < 1000; ++i) values[i] = static_cast<float>(i);
  EXPECT_EQ(summarize(float_tensor({1000}, values)),
            "float32[1000] min=0 max=999 mean=499.5 first=[0, 1, 2, 3, 4, 5, ...]");
  EXPECT_EQ(summarize(float_tensor({1000}, values), 3),
            "float32[1000] min=0 max=999 mean=499.5 first=[0, 1, 2, ...]");
  EXPECT_EQ(summarize(float_tensor({2, 2}, {0.1f, -2, NAN, 4})),
            "float32[2, 2] min=-2 max=4 mean=0.7 nan=1 first=[0.1, -2, nan, 4]");
  EXPECT_EQ(summarize(float_tensor({0}, {})), "float32[0] (empty)");
  EXPECT_EQ(summarize(float_tensor({}, {2.5f})), "float32[] min=2.5 max=2.5 mean=2.5 first=[2.5]");
  Tensor b = Tensor::empty({4}, DataType::Bool());
  const uint8_t bools[] = {0, 1, 1, 1};
  b.copy_from(bools, 4);
  EXPECT_EQ(summarize(b), "bool[4] min=false max=true mean=0.75 first=[false, true, true, true]");
  Tensor u = Tensor::empty({2}, DataType::UInt(64));
  const uint64_t big[] = {18446744073709551615ull, 1};
  u.copy_from(big, sizeof(big));
  EXPECT_EQ(
      summarize(u),
      "uint64[2] min=1 max=18446744073709551615 mean=9.22337e+18 first=[18446744073709551615, "
      "1]");
  Tensor h = Tensor::empty({3}, DataType::Float(16));
  const uint16_t halves[] = {detail::float16_bits(0.1), detail::float16_bits(-2.5), 0x7c00};
  h.copy_from(halves, sizeof(halves));
  EXPECT_EQ(summarize(h), "float16[3] min=-2.5 max=inf mean=inf first=[0.1, -2.5, inf]")
      << "16-bit floats print in their own shortest form";
  EXPECT_EQ(summarize(Tensor::empty({2}, DataType(kDLComplex, 64))), "complex64[2]");
  EXPECT_EQ(summarize(Tensor()), "undefined");
}

// ---------------------------------------------------------------------------------------------
// The examples in configs/runs/.

std::vector<fs::path> example_configs() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / "configs" / "runs")) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The toolkit whose output the module of the example `config` is ("cuda": nvcc's PTX, cubin
// and fatbin; "rocm": the HIP code objects), or "" for modules every build makes.
std::string toolkit_needed_by(const fs::path& config) {
  const std::string module = YAML::LoadFile(config.string())["module"].as<std::string>("");
  if (module.find("/cuda/") != std::string::npos) return "cuda";
  if (module.find("/rocm/") != std::string::npos && fs::path(module).extension() == ".hsaco") {
    return "rocm";
  }
  return "";
}

// Whether the build made the example kernels of `toolkit` (KILN_TOOLKIT_EXAMPLES comes from
// examples/kernels/{cuda,rocm}/CMakeLists.txt through tests/CMakeLists.txt).
bool toolkit_examples_built(const std::string& toolkit) {
  const std::string built = "," KILN_TOOLKIT_EXAMPLES ",";
  return built.find("," + toolkit + ",") != std::string::npos;
}

// Parses each example config that needs `toolkit` ("" for none) and builds its inputs.
void check_examples(const std::string& toolkit) {
  ScopedEnv env("KILN_EXAMPLES", KILN_EXAMPLE_KERNEL_DIR);
  size_t checked = 0;
  for (const fs::path& file : example_configs()) {
    if (toolkit_needed_by(file) != toolkit) continue;
    SCOPED_TRACE(file.string());
    ++checked;
    // A sweep's every point (a plain config is one point).
    const SweepSpec sweep = parse_sweep_config(file, Runtime::global().device_types());
    for (const SweepPoint& point : sweep.points) {
      ASSERT_TRUE(point.spec.has_value()) << point.label << ": " << point.error;
      const RunSpec& spec = *point.spec;
      EXPECT_TRUE(fs::exists(spec.module));
      const std::vector<Any> args = make_inputs(spec);
      EXPECT_EQ(args.size(), spec.inputs.size());
      for (const OutputSpec& out : spec.outputs) {
        EXPECT_FALSE(out.save) << "examples write nothing by default";
      }
      for (const ResultSpec& result : spec.result) {
        EXPECT_FALSE(result.save) << "examples write nothing by default";
      }
    }
  }
  EXPECT_GT(checked, 0u) << "no example config needs '" << toolkit << "'";
}

TEST(RunExamplesTest, EveryExampleParsesAndBuildsItsInputs) {
  std::set<std::string> names;
  for (const fs::path& file : example_configs()) names.insert(file.filename().string());
  EXPECT_TRUE(names.count("vector_add.yaml") && names.count("relu.yaml") &&
              names.count("matmul.yaml"));
  check_examples("");
}

TEST(RunExamplesTest, EveryCudaExampleParsesAndBuildsItsInputs) {
  if (!toolkit_examples_built("cuda")) {
    GTEST_SKIP() << "the CUDA example kernels were not built (nvcc was not found at configure "
                    "time; examples/kernels/cuda/CMakeLists.txt)";
  }
  check_examples("cuda");
}

TEST(RunExamplesTest, EveryRocmExampleParsesAndBuildsItsInputs) {
  if (!toolkit_examples_built("rocm")) {
    GTEST_SKIP() << "the HIP example code objects were not built (clang++-15 or the ROCm device "
                    "libraries were not found at configure time; "
                    "examples/kernels/rocm/CMakeLists.txt)";
  }
  check_examples("rocm");
}

TEST(RunExamplesTest, VectorAddRunsEndToEnd) {
  const auto exporters = Runtime::global().exporter_names();
  ASSERT_NE(std::find(exporters.begin(), exporters.end(), "tar"), exporters.end())
      << "no 'tar' exporter is loaded: the package plugin is built with the tests";
  ScopedEnv env("KILN_EXAMPLES", std::nullopt);
  RunSpec spec = parse_run_config(fs::path(KILN_SOURCE_DIR) / "configs/runs/vector_add.yaml");
  spec.evaluator = EvaluatorConfig{1, 1, 0, false};  // keep the test fast
  const std::vector<Any> args = make_inputs(spec);
  const Module module = load_module(spec.module);
  const EvaluatorSettings settings = evaluator_settings(spec);
  testing::RunHooks hooks;
  hooks.function = spec.function;
  hooks.evaluator = settings.options;
  const testing::RunResult result = testing::local_run(module, spec.device, args, settings.config,
                                                       spec.exporter, std::nullopt, hooks);
  ASSERT_EQ(result.outputs.size(), 4u);
  // out = a + alpha * b, computed here the way the kernel does, as the expected file.
  const auto a = args[0].cast<Tensor>().host_span<float>();
  const auto b = args[1].cast<Tensor>().host_span<float>();
  const auto alpha = static_cast<float>(args[3].cast<double>());
  std::vector<float> expected(a.size());
  for (size_t i = 0; i < a.size(); ++i) expected[i] = a[i] + alpha * b[i];
  TempDir dir;
  OutputSpec check;
  check.index = 2;
  check.name = "out";
  check.expected = dir.path() / "out.npy";
  write_npy(*check.expected, DataType::Float(32), std::vector<int64_t>{int64_t(a.size())},
            expected.data(), expected.size() * sizeof(float));
  spec.outputs = {check};
  const CheckResult r = check_outputs(spec, result.outputs);
  EXPECT_TRUE(r.ok) << r.summary;
  EXPECT_THAT(summarize(result.outputs[2].cast<Tensor>()), StartsWith("float32[1048576] min="));
}

}  // namespace
}  // namespace kiln::run
