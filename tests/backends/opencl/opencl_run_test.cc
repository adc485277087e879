// SPDX-License-Identifier: Apache-2.0
// OpenCL kernels as module functions (kiln::load_module of a .cl file with its sidecar): calls,
// the tar export round trip, and local_run of the opencl_*.yaml run configs, whose outputs
// must equal those of the CPU example kernels run from the matching *.yaml.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/detail/run_config.h"
#include "kiln/kiln.h"
#include "kiln/testing.h"
#include "opencl_test_util.h"
#include "test_util.h"

namespace kiln::opencl_test {
namespace {

using ::testing::HasSubstr;

class OpenclKernelModule : public OpenclTest {};

TEST_F(OpenclKernelModule, LoadModuleMakesEachKernelAFunction) {
  Module m = load_module(examples_dir() / "vector_add.cl");
  EXPECT_EQ(m.kind(), kDeviceCodeKind);
  EXPECT_EQ(m.function_names(), std::vector<std::string>{"vector_add"});
  constexpr int64_t n = 1000;
  std::vector<float> ha(n), hb(n);
  for (int64_t i = 0; i < n; ++i) {
    ha[i] = static_cast<float>(i);
    hb[i] = 2.0f;
  }
  Tensor a = upload(ha), b = upload(hb), out = upload(std::vector<float>(n, 0.0f));
  // The kernel's arguments, then its launch extents (blockIdx.x, threadIdx.x).
  m["vector_add"](a, b, out, 0.25, n, (n + 127) / 128, int64_t{128});
  const std::vector<float> got = download(out);  // a copy to the host waits for the kernel
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], ha[i] + 0.5f) << "at " << i;

  // Tensors on the host are refused before anything reaches the device.
  Tensor host = Tensor::empty({n}, DataType::Float(32));
  EXPECT_THROW(m["vector_add"](host, host, host, 0.25, n, int64_t{8}, int64_t{128}), Error);
  // So are missing launch extents.
  EXPECT_THROW(m["vector_add"](a, b, out, 0.25, n), TypeError);
}

TEST_F(OpenclKernelModule, TarExportCarriesTheSourceAndItsMetadata) {
  Module m = load_module(examples_dir() / "relu.cl");
  TempDir dir;
  const fs::path tar = dir.path() / "relu.tar";
  m.export_library(tar, "tar");
  Module back = load_module(tar);
  std::vector<std::string> names;
  for (const Artifact& a : back.artifacts()) names.push_back(a.name);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("relu.cl", "relu.cl.json"));
  Tensor in = upload({-1.5f, 0.0f, 2.0f, -0.0f, NAN}), out = upload({9, 9, 9, 9, 9});
  back["relu"](in, out, int64_t{5}, int64_t{1}, int64_t{5});
  const std::vector<float> got = download(out);
  EXPECT_EQ(got[0], 0.0f);
  EXPECT_EQ(got[2], 2.0f);
  EXPECT_TRUE(std::isnan(got[4])) << "NaN passes through, as in the CPU kernel";
}

// Runs `config` (under configs/runs) through local_run with the tar exporter, with a short
// evaluator, and returns the outputs by input name.
std::map<std::string, Any> run(const std::string& config) {
  run::RunSpec spec =
      run::parse_run_config(fs::path(KILN_SOURCE_DIR) / "configs" / "runs" / config);
  spec.evaluator = EvaluatorConfig{1, 1, 0, false};
  testing::RunHooks hooks;
  hooks.function = spec.function;
  testing::RunResult r =
      testing::local_run(load_module(spec.module), spec.device, run::make_inputs(spec),
                         spec.evaluator, "tar", std::nullopt, hooks);
  std::map<std::string, Any> out;
  for (size_t i = 0; i < spec.inputs.size(); ++i) out.emplace(spec.inputs[i].name, r.outputs[i]);
  if (spec.device.rfind("opencl", 0) == 0) {
    EXPECT_EQ(r.profile.timer, "device") << "OpenCL kernels are timed with the backend's markers";
  }
  return out;
}

struct Case {
  std::string name;    // example name: <name>.yaml and opencl_<name>.yaml
  std::string output;  // the input holding the result
  double tolerance;    // max |opencl - cpu|; 0 for exact equality
};

// How gtest names a case in messages (instead of dumping the struct's bytes).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class OpenclMatchesCpu : public OpenclTest, public ::testing::WithParamInterface<Case> {};

TEST_P(OpenclMatchesCpu, RunConfigOutputsEqualTheCpuExamples) {
  const Case& c = GetParam();
  const auto cpu = run(c.name + ".yaml");
  const auto cl = run("opencl_" + c.name + ".yaml");
  for (const auto& [name, value] : cpu) {
    ASSERT_TRUE(cl.count(name)) << "opencl_" << c.name << ".yaml lacks input " << name;
  }
  const Tensor want = cpu.at(c.output).cast<Tensor>();
  const Tensor got = cl.at(c.output).cast<Tensor>();
  EXPECT_EQ(got.device(), Device::cpu()) << "local_run returns host tensors";
  ASSERT_EQ(std::vector<int64_t>(got.shape().begin(), got.shape().end()),
            std::vector<int64_t>(want.shape().begin(), want.shape().end()));
  const auto w = want.host_span<float>();
  const auto g = got.host_span<float>();
  size_t mismatches = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const bool same = c.tolerance == 0 ? (g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i])))
                                       : std::fabs(g[i] - w[i]) <= c.tolerance;
    if (!same && ++mismatches <= 5) {
      ADD_FAILURE() << c.output << "[" << i << "]: opencl " << g[i] << ", cpu " << w[i];
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << w.size() << " elements";
}

INSTANTIATE_TEST_SUITE_P(Examples, OpenclMatchesCpu,
                         // Exact: the OpenCL kernels round every product and sum separately
                         // (FP_CONTRACT OFF) and sum matmul's k terms in the CPU kernel's order.
                         ::testing::Values(Case{"vector_add", "out", 0.0}, Case{"relu", "out", 0.0},
                                           Case{"matmul", "c", 0.0}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace kiln::opencl_test
