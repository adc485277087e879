// SPDX-License-Identifier: Apache-2.0
// The TVM-compiled fixtures (tests/tvm/make_fixtures.py, run by the ctest fixture tvm_fixtures
// into $KILN_TVM_FIXTURES): their directory, manifest and arrays.
#ifndef KILN_TESTS_TVM_TVM_FIXTURES_H_
#define KILN_TESTS_TVM_TVM_FIXTURES_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::tvm_test {

namespace fs = std::filesystem;

// The fixture directory, or empty with the reason in `why`.
inline fs::path fixture_dir(std::string* why) {
  const char* dir = std::getenv("KILN_TVM_FIXTURES");
  if (dir == nullptr || *dir == '\0') {
    *why = "KILN_TVM_FIXTURES is not set (run through ctest, which builds the fixtures)";
    return {};
  }
  if (!fs::exists(fs::path(dir) / "manifest.json")) {
    *why = std::string("no TVM fixtures in ") + dir +
           " (the tvm_fixtures test needs a Python with apache-tvm 0.27: tools/dev.sh test "
           "installs one into build/.venv-tvm, or configure with -DKILN_TVM_PYTHON=...)";
    return {};
  }
  return dir;
}

// The manifest: {"tvm_version", "cases": {name: {"library", "function", "inputs", "outputs",
// "device"?, "rtol"?}}}.
inline nlohmann::json manifest(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  return nlohmann::json::parse(in);
}

// Expects `actual` (host float32) equal to `expected` element by element within rtol/atol.
inline void expect_close(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                         const std::string& what) {
  ASSERT_EQ(actual.numel(), expected.numel()) << what;
  const Tensor a = actual.to_host();
  auto x = a.host_span<const float>();
  auto y = expected.host_span<const float>();
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(std::abs(double(x[i]) - double(y[i])) <= atol + rtol * std::abs(double(y[i])))) {
      if (++bad <= 3) ADD_FAILURE() << what << "[" << i << "] = " << x[i] << ", expected " << y[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << x.size() << " elements differ";
}

// A fixture test: skips with the reason where the fixtures are missing.
class TvmFixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    dir_ = fixture_dir(&why);
    if (dir_.empty()) GTEST_SKIP() << why;
    manifest_ = manifest(dir_);
  }
  const nlohmann::json& tvm_case(const std::string& name) const {
    return manifest_.at("cases").at(name);
  }
  // The inputs of `name` as tensors on `device`.
  std::vector<Tensor> inputs(const std::string& name, Device device = Device::cpu()) const {
    std::vector<Tensor> out;
    for (const auto& f : tvm_case(name).at("inputs")) {
      Tensor host = Tensor::load_npy(dir_ / f.get<std::string>());
      out.push_back(device == Device::cpu() ? host : host.to(device));
    }
    return out;
  }
  Tensor expected(const std::string& name, size_t index = 0) const {
    return Tensor::load_npy(dir_ / tvm_case(name).at("outputs").at(index).get<std::string>());
  }
  fs::path library(const std::string& name) const {
    return dir_ / tvm_case(name).at("library").get<std::string>();
  }

  fs::path dir_;
  nlohmann::json manifest_;
};

}  // namespace kiln::tvm_test

#endif  // KILN_TESTS_TVM_TVM_FIXTURES_H_
