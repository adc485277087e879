// SPDX-License-Identifier: Apache-2.0
// The VM executable (docs/vm.md): argument encoding, validate(), the binary form (round trip,
// every rejection, every truncation, huge counts, garbage) and the text form (canonical round
// trip, spellings, errors with line and column), stats().
#include "kiln/vm/executable.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/vm/exec_builder.h"

namespace kiln::vm {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Every instruction, operand and constant kind, in canonical text form.
constexpr const char* kCanonical = R"(kiln_vm 1

import "libtest_add.so"
import "dir/lib two.so"

const c[0] = tensor float32 [2, 2] hex"0000803f000000400000404000008040"
const c[1] = shape [2, -1, 3]
const c[2] = string "hello \"vm\"\n\x01\\"
const c[3] = int 36028797018963968
const c[4] = float 0.5
const c[5] = dtype int8x4
const c[6] = device cpu:0
const c[7] = tensor int64 [] hex"feffffffffffffff"

packed_func @test.vm.add

packed_func @"weird name"

func @main(x, y) regs=4 {
  call  test.vm.add      in: %0, %1       dst: %2
  if    %2, 3
  call  "weird name"     in: c[0], i-3, f[helper], %vm dst: %3
  ret   %3
  ret   %void
}

func @helper(%0) regs=2 {
  goto  2
  call  test.vm.add      in: %0, %0       dst: %void
  call  test.vm.add      in: c[3], c[6]   dst: %1
  if    %1, 2
  goto  -3
  ret   %1
}

func @"entry point"() regs=0 {
  call  helper           in: %vm          dst: %void
  ret   %void
}
)";

Executable Canonical() { return Executable::from_text(kCanonical, "canonical.kvmt"); }

// The message of the ValueError `f` throws; "" when it throws nothing.
std::string ValueErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

std::string TextError(std::string_view text) {
  return ValueErrorOf([&] { Executable::from_text(text, "t.kvmt"); });
}

std::string LoadError(const std::vector<uint8_t>& bytes) {
  return ValueErrorOf([&] { Executable::load_from_bytes(bytes); });
}

// A small valid executable: main(x) { r1 = add(x, c[0]); ret r1 }.
Executable Small() {
  return Executable::from_text(R"(kiln_vm 1
import "lib.so"
const c[0] = string "s"
packed_func @add
func @main(x) regs=2 {
  call add in: %0, c[0] dst: %1
  ret %1
}
)");
}

void PutU64(std::vector<uint8_t>& bytes, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    bytes[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetU64(const std::vector<uint8_t>& bytes, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | bytes[at + static_cast<size_t>(i)];
  return v;
}
// Where the payload of each of the four sections starts.
std::vector<size_t> SectionPayloads(const std::vector<uint8_t>& bytes) {
  std::vector<size_t> out;
  size_t at = 16;
  for (int i = 0; i < 4; ++i) {
    out.push_back(at + 12);
    at += 12 + GetU64(bytes, at + 4);
  }
  return out;
}

// --- argument encoding --------------------------------------------------------------------

TEST(VmExecutable, ArgumentWordsCarryKindAndSignedValue) {
  for (ArgKind kind :
       {ArgKind::kRegister, ArgKind::kImmediate, ArgKind::kConstIdx, ArgKind::kFuncIdx}) {
    for (Word v : {Word{0}, Word{1}, Word{-1}, Word{-3}, kMaxArgValue, -kMaxArgValue, kVoidRegister,
                   kVMRegister}) {
      const Word w = encode_arg(kind, v);
      EXPECT_EQ(arg_kind(w), kind);
      EXPECT_EQ(arg_value(w), v);
    }
  }
  EXPECT_EQ(encode_arg(ArgKind::kImmediate, 5), (Word{1} << 56) | 5);
  EXPECT_THAT(ValueErrorOf([] { encode_arg(ArgKind::kImmediate, kMaxArgValue + 1); }),
              HasSubstr("out of range"));
  EXPECT_THROW(encode_arg(ArgKind::kImmediate, -kMaxArgValue - 1), ValueError);
  EXPECT_THROW(encode_arg(ArgKind::kImmediate, std::numeric_limits<Word>::min()), ValueError);
}

TEST(VmExecutable, InstructionDecodesEachOpcode) {
  const Executable e = Canonical();
  EXPECT_EQ(e.num_instructions(), 13);
  Instruction call = e.instruction(0);
  EXPECT_EQ(call.op, Opcode::kCall);
  EXPECT_EQ(call.dst, 2);
  EXPECT_EQ(call.func_idx, 0);
  ASSERT_EQ(call.args.size(), 2u);
  EXPECT_EQ(call.args[1], encode_arg(ArgKind::kRegister, 1));
  Instruction branch = e.instruction(1);
  EXPECT_EQ(branch.op, Opcode::kIf);
  EXPECT_EQ(branch.reg, 2);
  EXPECT_EQ(branch.offset, 3);
  Instruction call2 = e.instruction(2);
  ASSERT_EQ(call2.args.size(), 4u);
  EXPECT_EQ(call2.args[0], encode_arg(ArgKind::kConstIdx, 0));
  EXPECT_EQ(call2.args[1], encode_arg(ArgKind::kImmediate, -3));
  EXPECT_EQ(call2.args[2], encode_arg(ArgKind::kFuncIdx, 3));
  EXPECT_EQ(call2.args[3], encode_arg(ArgKind::kRegister, kVMRegister));
  EXPECT_EQ(e.instruction(4).reg, kVoidRegister);
  Instruction jump = e.instruction(5);
  EXPECT_EQ(jump.op, Opcode::kGoto);
  EXPECT_EQ(jump.offset, 2);
}

// --- text form --------------------------------------------------------------------------

TEST(VmExecutable, TextRoundTripIsIdentical) {
  const Executable e = Canonical();
  EXPECT_EQ(e.as_text(), kCanonical);
  EXPECT_EQ(Executable::from_text(e.as_text()), e);
  ASSERT_EQ(e.func_table.size(), 5u);
  EXPECT_EQ(e.func_table[2].param_names, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(e.func_table[2].num_args, 2);
  EXPECT_EQ(e.func_table[2].register_file_size, 4);
  EXPECT_EQ(e.func_table[3].param_names, std::vector<std::string>{});
  EXPECT_EQ(e.func_table[3].num_args, 1);
  EXPECT_EQ(e.func_table[4].name, "entry point");
  EXPECT_EQ(e.func_map.at("helper"), 3);
  EXPECT_EQ(e.imports, (std::vector<std::string>{"libtest_add.so", "dir/lib two.so"}));
}

TEST(VmExecutable, TextAcceptsCommentsSpacingAndOrderOfItems) {
  // The same program with comments, other spacing, and the import and constant after their
  // use gives the same executable.
  const Executable a = Small();
  const Executable b = Executable::from_text(R"(
# a comment line
kiln_vm 1   # trailing comment
packed_func @"add"
func @main("x") regs = 2 {   # the parameter name quoted
    call   add  in:%0,c[0]   dst:%1

  ret %1
}
import "lib.so"
const c[0] = string "s"
)");
  EXPECT_EQ(a, b);
  EXPECT_EQ(b.as_text(), a.as_text());
  EXPECT_THAT(a.as_text(), HasSubstr("func @main(x) regs=2 {\n  call  add              in: %0, c[0]"
                                     "     dst: %1\n  ret   %1\n}\n"));
  // Functions referenced before their definition (table order is text order).
  const Executable fwd = Executable::from_text(R"(kiln_vm 1
func @main() regs=1 {
  call later in: f[later] dst: %0
  ret %0
}
func @later(f) regs=1 {
  ret %0
}
)");
  EXPECT_EQ(fwd.func_table[0].name, "main");
  EXPECT_EQ(fwd.instruction(0).func_idx, 1);
  EXPECT_EQ(fwd.instruction(0).args[0], encode_arg(ArgKind::kFuncIdx, 1));
  EXPECT_EQ(Executable::from_text(fwd.as_text()), fwd);
}

TEST(VmExecutable, FloatConstantsRoundTripBitForBit) {
  const double values[] = {0.0,
                           -0.0,
                           1.0,
                           0.1,
                           -2.5e-300,
                           1e300,
                           std::numeric_limits<double>::denorm_min(),
                           std::numeric_limits<double>::max(),
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN(),
                           -std::numeric_limits<double>::quiet_NaN(),
                           std::bit_cast<double>(uint64_t{0x7ff0000000000001}),
                           123456789.125};
  ExecBuilder b;
  for (double v : values) b.c(v);
  b.emit_function("main", 0);
  b.emit_ret(b.void_arg());
  b.end_function("main");
  const Executable e = b.get();
  ASSERT_EQ(e.constants.size(), std::size(values));
  const Executable from_text = Executable::from_text(e.as_text());
  const Executable from_bytes = Executable::load_from_bytes(e.save_to_bytes());
  for (size_t i = 0; i < std::size(values); ++i) {
    const uint64_t bits = std::bit_cast<uint64_t>(values[i]);
    EXPECT_EQ(std::bit_cast<uint64_t>(std::get<double>(from_text.constants[i])), bits) << i;
    EXPECT_EQ(std::bit_cast<uint64_t>(std::get<double>(from_bytes.constants[i])), bits) << i;
  }
  EXPECT_EQ(from_text, e);
  const std::string text = e.as_text();
  EXPECT_THAT(text, HasSubstr("= float 0.0\n"));
  EXPECT_THAT(text, HasSubstr("= float -0.0\n"));
  EXPECT_THAT(text, HasSubstr("= float 1.0\n"));
  EXPECT_THAT(text, HasSubstr("= float 0.1\n"));
  EXPECT_THAT(text, HasSubstr("= float 1e+300\n"));
  EXPECT_THAT(text, HasSubstr("= float inf\n"));
  EXPECT_THAT(text, HasSubstr("= float -inf\n"));
  EXPECT_THAT(text, HasSubstr("= float nan\n"));
  EXPECT_THAT(text, HasSubstr("= float nan:0xfff8000000000000\n"));
  EXPECT_THAT(text, HasSubstr("= float nan:0x7ff0000000000001\n"));
  EXPECT_THAT(text, HasSubstr("= float 123456789.125\n"));
}

TEST(VmExecutable, StringsWithEveryByteRoundTrip) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  ExecBuilder b;
  b.c(all);
  b.c(std::string());
  b.emit_function("f", 1, {all});
  b.emit_ret(b.r(0));
  b.end_function("f");
  b.add_import(all);
  const Executable e = b.get();
  const std::string text = e.as_text();
  EXPECT_THAT(text, HasSubstr(R"(\x00\x01)"));
  EXPECT_THAT(text, HasSubstr(R"(\t\n\x0b\x0c\r)"));
  EXPECT_THAT(text, HasSubstr(R"( !\"#$)"));
  EXPECT_THAT(text, HasSubstr(R"(\\]^_`)"));
  EXPECT_THAT(text, HasSubstr(R"(~\x7f\x80)"));
  EXPECT_THAT(text, HasSubstr("const c[1] = string \"\"\n"));
  const Executable back = Executable::from_text(text);
  EXPECT_EQ(back, e);
  EXPECT_EQ(std::get<std::string>(back.constants[0]), all);
  EXPECT_EQ(back.func_table[0].param_names[0], all);
  EXPECT_EQ(back.imports[0], all);
  EXPECT_EQ(Executable::load_from_bytes(e.save_to_bytes()), e);
}

TEST(VmExecutable, TensorConstantsKeepDtypeShapeAndBytes) {
  ExecBuilder b;
  std::vector<Tensor> tensors;
  auto add = [&](std::vector<int64_t> shape, DataType dtype) {
    Tensor t = Tensor::empty(shape, dtype);
    auto* p = static_cast<uint8_t*>(t.data());
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(i * 37 + tensors.size());
    tensors.push_back(t);
    b.c(t);
  };
  add({2, 3}, DataType::Float(32));
  add({}, DataType::Int(8));
  add({4}, DataType::Bool());
  add({3}, DataType::Float(16));
  add({2}, DataType::BFloat16());
  add({2, 2}, DataType::Int(8, 4));
  add({0, 3}, DataType::UInt(64));
  add({1, 1, 1, 1, 5}, DataType::Float(64));
  b.emit_function("main", 0);
  b.emit_ret(b.void_arg());
  b.end_function("main");
  const Executable e = b.get();
  ASSERT_EQ(e.constants.size(), tensors.size());
  for (const Executable& back :
       {Executable::from_text(e.as_text()), Executable::load_from_bytes(e.save_to_bytes())}) {
    ASSERT_EQ(back.constants.size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = std::get<Tensor>(back.constants[i]);
      EXPECT_EQ(t.dtype(), tensors[i].dtype());
      EXPECT_TRUE(std::ranges::equal(t.shape(), tensors[i].shape()));
      EXPECT_EQ(t.device(), Device::cpu());
      ASSERT_EQ(t.nbytes(), tensors[i].nbytes());
      EXPECT_EQ(std::memcmp(t.data(), tensors[i].data(), t.nbytes()), 0) << i;
    }
    EXPECT_EQ(back, e);
  }
  EXPECT_THAT(e.as_text(), HasSubstr("const c[1] = tensor int8 [] hex\"01\"\n"));
  EXPECT_THAT(e.as_text(), HasSubstr("const c[6] = tensor uint64 [0, 3] hex\"\"\n"));
  EXPECT_THAT(e.as_text(), HasSubstr("const c[5] = tensor int8x4 [2, 2] hex\""));
}

TEST(VmExecutable, ConstantsEqualComparesStructurally) {
  Tensor a = Tensor::empty({2}, DataType::Int(32));
  Tensor b = Tensor::empty({2}, DataType::Int(32));
  a.host_span<int32_t>()[0] = b.host_span<int32_t>()[0] = 1;
  a.host_span<int32_t>()[1] = b.host_span<int32_t>()[1] = 2;
  EXPECT_TRUE(constants_equal(a, b));
  b.host_span<int32_t>()[1] = 3;
  EXPECT_FALSE(constants_equal(a, b));
  EXPECT_FALSE(constants_equal(a, Tensor::empty({1, 2}, DataType::Int(32))));
  EXPECT_FALSE(constants_equal(a, Tensor::empty({2}, DataType::UInt(32))));
  EXPECT_TRUE(constants_equal(ShapeConstant{{1, 2}}, ShapeConstant{{1, 2}}));
  EXPECT_FALSE(constants_equal(ShapeConstant{{1, 2}}, ShapeConstant{{2, 1}}));
  EXPECT_FALSE(constants_equal(int64_t{1}, 1.0));
  EXPECT_FALSE(constants_equal(0.0, -0.0));
  EXPECT_TRUE(constants_equal(std::nan(""), std::nan("")));
  EXPECT_TRUE(constants_equal(DataType::Float(16), DataType::Float(16)));
  EXPECT_FALSE(constants_equal(Device::cpu(0), Device::cpu(1)));
  EXPECT_TRUE(constants_equal(std::string("a"), std::string("a")));
}

TEST(VmExecutable, DevicesRoundTripIncludingUnregisteredTypes) {
  ExecBuilder b;
  b.c(Device::cpu(0));
  b.c(Device{kDLCUDA, 1});
  b.c(Device{99, 3});
  b.c(DataType::Bool());
  b.emit_function("main", 0);
  b.emit_ret(b.void_arg());
  b.end_function("main");
  const Executable e = b.get();
  const std::string text = e.as_text();
  EXPECT_THAT(text, HasSubstr("const c[0] = device cpu:0\n"));
  EXPECT_THAT(text, HasSubstr("const c[1] = device cuda:1\n"));
  EXPECT_THAT(text, HasSubstr("const c[2] = device dev99:3\n"));
  EXPECT_THAT(text, HasSubstr("const c[3] = dtype bool\n"));
  EXPECT_EQ(Executable::from_text(text), e);
  EXPECT_EQ(Executable::load_from_bytes(e.save_to_bytes()), e);
  // Aliases are accepted on input.
  const Executable alias = Executable::from_text(
      "kiln_vm 1\nconst c[0] = device llvm:2\nfunc @f() regs=0 {\n ret %void\n}\n");
  EXPECT_EQ(std::get<Device>(alias.constants[0]), Device::cpu(2));
}

TEST(VmExecutable, EmptyExecutableRoundTrips) {
  Executable e;
  EXPECT_NO_THROW(e.validate());
  EXPECT_EQ(e.as_text(), "kiln_vm 1\n");
  EXPECT_EQ(Executable::from_text("kiln_vm 1"), e);
  EXPECT_EQ(Executable::load_from_bytes(e.save_to_bytes()), e);
  EXPECT_EQ(e.save_to_bytes().size(), 16u + 4 * 12 + 8 + 8 + 8 + 16);
}

TEST(VmExecutable, StatsHasTheReferenceShape) {
  EXPECT_EQ(
      Canonical().stats(),
      "Kiln VM executable statistics:\n"
      "  Constant pool (# 8): [[2, 2], shapetuple[2, -1, 3], \"hello \\\"vm\\\"\\n\\x01\\\\\", "
      "36028797018963968, 0.5, int8x4, cpu:0, scalar]\n"
      "  Globals (#5): [test.vm.add, weird name, main, helper, entry point]\n");
  EXPECT_EQ(Executable().stats(),
            "Kiln VM executable statistics:\n  Constant pool (# 0): []\n  Globals (#0): []\n");
}

// --- text errors --------------------------------------------------------------------------

TEST(VmExecutable, TextErrorsSayFileLineAndColumn) {
  const std::string head = "kiln_vm 1\npacked_func @add\n";
  struct Case {
    std::string text;
    std::string error;
  };
  const Case cases[] = {
      {"", "t.kvmt:1:1: expected the header 'kiln_vm 1'"},
      {"kvm 1\n", "t.kvmt:1:1: expected the header 'kiln_vm 1'"},
      {"kiln_vm 2\n", "t.kvmt:1:9: unsupported text form version 2 (this build reads version 1)"},
      {"kiln_vm x\n", "t.kvmt:1:9: bad number 'x'"},
      {"kiln_vm 1 extra\n", "t.kvmt:1:11: expected the end of the line, found 'extra'"},
      {head + "bogus\n", "t.kvmt:3:1: expected 'import', 'const', 'packed_func' or 'func'"},
      {head + "func @f() regs=1 {\n  cal add in: dst: %0\n}\n",
       "t.kvmt:4:3: unknown instruction 'cal' (expected call, ret, goto or if)"},
      {head + "func @f() regs=1 {\n  ret %x\n}\n", "t.kvmt:4:7: bad register '%x'"},
      {head + "func @f() regs=1 {\n  ret %-1\n}\n", "t.kvmt:4:7: bad register '%-1'"},
      {head + "func @f() regs=1 {\n  ret 0\n}\n", "t.kvmt:4:7: expected a register"},
      {head + "func @f() regs=1 {\n  ret %18014398509481984\n}\n",
       "t.kvmt:4:7: bad register '%18014398509481984'"},
      {head + "func @f() regs=1 {\n  call nope in: dst: %0\n  ret %0\n}\n",
       "t.kvmt:4:8: undefined function nope (declare it with 'packed_func @nope'"},
      {head + "func @f() regs=1 {\n  call add in: f[nope] dst: %0\n  ret %0\n}\n",
       "t.kvmt:4:16: undefined function nope"},
      {head + "func @f() regs=1 {\n  call add in: i1, c[0] dst: %0\n  ret %0\n}\n",
       "t.kvmt:4:20: undefined constant c[0] (0 constants are declared)"},
      {head + "func @f() regs=1 {\n  ret %0\n",
       "t.kvmt:5:1: missing '}' to close function f "
       "opened at 3:1"},
      {head + "func @f() regs=1 {\n  ret %0\nfunc @g() regs=1 {\n  ret %0\n}\n",
       "t.kvmt:5:1: missing '}' before 'func' to close function f opened at 3:1"},
      {head + "func @f() regs=1\n  ret %0\n}\n",
       "t.kvmt:3:17: expected '{' to open the body of function f, found the end of the line"},
      {head + "func @f() regs=1 {\n  goto 1x\n}\n", "t.kvmt:4:8: bad number '1x'"},
      {head + "func @f() regs=1 {\n  goto 99999999999999999999\n}\n",
       "t.kvmt:4:8: bad number '99999999999999999999' for the goto offset: it does not fit in 64 "
       "bits"},
      {head + "func @f() regs=1 {\n  call add in: i36028797018963968 dst: %0\n  ret %0\n}\n",
       "t.kvmt:4:16: immediate 36028797018963968 is out of range"},
      {head + "func @f() regs=1 {\n  call add in: %0 %0 dst: %0\n  ret %0\n}\n",
       "t.kvmt:4:19: expected ',' or 'dst:' after a call argument, found '%'"},
      {head + "func @f() regs=1 {\n  call add in: x1 dst: %0\n  ret %0\n}\n",
       "t.kvmt:4:16: bad operand 'x1'"},
      {head + "func @f() regs=1 {\n  call add %0 dst: %0\n  ret %0\n}\n",
       "t.kvmt:4:12: expected 'in:' after the callee, found '%'"},
      {head + "const c[1] = int 1\n", "t.kvmt:3:9: expected c[0]: constants are declared in order"},
      {head + "const c[0] = blob 1\n", "t.kvmt:3:14: unknown constant kind 'blob'"},
      {head + "const c[0] = dtype float33\n", "t.kvmt:3:20: "},
      {head + "const c[0] = float 1.5.5\n", "t.kvmt:3:20: bad number '1.5.5'"},
      {head + "const c[0] = float 1e999\n", "t.kvmt:3:20: bad number '1e999': out of the range"},
      {head + "const c[0] = float nan:0x1\n",
       "t.kvmt:3:24: 0x0000000000000001 is not the bit "
       "pattern of a NaN"},
      {head + "const c[0] = string \"abc\n", "t.kvmt:3:21: unterminated string"},
      {head + "const c[0] = string \"a\\qb\"\n", "t.kvmt:3:23: bad escape '\\q'"},
      {head + "const c[0] = string \"a\\x4\"\n", "t.kvmt:3:23: bad escape: \\x takes two hex"},
      {head + "const c[0] = device gpu:0\n", "t.kvmt:3:21: unknown device type 'gpu'"},
      {head + "const c[0] = device cpu:-1\n", "t.kvmt:3:25: device index -1 is out of range"},
      {head + "const c[0] = tensor float32 [2] hex\"0000803f\"\n",
       "t.kvmt:3:36: the tensor's data has 4 bytes, shape [2] of float32 needs 8"},
      {head + "const c[0] = tensor float32 [1] hex\"0000803\"\n",
       "t.kvmt:3:36: the tensor's hex data has an odd number of digits"},
      {head + "const c[0] = tensor int8 [1] hex\"zz\"\n",
       "t.kvmt:3:33: the tensor's data has a "
       "non-hex character"},
      {head + "const c[0] = tensor int8 [-1] hex\"\"\n",
       "t.kvmt:3:26: negative dimension -1 in the tensor shape"},
      {head + "const c[0] = tensor int8 [4294967296, 4294967296] hex\"\"\n",
       "t.kvmt:3:26: the tensor shape [4294967296, 4294967296] has too many elements"},
      {head + "packed_func @add\n", "t.kvmt:3:14: function add is already declared at 2:1"},
      {head + "func @f(%1) regs=2 {\n  ret %0\n}\n", "t.kvmt:3:10: expected %0"},
      {head + "func @f(%0, x) regs=2 {\n  ret %0\n}\n", "t.kvmt:3:13: expected %1, found 'x'"},
      {head + "func @f() regs=1 {\n  ret %0 ;\n}\n", "t.kvmt:4:10: unexpected character \";\""},
      {head + "import lib.so\n",
       "t.kvmt:3:8: expected the import's library name as a quoted "
       "string"},
      // Problems validate() finds, placed at the word they are about.
      {head + "func @f() regs=1 {\n  call add in: %0, %5 dst: %0\n  ret %0\n}\n",
       "t.kvmt:4:20: in function f: argument 1 register %5 is out of range (valid are %0..%0, "
       "%void and %vm)"},
      {head + "func @f() regs=1 {\n  call add in: dst: %3\n  ret %0\n}\n",
       "t.kvmt:4:21: in function f: destination register %3 is out of range"},
      {head + "func @f() regs=0 {\n  ret %0\n}\n",
       "t.kvmt:4:7: in function f: result register %0 is out of range (the function has no "
       "registers; only %void and %vm are valid)"},
      {head + "func @f() regs=1 {\n  goto 0\n}\n",
       "t.kvmt:4:8: in function f: goto offset 0 (must not be 0)"},
      {head + "func @f() regs=1 {\n  goto 1\n  ret %0\n}\nfunc @g() regs=1 {\n  goto -2\n}\n",
       "t.kvmt:8:8: in function g: goto offset -2 lands outside the function (pc 2 + -2 is not in "
       "[2, 3))"},
      {head + "func @f() regs=1 {\n  if %0, 1\n  ret %0\n}\n",
       "t.kvmt:4:10: in function f: if false offset 1 must be greater than 1"},
      {head + "func @f() regs=1 {\n  if %0, 5\n  ret %0\n  ret %0\n}\n",
       "t.kvmt:4:10: in function f: if false offset 5 lands outside the function"},
      {head + "func @f() regs=1 {\n  call add in: dst: %0\n}\n",
       "t.kvmt:4:3: in function f: call falls through past the end of the function"},
      {head + "func @f() regs=1 {\n}\n",
       "t.kvmt:3:1: in function f: no instructions (start_instr 0, end_instr 0)"},
      {head + "func @f(a, b) regs=1 {\n  ret %0\n}\n",
       "t.kvmt:3:1: in function f: register_file_size 1 is less than num_args 2"},
      {head + "func @f() regs=16777217 {\n  ret %0\n}\n",
       "t.kvmt:3:1: in function f: register_file_size 16777217 exceeds the limit 16777216"},
  };
  for (const Case& c : cases) {
    const std::string error = TextError(c.text);
    EXPECT_THAT(error, StartsWith(c.error)) << "text:\n" << c.text;
  }
}

TEST(VmExecutable, TextErrorDefaultSourceName) {
  EXPECT_THAT(ValueErrorOf([] { Executable::from_text("nope"); }), StartsWith("<text>:1:1: "));
}

// --- validate -------------------------------------------------------------------------------

// Breaks a copy of Small() with `mutate` and returns validate()'s message.
std::string ValidateError(const std::function<void(Executable&)>& mutate) {
  Executable e = Small();
  mutate(e);
  return ValueErrorOf([&] { e.validate(); });
}

TEST(VmExecutable, ValidateRejectsEachBrokenInvariant) {
  // Small(): func_table [add (packed), main (VM, x, regs 2)]; code:
  //   pc 0: [1, dst 1, func 0, 2 args, r0, c0]   words 0..5
  //   pc 1: [2, 1]                                words 6..7
  ASSERT_EQ(Small().instr_data.size(), 8u);
  ASSERT_EQ(ValidateError([](Executable&) {}), "");
  struct Case {
    std::function<void(Executable&)> mutate;
    std::string error;
  };
  const Case cases[] = {
      {[](Executable& e) { e.instr_data[1] = 2; },
       "function \"main\" instruction 0 (pc 0): destination register %2 is out of range (valid "
       "are %0..%1, %void and %vm)"},
      {[](Executable& e) { e.instr_data[1] = -1; }, "destination register -1 is out of range"},
      {[](Executable& e) { e.instr_data[1] = kBeginSpecialReg + 2; },
       "destination register 18014398509481986 is out of range"},
      {[](Executable& e) { e.instr_data[4] = encode_arg(ArgKind::kRegister, 7); },
       "argument 0 register %7 is out of range"},
      {[](Executable& e) { e.instr_data[4] = encode_arg(ArgKind::kRegister, -1); },
       "argument 0 register -1 is out of range"},
      {[](Executable& e) { e.instr_data[5] = encode_arg(ArgKind::kConstIdx, 1); },
       "argument 1: constant index 1 is out of range (1 constants)"},
      {[](Executable& e) { e.instr_data[5] = encode_arg(ArgKind::kConstIdx, -1); },
       "argument 1: constant index -1 is out of range"},
      {[](Executable& e) { e.instr_data[5] = encode_arg(ArgKind::kFuncIdx, 2); },
       "argument 1: function index 2 is out of range (2 functions)"},
      {[](Executable& e) { e.instr_data[5] = static_cast<Word>(uint64_t{9} << 56); },
       "argument 1 has the unknown kind 9"},
      {[](Executable& e) { e.instr_data[5] = static_cast<Word>(uint64_t{1} << 55); },
       "argument 1 has the out-of-range value -36028797018963968"},
      {[](Executable& e) { e.instr_data[2] = 2; },
       "callee function index 2 is out of range (2 functions)"},
      {[](Executable& e) { e.instr_data[2] = -1; }, "callee function index -1 is out of range"},
      {[](Executable& e) { e.instr_data[7] = 5; }, "result register %5 is out of range"},
      {[](Executable& e) { e.instr_data[0] = 9; },
       "function \"main\" instruction 0 (pc 0): unknown opcode 9 (1 call, 2 ret, 3 goto, 4 if)"},
      {[](Executable& e) { e.instr_data[3] = 5; },
       "call with 5 arguments, but 4 words remain in instr_data after its 4-word head"},
      {[](Executable& e) { e.instr_data[3] = -1; },
       "call with -1 arguments, but 4 words remain in instr_data"},
      {[](Executable& e) { e.instr_data[3] = std::numeric_limits<Word>::max(); },
       "call with 9223372036854775807 arguments"},
      {[](Executable& e) { e.instr_offset[1] = 5; },
       "instruction 1 (pc 1): starts at word 5, expected 6 (instructions are stored back to back "
       "from word 0)"},
      {[](Executable& e) { e.instr_data.push_back(2); },
       "invalid VM executable: instr_data has 1 words after the last instruction's end (word 8)"},
      {[](Executable& e) { e.instr_data.resize(7); },
       "ret runs past the end of instr_data (7 words)"},
      {[](Executable& e) { e.instr_data[6] = 3; }, "goto offset 1 lands outside the function"},
      {[](Executable& e) {
         e.instr_data[6] = 3;
         e.instr_data[7] = 0;
       },
       "goto offset 0 (must not be 0)"},
      {[](Executable& e) {
         e.instr_data[6] = 3;
         e.instr_data[7] = -2;
       },
       "goto offset -2 lands outside the function (pc 1 + -2 is not in [0, 2))"},
      {[](Executable& e) {
         e.instr_data[6] = 4;
         e.instr_data.push_back(2);
       },
       "if false offset 2 lands outside the function"},
      {[](Executable& e) {
         e.instr_data.resize(6);
         e.instr_offset.resize(1);
         e.func_table[1].end_instr = 1;
       },
       "call falls through past the end of the function"},
      {[](Executable& e) { e.func_table[1].register_file_size = 0; },
       "function 1 (\"main\"): register_file_size 0 is less than num_args 1"},
      {[](Executable& e) { e.func_table[1].register_file_size = (int64_t{1} << 24) + 1; },
       "register_file_size 16777217 exceeds the limit 16777216"},
      {[](Executable& e) { e.func_table[1].num_args = -1; }, "num_args -1 is negative"},
      {[](Executable& e) {
         e.func_table[1].param_names = {"a", "b"};
       },
       "2 param_names for num_args 1"},
      {[](Executable& e) { e.func_table[1].end_instr = 1; },
       "invalid VM executable: instructions from pc 1 to 2 belong to no VM function"},
      {[](Executable& e) { e.func_table[1].end_instr = 3; },
       "end_instr 3 is past the end of the code (2 instructions)"},
      {[](Executable& e) { e.func_table[1].start_instr = 1; },
       "instructions [1, 2) do not start at pc 0"},
      {[](Executable& e) { e.func_table[1].start_instr = 2; }, "no instructions (start_instr 2"},
      {[](Executable& e) { e.func_table[0].num_args = 2; },
       "function 0 (\"add\"): a PackedFunc entry must have start_instr, end_instr, num_args and "
       "register_file_size 0"},
      {[](Executable& e) { e.func_table[0].kind = static_cast<FuncKind>(7); },
       "unknown function kind 7"},
      {[](Executable& e) { e.func_table[0].name = ""; },
       "function 0 (\"\"): the function name is "
       "empty"},
      {[](Executable& e) { e.func_table[1].name = "add"; },
       "function 1 (\"add\"): the name is also function 0's"},
      {[](Executable& e) { e.func_map.clear(); },
       "func_map has 0 entries for 2 functions (call rebuild_func_map())"},
      {[](Executable& e) { std::swap(e.func_map["add"], e.func_map["main"]); },
       "func_map maps \"add\" to 1"},
      {[](Executable& e) { e.constants[0] = Tensor(); },
       "constant c[0] (tensor): the tensor is undefined"},
      {[](Executable& e) { e.constants[0] = DataType(3, 64, 1); },
       "constant c[0] (dtype): not a valid data type (code 3, bits 64, lanes 1)"},
      {[](Executable& e) {
         e.constants[0] = Device{-1, 0};
       },
       "constant c[0] (device): negative device type or id"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    EXPECT_THAT(ValidateError(cases[i].mutate), HasSubstr(cases[i].error)) << "case " << i;
  }
  // Specials are valid registers everywhere.
  EXPECT_EQ(ValidateError([](Executable& e) { e.instr_data[1] = kVoidRegister; }), "");
  EXPECT_EQ(ValidateError([](Executable& e) { e.instr_data[7] = kVMRegister; }), "");
}

TEST(VmExecutable, SavingAndPrintingAnInvalidExecutableThrow) {
  Executable e = Small();
  e.instr_data[1] = 9;
  EXPECT_THROW(e.save_to_bytes(), ValueError);
  EXPECT_THROW(e.as_text(), ValueError);
  EXPECT_NO_THROW(e.stats());
}

TEST(VmExecutable, RebuildFuncMapRejectsDuplicates) {
  Executable e = Small();
  e.func_table[1].name = "add";
  EXPECT_THAT(ValueErrorOf([&] { e.rebuild_func_map(); }),
              HasSubstr("duplicate function name \"add\" (functions 0 and 1)"));
}

// --- binary form ----------------------------------------------------------------------------

TEST(VmExecutable, BinaryRoundTripIsIdentical) {
  const Executable e = Canonical();
  const std::vector<uint8_t> bytes = e.save_to_bytes();
  const Executable back = Executable::load_from_bytes(bytes);
  EXPECT_EQ(back, e);
  EXPECT_EQ(back.func_map, e.func_map);
  EXPECT_EQ(back.save_to_bytes(), bytes);
  EXPECT_EQ(back.as_text(), kCanonical);
  // The header: magic, version 1, flags 0.
  ASSERT_GE(bytes.size(), 16u);
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 8),
            (std::vector<uint8_t>{0x89, 'K', 'V', 'M', '\r', '\n', 0x1a, '\n'}));
  EXPECT_EQ(bytes[8], 1);
  EXPECT_EQ(bytes[12], 0);
}

TEST(VmExecutable, EveryTruncationIsAClearError) {
  const std::vector<uint8_t> bytes = Canonical().save_to_bytes();
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string error =
        LoadError(std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(n)));
    ASSERT_THAT(error, StartsWith("invalid VM executable: ")) << "prefix of " << n << " bytes";
    ASSERT_THAT(error, HasSubstr(" at byte offset ")) << error;
  }
  EXPECT_EQ(LoadError({}),
            "invalid VM executable: header at byte offset 0: the input is empty "
            "(not a Kiln VM executable)");
  EXPECT_EQ(LoadError(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 10)),
            "invalid VM executable: header at byte offset 0: truncated: the header needs 16 "
            "bytes, 10 remain");
  EXPECT_THAT(LoadError(std::vector<uint8_t>(bytes.begin(), bytes.end() - 1)),
              HasSubstr("code section at byte offset"));
}

TEST(VmExecutable, BinaryHeaderErrors) {
  std::vector<uint8_t> bytes = Small().save_to_bytes();
  EXPECT_EQ(LoadError({'h', 'e', 'l', 'l', 'o'}),
            "invalid VM executable: header at byte offset 0: bad magic 68 65 6c 6c 6f (expected "
            "89 4b 56 4d 0d 0a 1a 0a): not a Kiln VM executable");
  std::vector<uint8_t> v = bytes;
  v[8] = 2;
  EXPECT_EQ(LoadError(v),
            "invalid VM executable: header at byte offset 8: unsupported format "
            "version 2 (this build reads version 1)");
  v = bytes;
  v[13] = 1;
  EXPECT_EQ(LoadError(v),
            "invalid VM executable: header at byte offset 12: reserved flags "
            "0x00000100 must be 0");
  v = bytes;
  v[16] = 2;
  EXPECT_EQ(LoadError(v),
            "invalid VM executable: imports section at byte offset 16: expected the "
            "imports section (id 1), found section id 2");
  v = bytes;
  PutU64(v, 20, uint64_t{1} << 62);
  EXPECT_THAT(LoadError(v), StartsWith("invalid VM executable: imports section at byte offset 20: "
                                       "truncated: the section size is 4611686018427387904 bytes"));
  v = bytes;
  v.push_back(0);
  EXPECT_EQ(LoadError(v), "invalid VM executable: end of file at byte offset " +
                              std::to_string(bytes.size()) +
                              ": 1 trailing bytes after the code section");
}

TEST(VmExecutable, HugeCountsAreRejectedBeforeAllocating) {
  const std::vector<uint8_t> bytes = Small().save_to_bytes();
  const std::vector<size_t> at = SectionPayloads(bytes);
  auto patched = [&](size_t offset, uint64_t value) {
    std::vector<uint8_t> v = bytes;
    PutU64(v, offset, value);
    return LoadError(v);
  };
  const uint64_t huge = uint64_t{1} << 61;
  // imports: count, then the first string's length.
  EXPECT_THAT(patched(at[0], huge),
              HasSubstr("imports section at byte offset " + std::to_string(at[0]) +
                        ": import count 2305843009213693952 cannot fit in the"));
  EXPECT_THAT(patched(at[0] + 8, huge), HasSubstr("truncated: import name of 2305843009213693952 "
                                                  "bytes"));
  // functions: count; the first function's name length; its param count (the packed entry
  // has none: kind 1 + name 8+3 + 4*8 = 44 bytes before it).
  EXPECT_THAT(patched(at[1], huge), HasSubstr("function count 2305843009213693952 cannot fit"));
  EXPECT_THAT(patched(at[1] + 9, huge), HasSubstr("truncated: the function name of"));
  EXPECT_THAT(patched(at[1] + 8 + 44, huge), HasSubstr("param name count 2305843009213693952"));
  // constants: count; the string constant's length (after the u8 tag).
  EXPECT_THAT(patched(at[2], huge), HasSubstr("constant count 2305843009213693952 cannot fit"));
  EXPECT_THAT(patched(at[2] + 9, huge), HasSubstr("truncated: the string constant of"));
  // code: instruction offsets, then words.
  EXPECT_THAT(patched(at[3], huge),
              HasSubstr("code section at byte offset " + std::to_string(at[3]) +
                        ": instruction offset count 2305843009213693952"));
  EXPECT_THAT(patched(at[3] + 8 + 2 * 8, huge), HasSubstr("instruction word count"));
  EXPECT_THAT(patched(at[3], ~uint64_t{0}), HasSubstr("cannot fit"));
}

TEST(VmExecutable, TensorConstantErrors) {
  ExecBuilder b;
  Tensor t = Tensor::empty({2}, DataType::Float(32));
  b.c(t);
  b.emit_function("main", 0);
  b.emit_ret(b.void_arg());
  b.end_function("main");
  const std::vector<uint8_t> bytes = b.get().save_to_bytes();
  const size_t c = SectionPayloads(bytes)[2] + 8;  // the constant's tag
  ASSERT_EQ(bytes[c], 1);
  // tag, dtype (4), ndim (4) at c+5, dim at c+9, nbytes at c+17, data at c+25.
  auto with = [&](size_t offset, std::vector<uint8_t> patch) {
    std::vector<uint8_t> v = bytes;
    std::copy(patch.begin(), patch.end(), v.begin() + static_cast<long>(offset));
    return LoadError(v);
  };
  EXPECT_THAT(with(c, {9}), HasSubstr("constants section at byte offset " + std::to_string(c) +
                                      ": constant c[0] has the unknown tag 9"));
  EXPECT_THAT(with(c + 1, {3}), HasSubstr("the tensor dtype (code 3, bits 32, lanes 1) is not a "
                                          "supported data type"));
  EXPECT_THAT(with(c + 2, {0}), HasSubstr("is not a supported data type"));
  EXPECT_THAT(with(c + 5, {0xff, 0xff, 0xff, 0x7f}),
              HasSubstr("constant c[0]: 2147483647 dimensions cannot fit"));
  EXPECT_THAT(with(c + 9, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}),
              HasSubstr("constant c[0]: negative dimension -1"));
  EXPECT_THAT(with(c + 9, {3}),
              HasSubstr("constant c[0]: data size 8 does not match shape [3] of float32 (12 "
                        "bytes)"));
  EXPECT_THAT(with(c + 9, {0, 0, 0, 0, 0, 0, 0, 0x40}), HasSubstr("has too many elements"));
  EXPECT_THAT(with(c + 17, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}),
              HasSubstr("data size 18446744073709551615 does not match"));
  // A consistent but huge tensor: shape [2^40] of int8 with nbytes 2^40.
  {
    std::vector<uint8_t> v = bytes;
    v[c + 1] = 0;  // kDLInt
    v[c + 2] = 8;
    PutU64(v, c + 9, uint64_t{1} << 40);
    PutU64(v, c + 17, uint64_t{1} << 40);
    EXPECT_THAT(LoadError(v), HasSubstr("truncated: constant c[0] has 1099511627776 bytes of "
                                        "tensor data"));
  }
  // Other constants.
  ExecBuilder b2;
  b2.c(DataType::Float(32));
  b2.c(Device::cpu(0));
  b2.emit_function("main", 0);
  b2.emit_ret(b2.void_arg());
  b2.end_function("main");
  const std::vector<uint8_t> bytes2 = b2.get().save_to_bytes();
  const size_t c2 = SectionPayloads(bytes2)[2] + 8;
  std::vector<uint8_t> v = bytes2;
  v[c2 + 2] = 33;  // float33
  EXPECT_THAT(LoadError(v), HasSubstr("the dtype constant (code 2, bits 33, lanes 1) is not a "
                                      "supported data type"));
  v = bytes2;
  v[c2 + 9] = 0x80;  // the device type's high byte
  EXPECT_THAT(LoadError(v), HasSubstr("negative device type or id"));
}

TEST(VmExecutable, FunctionKindAndDuplicateNamesInBinary) {
  std::vector<uint8_t> bytes = Small().save_to_bytes();
  const size_t f = SectionPayloads(bytes)[1] + 8;
  std::vector<uint8_t> v = bytes;
  v[f] = 2;
  EXPECT_THAT(LoadError(v), HasSubstr("functions section at byte offset " + std::to_string(f) +
                                      ": unknown function kind 2"));
  // Rename "main" to "add": the second function's name starts after the first entry (52
  // bytes) + kind; its name bytes follow an 8-byte length.
  v = bytes;
  const size_t name = f + 52 + 1 + 8;
  ASSERT_EQ(
      std::string(v.begin() + static_cast<long>(name), v.begin() + static_cast<long>(name) + 4),
      "main");
  v[name] = 'a';
  v[name + 1] = 'd';
  v[name + 2] = 'd';
  v.erase(v.begin() + static_cast<long>(name) + 3);
  PutU64(v, name - 8, 3);
  PutU64(v, f - 8 - 8, GetU64(v, f - 8 - 8) - 1);  // the section size
  EXPECT_THAT(LoadError(v), HasSubstr("duplicate function name \"add\" (functions 0 and 1)"));
}

TEST(VmExecutable, InvalidProgramsInBinaryFailValidation) {
  std::vector<uint8_t> bytes = Small().save_to_bytes();
  const size_t code = SectionPayloads(bytes)[3];
  // instr_data[1] (the call's destination) := 9.
  const size_t data = code + 8 + 2 * 8 + 8;
  PutU64(bytes, data + 8, 9);
  EXPECT_EQ(LoadError(bytes),
            "invalid VM executable: function \"main\" instruction 0 (pc 0): destination register "
            "%9 is out of range (valid are %0..%1, %void and %vm)");
}

TEST(VmExecutable, MutatedAndRandomInputsNeverCrash) {
  const std::vector<uint8_t> bytes = Canonical().save_to_bytes();
  std::mt19937_64 rng(1234);
  int loaded = 0;
  // Every byte replaced by a few values.
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t value : {uint8_t{0}, uint8_t{1}, uint8_t{0x7f}, uint8_t{0xff},
                          static_cast<uint8_t>(bytes[i] ^ 0x80)}) {
      if (value == bytes[i]) continue;
      std::vector<uint8_t> v = bytes;
      v[i] = value;
      try {
        const Executable e = Executable::load_from_bytes(v);
        ++loaded;
        // Whatever loads is valid and round-trips.
        ASSERT_EQ(Executable::load_from_bytes(e.save_to_bytes()), e);
        ASSERT_EQ(Executable::from_text(e.as_text()).as_text(), e.as_text());
      } catch (const ValueError&) {
      }
    }
  }
  EXPECT_GT(loaded, 0) << "some mutations (tensor data, immediates) stay valid";
  // Random garbage, with and without the magic.
  for (int round = 0; round < 2000; ++round) {
    std::vector<uint8_t> v(rng() % 200);
    for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
    if (round % 2 == 0 && v.size() >= 16) std::copy(bytes.begin(), bytes.begin() + 16, v.begin());
    EXPECT_THROW(Executable::load_from_bytes(v), ValueError);
  }
}

TEST(VmExecutable, MutatedTextNeverCrashes) {
  const std::string text = kCanonical;
  std::mt19937_64 rng(99);
  const char alphabet[] = "%@[](){},:=\"\\#\n -0123456789icfx";
  for (int round = 0; round < 3000; ++round) {
    std::string t = text;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits; ++k) {
      const size_t at = rng() % t.size();
      switch (rng() % 3) {
        case 0:
          t[at] = alphabet[rng() % (sizeof(alphabet) - 1)];
          break;
        case 1:
          t.erase(at, 1 + rng() % 4);
          break;
        default:
          t.insert(at, 1, alphabet[rng() % (sizeof(alphabet) - 1)]);
      }
    }
    try {
      const Executable e = Executable::from_text(t, "m.kvmt");
      const std::string canonical = e.as_text();
      ASSERT_EQ(Executable::from_text(canonical).as_text(), canonical);
      ASSERT_EQ(Executable::load_from_bytes(e.save_to_bytes()), e);
    } catch (const ValueError& err) {
      ASSERT_THAT(err.what(), StartsWith("m.kvmt:"));
    }
  }
}

}  // namespace
}  // namespace kiln::vm
