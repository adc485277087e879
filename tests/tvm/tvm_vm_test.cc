// SPDX-License-Identifier: Apache-2.0
// Relax programs compiled by TVM (relax.build / tvm.compile then export_library) run in Kiln's
// VM: the MLP with a dynamic batch gives TVM's numbers for several batch sizes, the stateful API
// works on it, the disassembly is TVM's own, and the executable alone (write_to_file) loads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "kiln/kiln.h"
#include "kiln/vm/virtual_machine.h"
#include "tvm/relax_executable.h"
#include "tvm_fixtures.h"

namespace kiln::tvm_test {
namespace {

using ::testing::HasSubstr;

class TvmRelax : public TvmFixtureTest {};

TEST_F(TvmRelax, MlpFromTheLibraryGivesTvmsNumbers) {
  Module m = load_module(library("mlp"));
  EXPECT_EQ(m.kind(), vm::kExecutableModuleKind);
  std::vector<Tensor> in = inputs("mlp");
  Any out = m.get_function("main")(in[0], in[1], in[2], in[3]);
  expect_close(out.cast<Tensor>(), expected("mlp"), 1e-4, 1e-4, "mlp");
}

TEST_F(TvmRelax, TheBatchDimensionIsDynamic) {
  Module m = load_module(library("mlp"));
  std::vector<Tensor> in = inputs("mlp");
  // Batch 2: the first two rows of the input give the first two rows of TVM's output.
  Tensor x2 = Tensor::empty_host({2, 16}, DataType::Float(32));
  std::copy_n(in[0].host_span<const float>().begin(), 32, x2.host_span<float>().begin());
  Tensor y2 = m.get_function("main")(x2, in[1], in[2], in[3]).cast<Tensor>();
  ASSERT_EQ(y2.shape()[0], 2);
  Tensor want = expected("mlp");
  Tensor want2 = Tensor::empty_host({2, 8}, DataType::Float(32));
  std::copy_n(want.host_span<const float>().begin(), 16, want2.host_span<float>().begin());
  expect_close(y2, want2, 1e-4, 1e-4, "mlp batch 2");
}

TEST_F(TvmRelax, TvmsShapeChecksNameTheParameter) {
  Module m = load_module(library("mlp"));
  std::vector<Tensor> in = inputs("mlp");
  Tensor bad = Tensor::empty_host({5, 15}, DataType::Float(32));
  try {
    m.get_function("main")(bad, in[1], in[2], in[3]);
    FAIL() << "ran";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("main"));
  }
}

TEST_F(TvmRelax, StatefulApiOnTheImportedProgram) {
  Module m = load_module(library("mlp"));
  vm::VirtualMachine machine(m, {Device::cpu()});
  std::vector<Tensor> in = inputs("mlp");
  machine.set_input("main", {in[0], in[1], in[2], in[3]});
  machine.invoke_stateful("main");
  expect_close(machine.get_outputs("main").cast<Tensor>(), expected("mlp"), 1e-4, 1e-4, "stateful");
}

// Kiln's text form adds a header, the constants and the signature around the instructions;
// the instruction listing itself is TVM's, line for line.
TEST_F(TvmRelax, TheDisassemblyListsTvmsInstructionsLineForLine) {
  Module m = load_module(library("mlp"));
  const std::string text = m.get_function("as_text")().cast<std::string>();
  std::ifstream in(dir_ / "mlp.as_text.txt");
  std::vector<std::string> tvm_lines;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  ", 0) == 0) tvm_lines.push_back(line);  // instructions are indented
  }
  ASSERT_GT(tvm_lines.size(), 30u);
  size_t at = 0;
  for (const std::string& line : tvm_lines) {
    const size_t found = text.find(line + "\n", at);
    ASSERT_NE(found, std::string::npos) << "missing or out of order: " << line;
    at = found + line.size();
  }
}

TEST_F(TvmRelax, TheExecutableFileAloneLoadsAndNamesMissingKernels) {
  Module m = load_module(dir_ / "mlp.vmexec");
  EXPECT_EQ(m.kind(), vm::kExecutableModuleKind);
  std::vector<Tensor> in = inputs("mlp");
  try {
    m.get_function("main")(in[0], in[1], in[2], in[3]);
    FAIL() << "ran without its kernels";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("shape_func"));
  }
}

TEST_F(TvmRelax, TruncatedOrCorruptExecutablesAreErrors) {
  std::ifstream in(dir_ / "mlp.vmexec", std::ios::binary);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in),
                                   std::istreambuf_iterator<char>()};
  ASSERT_TRUE(tvm_interop::is_relax_executable(bytes));
  tvm_interop::read_relax_executable(bytes, "mlp.vmexec");
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(tvm_interop::read_relax_executable(std::span(bytes.data(), n), "cut"), ValueError)
        << n;
  }
  // An unknown constant tag: the first constant is the dtype float32 (tag 5, code 2, 32 bits).
  const uint8_t dtype_constant[] = {5, 0, 0, 0, 2, 32, 1, 0};
  std::vector<uint8_t> tag = bytes;
  auto at =
      std::search(tag.begin(), tag.end(), std::begin(dtype_constant), std::end(dtype_constant));
  ASSERT_NE(at, tag.end());
  *at = 99;
  EXPECT_THAT([&] { tvm_interop::read_relax_executable(tag, "x"); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("constant 0 has unknown tag 99")));
  // An unknown opcode: the code section ends the file, its first word is the first opcode.
  const vm::Executable good = tvm_interop::read_relax_executable(bytes, "mlp.vmexec");
  std::vector<uint8_t> opcode = bytes;
  opcode[opcode.size() - 8 * good.instr_data.size()] = 9;
  EXPECT_THAT([&] { tvm_interop::read_relax_executable(opcode, "x"); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("opcode")));
  std::vector<uint8_t> version = bytes;
  version[16] = '9';  // "0.14" -> "9.14"
  EXPECT_THAT([&] { tvm_interop::read_relax_executable(version, "x"); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("version '9.14'")));
}

}  // namespace
}  // namespace kiln::tvm_test

namespace kiln::tvm_test {
namespace {

TEST_F(TvmRelax, ATupleResultWithSoftmaxReductionAndReshape) {
  Module m = load_module(library("tuples"));
  std::vector<Tensor> in = inputs("tuples");
  const Any out = m.get_function("main")(in[0]);
  auto outer = out.as_object<vm::ArrayObj>();
  ASSERT_TRUE(outer);
  ASSERT_EQ(outer->items.size(), 2u);
  expect_close(outer->items[0].cast<Tensor>(), expected("tuples", 0), 1e-5, 1e-6, "softmax");
  auto inner = outer->items[1].as_object<vm::ArrayObj>();
  ASSERT_TRUE(inner);
  ASSERT_EQ(inner->items.size(), 2u);
  expect_close(inner->items[0].cast<Tensor>(), expected("tuples", 1), 1e-5, 1e-5, "sum");
  expect_close(inner->items[1].cast<Tensor>(), expected("tuples", 2), 1e-5, 1e-6, "reshape");
}

TEST_F(TvmRelax, AnUnknownBuiltinNamesItselfAndTheFunction) {
  // The imported program with its call to vm.builtin.null_value renamed, byte for byte.
  std::ifstream in(dir_ / "mlp.vmexec", std::ios::binary);
  std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string from = "vm.builtin.null_value";
  const std::string to = "vm.builtin.nul1_value";
  auto it = std::search(bytes.begin(), bytes.end(), from.begin(), from.end());
  ASSERT_NE(it, bytes.end());
  std::copy(to.begin(), to.end(), it);
  vm::Executable exec = tvm_interop::read_relax_executable(bytes, "renamed.vmexec");
  Module kernels = load_module(library("mlp"));
  try {
    vm::VirtualMachine machine(std::move(exec), {kernels}, {Device::cpu()});
    std::vector<Tensor> x = inputs("mlp");
    machine.get_function("main")(x[0], x[1], x[2], x[3]);
    FAIL() << "ran";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("vm.builtin.nul1_value"));
    EXPECT_THAT(e.what(), HasSubstr("(called by @main)"));
  }
}

}  // namespace
}  // namespace kiln::tvm_test
