// SPDX-License-Identifier: Apache-2.0
// TVM-compiled CPU libraries (llvm target) through load_module: each function runs on the
// arrays TVM ran it on and must give TVM's numbers; errors TVM's own argument checks raise
// reach the caller as Kiln errors with TVM's message and the function's name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include "kiln/kiln.h"

#include "tvm/elf_symbols.h"
#include "tvm/library_module.h"
#include "tvm/private_copy.h"
#include "tvm_fixtures.h"

namespace kiln::tvm_test {
namespace {

using ::testing::HasSubstr;

class TvmCpuLibrary : public TvmFixtureTest {
 protected:
  // Runs case `name` (the output is its last input) and compares with TVM's result.
  void run_case(const std::string& name, double rtol = 1e-5, double atol = 1e-5) {
    Module m = load_module(library(name));
    EXPECT_EQ(m.kind(), tvm_interop::kTvmLibraryKind);
    std::vector<Tensor> args = inputs(name);
    std::vector<Any> packed(args.begin(), args.end());
    m.get_function(tvm_case(name).at("function").get<std::string>()).call_packed(packed);
    expect_close(args.back(), expected(name), rtol, atol, name);
  }
};

TEST_F(TvmCpuLibrary, VectorAdd) { run_case("vadd"); }
TEST_F(TvmCpuLibrary, ParallelRowSumUsesParallelLaunch) { run_case("row_sum", 1e-4, 1e-3); }
TEST_F(TvmCpuLibrary, KernelWithWorkspace) { run_case("workspace"); }
TEST_F(TvmCpuLibrary, Softmax) { run_case("softmax", 1e-5, 1e-6); }
TEST_F(TvmCpuLibrary, Conv2d) { run_case("conv2d", 1e-4, 1e-4); }

TEST_F(TvmCpuLibrary, FunctionsAreTheExportedNames) {
  Module m = load_module(library("vadd"));
  EXPECT_THAT(m.function_names(), ::testing::Contains("vadd"));
  EXPECT_TRUE(m.has_function("vadd"));
}

TEST_F(TvmCpuLibrary, TvmsArgumentChecksBecomeKilnErrorsNamingTheFunction) {
  Module m = load_module(library("vadd"));
  Tensor a = Tensor::empty({8}, DataType::Float(32));
  Tensor b = Tensor::empty({8}, DataType::Float(32));
  Tensor wrong_dtype = Tensor::empty({8}, DataType::Int(32));
  try {
    m.get_function("vadd")(a, b, wrong_dtype);
    FAIL() << "a dtype mismatch ran";
  } catch (const TypeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("vadd.so: vadd: TypeError: Mismatched C.dtype on argument #2"));
  }
  try {
    m.get_function("vadd")(a, b);
    FAIL() << "a call with too few arguments ran";
  } catch (const TypeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("vadd.so: vadd: TypeError: Expected 3 arguments"));
  }
}

TEST_F(TvmCpuLibrary, AShapeMismatchIsAValueErrorWithTvmsMessage) {
  Module m = load_module(library("softmax"));
  Tensor x = Tensor::empty({64, 127}, DataType::Float(32));
  Tensor y = Tensor::empty({64, 127}, DataType::Float(32));
  try {
    m.get_function("softmax")(x, y);
    FAIL() << "a wrongly shaped call ran";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("softmax.so: softmax: ValueError: Invalid X.shape[1]"));
  }
}

TEST_F(TvmCpuLibrary, KilnsCopyImportsTvmFfiUnderPrivateNamesOnly) {
  // The copy Kiln loads imports Kiln's private names and nothing else changed: no tvm-ffi name
  // of the process is bound by it (docs/tvm-interop.md, "Beside TVM").
  const fs::path path = library("vadd");
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto before = tvm_interop::read_dynamic_symbols(file, path.string());
  std::vector<uint8_t> copy = file;
  tvm_interop::rename_ffi_imports(copy, before, path.string());
  const auto after = tvm_interop::read_dynamic_symbols(copy, path.string());
  ASSERT_EQ(before.size(), after.size());
  int renamed = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    if (before[i].name.rfind("TVMFFI", 0) == 0 && !before[i].defined) {
      EXPECT_EQ(after[i].name, "KilnTF" + before[i].name.substr(6));
      ++renamed;
    } else {
      EXPECT_EQ(after[i].name, before[i].name);
    }
  }
  EXPECT_GE(renamed, 1) << "vadd.so raises errors through TVMFFIErrorSetRaisedFromCStrParts";
}

}  // namespace
}  // namespace kiln::tvm_test
