// SPDX-License-Identifier: Apache-2.0
// Sweeps and return-value checks of run configurations (kiln/detail/run_config.h, issue 21 items
// 5 and 6): the cross product of a `sweep:` section, its points' configurations and labels,
// invalid points kept with their error, malformed sweep sections refused at their position,
// and `result:` checks on tensors, scalars and (nested) tuples.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/config_error.h"
#include "kiln/detail/run_config.h"
#include "kiln/error.h"
#include "kiln/kiln.h"
#include "kiln/npy.h"
#include "kiln/vm/virtual_machine.h"
#include "test_util.h"

namespace kiln::run {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class SweepConfigTest : public ::testing::Test {
 protected:
  SweepConfigTest() { write("mod.so", "a stand-in: the parser only checks that it exists"); }

  fs::path write(const std::string& name, const std::string& text) const {
    fs::path path = dir_.path() / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  SweepSpec sweep(const std::string& text) const {
    return parse_sweep_config(write("run.yaml", text), Runtime::global().device_types());
  }

  // The ConfigError a malformed sweep section throws (a test failure when none is thrown).
  ConfigError sweep_error(const std::string& text) const {
    try {
      sweep(text);
    } catch (const ConfigError& e) {
      return e;
    }
    ADD_FAILURE() << "no ConfigError for:\n" << text;
    return ConfigError("", 0, 0, "", "");
  }

  TempDir dir_;
};

constexpr const char* kBase = R"(module: mod.so
function: relu
evaluator: {number: 3, repeat: 2}
inputs:
  - {name: in, shape: [8], init: random}
  - {name: out, shape: [8]}
  - {name: n, scalar: 8}
)";

TEST_F(SweepConfigTest, PlainConfigIsOnePointWithoutAxes) {
  const SweepSpec s = sweep(kBase);
  EXPECT_FALSE(s.is_sweep());
  ASSERT_EQ(s.points.size(), 1u);
  ASSERT_TRUE(s.points[0].spec.has_value());
  EXPECT_EQ(s.points[0].spec->function, "relu");
  EXPECT_EQ(s.points[0].label, "");
}

TEST_F(SweepConfigTest, CrossProductInFileOrderFirstAxisSlowest) {
  const SweepSpec s = sweep(std::string(kBase) + R"(sweep:
  shape: [[4], [2, 3]]
  dtype: [float32, float16]
  number: [1, 5, 9]
)");
  ASSERT_TRUE(s.is_sweep());
  ASSERT_EQ(s.axes.size(), 3u);
  EXPECT_EQ(s.axes[0].name, "shape");
  EXPECT_THAT(s.axes[0].values, ElementsAre("[4]", "[2, 3]"));
  ASSERT_EQ(s.points.size(), 12u);
  EXPECT_EQ(s.points[0].label, "shape=[4], dtype=float32, number=1");
  EXPECT_EQ(s.points[1].label, "shape=[4], dtype=float32, number=5");
  EXPECT_EQ(s.points[3].label, "shape=[4], dtype=float16, number=1");
  EXPECT_EQ(s.points[11].label, "shape=[2, 3], dtype=float16, number=9");
  for (size_t i = 0; i < s.points.size(); ++i) {
    const SweepPoint& p = s.points[i];
    EXPECT_EQ(p.index, i);
    ASSERT_TRUE(p.spec.has_value()) << p.error;
    // `shape` and `dtype` set every generated input; the scalar is left alone.
    const std::vector<int64_t> shape = i < 6 ? std::vector<int64_t>{4} : std::vector<int64_t>{2, 3};
    const DataType dtype = (i / 3) % 2 == 0 ? DataType::Float(32) : DataType::Float(16);
    EXPECT_EQ(p.spec->inputs[0].shape, shape);
    EXPECT_EQ(p.spec->inputs[1].shape, shape);
    EXPECT_EQ(p.spec->inputs[0].dtype, dtype);
    EXPECT_EQ(p.spec->inputs[1].dtype, dtype);
    EXPECT_EQ(p.spec->inputs[2].kind, InputSpec::Kind::kScalar);
    EXPECT_EQ(p.spec->evaluator.number, std::vector<int32_t>({1, 5, 9})[i % 3]);
    EXPECT_EQ(p.spec->extra.number, p.spec->evaluator.number);
    EXPECT_EQ(p.spec->evaluator.repeat, 2);  // not swept: the config's
  }
}

TEST_F(SweepConfigTest, GroupAxisSetsSeveralParametersTogether) {
  const SweepSpec s = sweep(std::string(kBase) + R"(sweep:
  device: [cpu, cpu:0]
  size:
    - {name: small, shape: [16], inputs.n.scalar: 16, throughput.flops: 16}
    - {shape: [1024], inputs.n.scalar: 1024}
)");
  ASSERT_EQ(s.points.size(), 4u);
  EXPECT_THAT(s.axes[1].values, ElementsAre("small", "{shape: [1024], inputs.n.scalar: 1024}"));
  EXPECT_EQ(s.points[0].label, "device=cpu, size=small");
  const RunSpec& small = *s.points[0].spec;
  EXPECT_EQ(small.device, "cpu");
  EXPECT_EQ(small.inputs[0].shape, std::vector<int64_t>{16});
  EXPECT_EQ(small.inputs[2].scalar.cast<int64_t>(), 16);
  EXPECT_EQ(small.throughput.flops, 16.0);
  const RunSpec& large = *s.points[3].spec;
  EXPECT_EQ(large.device, "cpu:0");
  EXPECT_EQ(large.inputs[1].shape, std::vector<int64_t>{1024});
  EXPECT_EQ(large.inputs[2].scalar.cast<int64_t>(), 1024);
  EXPECT_FALSE(large.throughput.flops.has_value());  // this entry does not set it
}

TEST_F(SweepConfigTest, EvaluatorNoiseAndPerInputParameters) {
  const SweepSpec s = sweep(R"(module: mod.so
inputs:
  - {name: a, shape: [8], init: random}
  - {name: b, shape: [8]}
sweep:
  inputs.a.seed: [1, 2]
  evaluator.noise.target_rse: [0.01, 0.05]
  evaluator.min_repeat_ms: [0]
)");
  ASSERT_EQ(s.points.size(), 4u);
  const RunSpec& last = *s.points[3].spec;
  EXPECT_EQ(last.inputs[0].seed, 2u);
  EXPECT_EQ(last.inputs[1].seed, 1u);  // b keeps its default seed (its position)
  EXPECT_DOUBLE_EQ(last.extra.noise.target_rse, 0.05);
  EXPECT_EQ(last.evaluator.min_repeat_ms, 0);
}

TEST_F(SweepConfigTest, InvalidPointKeepsItsErrorAtTheSweepValueAndOthersStay) {
  const std::string text = std::string(kBase) + R"(sweep:
  dtype: [float32, flaot16]
  number: [1, 0]
)";
  const SweepSpec s = sweep(text);
  ASSERT_EQ(s.points.size(), 4u);
  EXPECT_TRUE(s.points[0].spec.has_value()) << s.points[0].error;
  // number: 0 breaks the evaluator's rule; the error is at the sweep's value (line 10).
  EXPECT_FALSE(s.points[1].spec.has_value());
  EXPECT_THAT(s.points[1].error, HasSubstr("run.yaml:10:15: evaluator.number: must be >= 1"));
  EXPECT_FALSE(s.points[2].spec.has_value());
  EXPECT_THAT(s.points[2].error,
              HasSubstr("run.yaml:9:20: inputs[0].dtype: unknown dtype 'flaot16'"));
  EXPECT_EQ(s.points[2].label, "dtype=flaot16, number=1");
  EXPECT_FALSE(s.points[3].spec.has_value());
}

TEST_F(SweepConfigTest, MalformedSweepSectionsAreRefusedWhereTheyAre) {
  EXPECT_THAT(sweep_error(std::string(kBase) + "sweep:\n  devcie: [cpu]\n").what(),
              HasSubstr("run.yaml:9:3: sweep.devcie: 'devcie' is not a parameter (did you mean "
                        "'device'?)"));
  EXPECT_THAT(sweep_error(std::string(kBase) + "sweep:\n  shape: [1024, 4096]\n").what(),
              HasSubstr("sweep.shape: expected a list of shapes such as [[1024], [4096]], got a "
                        "list of numbers [1024, 4096]"));
  EXPECT_THAT(sweep_error(std::string(kBase) + "sweep:\n  device: []\n").what(),
              HasSubstr("sweep.device: expected a non-empty list of values"));
  EXPECT_THAT(sweep_error(std::string(kBase) + "sweep:\n  device: cpu\n").what(),
              HasSubstr("sweep.device: expected a non-empty list of values, got"));
  EXPECT_THAT(sweep_error(std::string(kBase) + "sweep:\n  number: [1, 2, 1]\n").what(),
              HasSubstr("run.yaml:9:18: sweep.number[2]: the value 1 is listed twice (also at "
                        "index 0)"));
  EXPECT_THAT(
      sweep_error(std::string(kBase) + "sweep:\n  shape: [[4]]\n  inputs.out.shape: [[8]]\n")
          .what(),
      HasSubstr("'inputs.out.shape' sets inputs[1].shape, which the axis 'shape' sets "
                "too"));
  EXPECT_THAT(sweep_error(std::string(kBase) + "sweep:\n  inputs.ni.scalar: [1]\n").what(),
              HasSubstr("'inputs.ni.scalar': no input is named 'ni' (did you mean 'n'?); inputs: "
                        "in, out, n"));
  EXPECT_THAT(sweep_error(std::string(kBase) + "sweep:\n  size:\n    - {shap: [4]}\n").what(),
              HasSubstr("sweep.size[0].shap: unknown parameter 'shap' (did you mean 'shape'?)"));
  EXPECT_THAT(sweep_error(std::string(kBase) + "sweep: [device]\n").what(),
              HasSubstr("sweep: expected a mapping of swept parameters"));
  EXPECT_THAT(
      sweep_error(std::string(kBase) + "profile: {collectors: [perf]}\nsweep:\n  number: [1]\n")
          .what(),
      HasSubstr("profile: a sweep cannot have a 'profile:' section"));
  EXPECT_THAT(
      sweep_error("module: mod.so\ninputs:\n  - {scalar: 1}\nsweep:\n  shape: [[4]]\n").what(),
      HasSubstr("'shape' sets the shape of every generated tensor input"));
}

TEST_F(SweepConfigTest, EachPointSavesToFilesOfItsOwn) {
  const SweepSpec s = sweep(std::string(kBase) + R"(outputs:
  - {name: out, save: saved/out.npy}
result: {save: r.npy}
sweep:
  number: [1, 2]
)");
  ASSERT_EQ(s.points.size(), 2u);
  EXPECT_EQ(s.points[0].spec->outputs[0].save, dir_.path() / "saved" / "out.point1.npy");
  EXPECT_EQ(s.points[1].spec->outputs[0].save, dir_.path() / "saved" / "out.point2.npy");
  EXPECT_EQ(s.points[1].spec->result[0].save, dir_.path() / "r.point2.npy");
}

TEST_F(SweepConfigTest, ParseRunConfigRefusesASweep) {
  const fs::path path = write("run.yaml", std::string(kBase) + "sweep:\n  number: [1, 2]\n");
  try {
    parse_run_config(path, Runtime::global().device_types());
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("run.yaml:9:3: sweep: this configuration is a sweep"));
  }
}

// `result:` checks: parsing.
TEST_F(SweepConfigTest, ResultSectionParses) {
  write_npy(dir_.path() / "t.0.npy", DataType::Int(64), std::vector<int64_t>{},
            std::vector<int64_t>{3}.data(), 8);
  const fs::path path = write("run.yaml", std::string(kBase) + R"(result:
  - {save: out/r.npy}
  - {element: 1, value: 2.5, rtol: 0, atol: 0.5}
  - {element: [0, 2], expected: t.npy}
)");
  const RunSpec spec = parse_run_config(path, Runtime::global().device_types());
  ASSERT_EQ(spec.result.size(), 3u);
  EXPECT_EQ(spec.result[0].name, "result");
  EXPECT_EQ(spec.result[0].save, dir_.path() / "out/r.npy");
  EXPECT_EQ(spec.result[1].name, "result[1]");
  EXPECT_DOUBLE_EQ(spec.result[1].value->cast<double>(), 2.5);
  EXPECT_DOUBLE_EQ(spec.result[1].atol, 0.5);
  EXPECT_EQ(spec.result[2].name, "result[0][2]");
  EXPECT_THAT(spec.result[2].element, ElementsAre(0, 2));

  const auto error = [&](const std::string& section) {
    try {
      parse_run_config(write("bad.yaml", std::string(kBase) + section),
                       Runtime::global().device_types());
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error("result: {element: -1}\n"), HasSubstr("tuple indices must be >= 0, got -1"));
  EXPECT_THAT(error("result: {element: [0, -2]}\n"),
              HasSubstr("tuple indices must be >= 0, got -2"));
  EXPECT_THAT(error("result: {element: [0, 3000000000]}\n"),
              HasSubstr("tuple index 3000000000 is too large (at most 2147483647)"));
  EXPECT_THAT(error("result: {expected: nope.npy}\n"),
              HasSubstr("result.expected: expected .npy file (or, for a tuple, 'nope.0.npy') not "
                        "found"));
  EXPECT_THAT(error("result: {value: 1, expected: t.npy}\n"), HasSubstr("not both"));
  EXPECT_THAT(error("result: {value: \"3\"}\n"), HasSubstr("expected a number or a boolean"));
  EXPECT_THAT(error("result: [{element: 1}, {element: [1]}]\n"),
              HasSubstr("result[1] is already checked by result[0]"));
  EXPECT_THAT(error("result: {sav: x.npy}\n"), HasSubstr("did you mean 'save'"));
}

// `result:` checks: the values.
class ResultCheckTest : public SweepConfigTest {
 protected:
  static Tensor floats(std::vector<float> values) {
    Tensor t = Tensor::empty_host({static_cast<int64_t>(values.size())}, DataType::Float(32));
    std::copy(values.begin(), values.end(), static_cast<float*>(t.data()));
    return t;
  }
};

TEST_F(ResultCheckTest, TupleElementsAreSavedAndComparedOneFileEach) {
  RunSpec spec;
  ResultSpec save;
  save.name = "result";
  save.save = dir_.path() / "out" / "r.npy";
  spec.result.push_back(save);
  const Any value =
      vm::make_array({Any(int64_t{3}), vm::make_array({Any(floats({1, 2})), Any(0.5)})});
  CheckResult saved = check_result(spec, value);
  EXPECT_TRUE(saved.ok) << saved.summary;
  EXPECT_THAT(saved.summary, HasSubstr("result[0]: saved int64[] to"));
  EXPECT_THAT(saved.summary, HasSubstr("result[1][0]: saved float32[2] to"));
  const NpyArray scalar = read_npy(dir_.path() / "out" / "r.0.npy");
  EXPECT_EQ(scalar.dtype, DataType::Int(64));
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(read_npy(dir_.path() / "out" / "r.1.0.npy").shape, std::vector<int64_t>{2});
  EXPECT_EQ(read_npy(dir_.path() / "out" / "r.1.1.npy").dtype, DataType::Float(64));

  // The saved files are the reference of the next run: equal passes, a change fails.
  RunSpec check;
  ResultSpec expected;
  expected.name = "result";
  expected.expected = dir_.path() / "out" / "r.npy";
  check.result.push_back(expected);
  EXPECT_TRUE(check_result(check, value).ok);
  const Any changed =
      vm::make_array({Any(int64_t{3}), vm::make_array({Any(floats({1, 2.5f})), Any(0.5)})});
  const CheckResult failed = check_result(check, changed);
  EXPECT_FALSE(failed.ok);
  EXPECT_THAT(failed.summary, HasSubstr("result[1][0]: 1 of 2 elements differ"));
  EXPECT_THAT(failed.summary, HasSubstr("result[0]: ok"));
}

TEST_F(ResultCheckTest, ScalarValuesAndElementPaths) {
  RunSpec spec;
  ResultSpec within;
  within.element = {1};
  within.name = "result[1]";
  within.value = Any(1.0);
  within.rtol = 0;
  within.atol = 0.01;
  spec.result.push_back(within);
  ResultSpec exact;
  exact.element = {0};
  exact.name = "result[0]";
  exact.value = Any(int64_t{4});
  spec.result.push_back(exact);
  const Any value = vm::make_array({Any(int64_t{3}), Any(1.005)});
  const CheckResult r = check_result(spec, value);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.summary,
              HasSubstr("result[1]: ok (got 1.005, expected 1 within rtol=0 atol=0.01)"));
  EXPECT_THAT(r.summary, HasSubstr("result[0]: differs (got 3, expected 4 at rtol=1e-05"));

  RunSpec deeper;
  ResultSpec beyond;
  beyond.element = {5};
  beyond.name = "result[5]";
  deeper.result.push_back(beyond);
  ResultSpec into_scalar;
  into_scalar.element = {0, 1};
  into_scalar.name = "result[0][1]";
  deeper.result.push_back(into_scalar);
  const CheckResult d = check_result(deeper, value);
  EXPECT_FALSE(d.ok);
  EXPECT_THAT(d.summary, HasSubstr("result[5]: result has 2 elements, no element 5"));
  EXPECT_THAT(d.summary, HasSubstr("result[0][1]: result[0] is a int, not a tuple"));

  // A kernel returns nothing: a check on its result says so.
  RunSpec on_none;
  ResultSpec whole;
  whole.element = {0};
  whole.name = "result[0]";
  on_none.result.push_back(whole);
  EXPECT_THAT(check_result(on_none, Any()).summary,
              HasSubstr("result is none (the function returned nothing), not a tuple"));
  // A value check on a tensor is a failing line, not a crash.
  RunSpec on_tensor;
  ResultSpec scalar_check;
  scalar_check.name = "result";
  scalar_check.value = Any(int64_t{1});
  on_tensor.result.push_back(scalar_check);
  const CheckResult t = check_result(on_tensor, Any(floats({1})));
  EXPECT_FALSE(t.ok);
  EXPECT_THAT(t.summary, HasSubstr("result: expected a scalar for 'value'"));
}

TEST_F(ResultCheckTest, LeavesNameEveryElement) {
  EXPECT_TRUE(result_leaves(Any()).empty());
  const auto leaves =
      result_leaves(vm::make_array({Any(int64_t{1}), vm::make_array({Any(true), Any(2.0)})}));
  ASSERT_EQ(leaves.size(), 3u);
  EXPECT_EQ(leaves[0].first, "result[0]");
  EXPECT_EQ(leaves[1].first, "result[1][0]");
  EXPECT_EQ(leaves[2].first, "result[1][1]");
  EXPECT_EQ(result_leaves(Any(int64_t{7}))[0].first, "result");
}

}  // namespace
}  // namespace kiln::run
