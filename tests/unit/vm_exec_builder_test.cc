// SPDX-License-Identifier: Apache-2.0
// ExecBuilder (SPEC.md §2.16, docs/vm.md): declaration rules, register formalization, the
// use-before-definition check, constant deduplication, and executables that validate and
// round-trip through both forms.
#include "kiln/vm/exec_builder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kiln/error.h"

namespace kiln::vm {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

void ExpectRoundTrips(const Executable& e) {
  EXPECT_EQ(Executable::load_from_bytes(e.save_to_bytes()), e);
  const std::string text = e.as_text();
  EXPECT_EQ(Executable::from_text(text), e);
  EXPECT_EQ(Executable::from_text(text).as_text(), text);
}

TEST(VmExecBuilder, HeaderExampleBuildsTheReferenceProgram) {
  ExecBuilder b;
  b.declare_function("test.vm.add", FuncKind::kPackedFunc);
  b.emit_function("main", 2, {"x", "y"});
  b.emit_call("test.vm.add", {b.r(0), b.r(1)}, 2);
  b.emit_ret(b.r(2));
  b.end_function("main");
  const Executable e = b.get();
  EXPECT_EQ(e.as_text(),
            "kiln_vm 1\n"
            "\n"
            "packed_func @test.vm.add\n"
            "\n"
            "func @main(x, y) regs=3 {\n"
            "  call  test.vm.add      in: %0, %1       dst: %2\n"
            "  ret   %2\n"
            "}\n");
  ASSERT_EQ(e.func_table.size(), 2u);
  EXPECT_EQ(e.func_table[1].num_args, 2);
  EXPECT_EQ(e.func_table[1].register_file_size, 3);
  EXPECT_EQ(e.func_table[1].start_instr, 0);
  EXPECT_EQ(e.func_table[1].end_instr, 2);
  EXPECT_EQ(e.func_map.at("main"), 1);
  EXPECT_EQ(e.instr_data, (std::vector<Word>{1, 2, 0, 2, encode_arg(ArgKind::kRegister, 0),
                                             encode_arg(ArgKind::kRegister, 1), 2, 2}));
  EXPECT_EQ(e.instr_offset, (std::vector<Word>{0, 6}));
  ExpectRoundTrips(e);
}

// func0(x, y): a = add(x, y); b = add(a, x); ret b, with the given register numbers.
Executable Program(Word a, Word b_reg) {
  ExecBuilder b;
  b.emit_function("func0", 2);
  b.emit_call("test.vm.add", {b.r(0), b.r(1)}, a);
  b.emit_call("test.vm.add", {b.r(a), b.r(0)}, b_reg);
  b.emit_ret(b.r(b_reg));
  b.end_function("func0");
  return b.get();
}

TEST(VmExecBuilder, FormalizeRenumbersRegistersDensely) {
  const Executable x = Program(2, 3);
  const Executable y = Program(100, 7);
  const Executable z = Program(1000000, 42);
  EXPECT_EQ(x.as_text(), y.as_text());
  EXPECT_EQ(x, y);
  EXPECT_EQ(x, z);
  EXPECT_EQ(x.func_table[0].register_file_size, 4);
  EXPECT_THAT(y.as_text(), HasSubstr("in: %2, %0       dst: %3\n  ret   %3\n"));
  // Redefining a register reuses its number; parameters keep theirs (also as destinations).
  ExecBuilder b;
  b.emit_function("f", 1);
  b.emit_call("g", {b.r(0)}, 50);
  b.emit_call("g", {b.r(50)}, 50);
  b.emit_call("g", {b.r(50)}, 0);
  b.emit_call("g", {b.r(0), b.vm_state(), b.void_arg()}, kVoidRegister);
  b.emit_ret(b.r(0));
  b.end_function("f");
  const Executable e = b.get();
  EXPECT_EQ(e.func_table[0].register_file_size, 2);
  EXPECT_THAT(e.as_text(), HasSubstr("  call  g                in: %0           dst: %1\n"
                                     "  call  g                in: %1           dst: %1\n"
                                     "  call  g                in: %1           dst: %0\n"
                                     "  call  g                in: %0, %vm, %void dst: %void\n"));
  ExpectRoundTrips(e);
}

TEST(VmExecBuilder, CheckerRejectsUseBeforeDefinition) {
  ExecBuilder b;
  b.emit_function("func0", 1);
  b.emit_call("test.vm.add", {b.r(0), b.r(2)}, 3);
  b.emit_ret(b.r(3));
  b.end_function("func0");
  EXPECT_EQ(ErrorOf([&] { b.get(); }),
            "register r(2) in VM function \"func0\" is used as input while it is never defined "
            "as a destination");
  // In ret and if too; program order counts (a later definition does not help).
  ExecBuilder r;
  r.emit_function("f", 0);
  r.emit_ret(r.r(5));
  r.end_function("f");
  EXPECT_THAT(ErrorOf([&] { r.get(); }), HasSubstr("register r(5) in VM function \"f\""));
  ExecBuilder i;
  i.emit_function("f", 0);
  i.emit_if(i.r(1), 2);
  i.emit_call("g", {}, 1);
  i.emit_ret(i.r(1));
  i.end_function("f");
  EXPECT_THAT(ErrorOf([&] { i.get(); }), HasSubstr("register r(1) in VM function \"f\" is used"));
  ExecBuilder self;
  self.emit_function("f", 0);
  self.emit_call("g", {self.r(1)}, 1);
  self.emit_ret(self.r(1));
  self.end_function("f");
  EXPECT_THAT(ErrorOf([&] { self.get(); }), HasSubstr("register r(1) in VM function \"f\""));
  ExecBuilder neg;
  neg.emit_function("f", 0);
  neg.emit_call("g", {}, -4);
  neg.emit_ret(neg.void_arg());
  neg.end_function("f");
  EXPECT_THAT(ErrorOf([&] { neg.get(); }),
              HasSubstr("register r(-4) in VM function \"f\" is not a valid register"));
}

TEST(VmExecBuilder, ConstantsAreDeduplicatedAndSmallIntsAreImmediates) {
  ExecBuilder b;
  EXPECT_EQ(b.c(int64_t{-3}).word, encode_arg(ArgKind::kImmediate, -3));
  EXPECT_EQ(b.c(kMaxArgValue).word, encode_arg(ArgKind::kImmediate, kMaxArgValue));
  const Word big = b.c(kMaxArgValue + 1).word;
  EXPECT_EQ(big, encode_arg(ArgKind::kConstIdx, 0));
  EXPECT_EQ(b.c(-kMaxArgValue - 1).word, encode_arg(ArgKind::kConstIdx, 1));
  EXPECT_EQ(b.c(kMaxArgValue + 1).word, big);
  const Word s = b.c(std::string("hello")).word;
  EXPECT_EQ(b.c(std::string("hello")).word, s);
  EXPECT_NE(b.c(std::string("world")).word, s);
  const Word shape = b.c(ShapeConstant{{2, 3}}).word;
  EXPECT_EQ(b.c(ShapeConstant{{2, 3}}).word, shape);
  EXPECT_NE(b.c(ShapeConstant{{3, 2}}).word, shape);
  Tensor t1 = Tensor::empty({2}, DataType::Float(32));
  Tensor t2 = Tensor::empty({2}, DataType::Float(32));
  t1.host_span<float>()[0] = t2.host_span<float>()[0] = 1.5f;
  t1.host_span<float>()[1] = t2.host_span<float>()[1] = -2.0f;
  const Word tw = b.c(t1).word;
  EXPECT_EQ(b.c(t2).word, tw) << "structurally equal tensors share a constant";
  t2.host_span<float>()[1] = 7.0f;
  EXPECT_NE(b.c(t2).word, tw);
  EXPECT_EQ(b.c(1.0).word, b.c(1.0).word);
  EXPECT_NE(b.c(0.0).word, b.c(-0.0).word);
  EXPECT_EQ(b.c(DataType::Int(8)).word, b.c(DataType::Int(8)).word);
  EXPECT_EQ(b.c(Device::cpu()).word, b.c(Device::cpu()).word);
  EXPECT_THROW(b.c(Tensor()), ValueError);
  b.emit_function("main", 0);
  b.emit_call("use", {b.c(std::string("hello")), b.c(t1), b.imm(-7)}, kVoidRegister);
  b.emit_ret(b.void_arg());
  b.end_function("main");
  const Executable e = b.get();
  EXPECT_EQ(e.constants.size(), 13u);
  EXPECT_THAT(e.as_text(), HasSubstr("in: c[2], c[6], i-7 dst: %void"));
  ExpectRoundTrips(e);
}

TEST(VmExecBuilder, DeclarationRules) {
  ExecBuilder b;
  b.declare_function("p", FuncKind::kPackedFunc);
  b.declare_function("p", FuncKind::kPackedFunc);  // idempotent
  EXPECT_EQ(ErrorOf([&] { b.declare_function("p", FuncKind::kVMFunc); }),
            "Function p already declared in a different kind");
  EXPECT_EQ(ErrorOf([&] { b.emit_function("p", 0); }),
            "Function p already declared in a different kind");
  EXPECT_THAT(ErrorOf([&] { b.declare_function("", FuncKind::kPackedFunc); }), HasSubstr("empty"));
  b.emit_function("f", 0);
  EXPECT_THAT(ErrorOf([&] { b.emit_function("g", 0); }),
              HasSubstr("cannot start function g: function f is not ended"));
  b.emit_ret(b.void_arg());
  EXPECT_THAT(ErrorOf([&] { b.end_function("g"); }),
              HasSubstr("end_function(\"g\"): the function being emitted is f"));
  EXPECT_THAT(ErrorOf([&] { b.get(); }), HasSubstr("function f is not ended"));
  b.end_function("f");
  EXPECT_EQ(ErrorOf([&] { b.emit_function("f", 0); }), "Function f already defined");
  EXPECT_THAT(ErrorOf([&] { b.end_function("f"); }), HasSubstr("no function is being emitted"));
  EXPECT_THAT(ErrorOf([&] { b.emit_call("p", {}); }), HasSubstr("emit_call: no function"));
  EXPECT_THAT(ErrorOf([&] { b.emit_ret(b.void_arg()); }), HasSubstr("emit_ret: no function"));
  EXPECT_THAT(ErrorOf([&] { b.emit_goto(1); }), HasSubstr("emit_goto: no function"));
  EXPECT_THAT(ErrorOf([&] { b.emit_if(b.r(0), 2); }), HasSubstr("emit_if: no function"));
  EXPECT_THAT(ErrorOf([&] { b.emit_function("h", -1); }), HasSubstr("num_args -1 is negative"));
  EXPECT_THAT(ErrorOf([&] { b.emit_function("h", 2, {"a"}); }),
              HasSubstr("1 param_names for 2 arguments"));
  b.emit_function("h", 1);
  EXPECT_THAT(ErrorOf([&] { b.emit_ret(b.imm(1)); }),
              HasSubstr("emit_ret takes a register operand"));
  EXPECT_THAT(ErrorOf([&] { b.emit_if(b.c(std::string("x")), 2); }),
              HasSubstr("emit_if takes a register operand"));
  b.emit_ret(b.r(0));
  b.end_function("h");
  EXPECT_NO_THROW(b.get());
  // An unknown callee (or f() operand) becomes a PackedFunc.
  ExecBuilder u;
  u.emit_function("main", 0);
  u.emit_call("new.packed", {u.f("other.packed")}, 0);
  u.emit_ret(u.r(0));
  u.end_function("main");
  const Executable e = u.get();
  ASSERT_EQ(e.func_table.size(), 3u);
  // The operand is evaluated before emit_call declares its callee.
  EXPECT_EQ(e.func_table[1].name, "other.packed");
  EXPECT_EQ(e.func_table[1].kind, FuncKind::kPackedFunc);
  EXPECT_EQ(e.func_table[2].name, "new.packed");
  EXPECT_EQ(e.func_table[2].kind, FuncKind::kPackedFunc);
  ExpectRoundTrips(e);
  // Calling a VM function defined later needs declaring it first.
  ExecBuilder late;
  late.emit_function("main", 0);
  late.emit_call("helper", {}, 0);
  late.emit_ret(late.r(0));
  late.end_function("main");
  EXPECT_EQ(ErrorOf([&] { late.emit_function("helper", 0); }),
            "Function helper already declared in a different kind");
}

TEST(VmExecBuilder, DeclaredVmFunctionsAreLaidOutInTableOrder) {
  ExecBuilder b;
  b.declare_function("helper", FuncKind::kVMFunc);
  b.emit_function("main", 1, {"x"});
  b.emit_call("helper", {b.r(0), b.f("helper")}, 5);
  b.emit_ret(b.r(5));
  b.end_function("main");
  b.emit_function("helper", 2);
  b.emit_ret(b.r(1));
  b.end_function("helper");
  const Executable e = b.get();
  ASSERT_EQ(e.func_table.size(), 2u);
  EXPECT_EQ(e.func_table[0].name, "helper");
  EXPECT_EQ(e.func_table[0].start_instr, 0);
  EXPECT_EQ(e.func_table[0].end_instr, 1);
  EXPECT_EQ(e.func_table[1].name, "main");
  EXPECT_EQ(e.func_table[1].start_instr, 1);
  EXPECT_EQ(e.func_table[1].end_instr, 3);
  EXPECT_EQ(e.instruction(1).func_idx, 0);
  EXPECT_EQ(e.instruction(1).args[1], encode_arg(ArgKind::kFuncIdx, 0));
  EXPECT_EQ(e.instruction(0).reg, 1);
  EXPECT_EQ(e.as_text(),
            "kiln_vm 1\n\n"
            "func @helper(%0, %1) regs=2 {\n"
            "  ret   %1\n"
            "}\n\n"
            "func @main(x) regs=2 {\n"
            "  call  helper           in: %0, f[helper] dst: %1\n"
            "  ret   %1\n"
            "}\n");
  ExpectRoundTrips(e);
  ExecBuilder never;
  never.declare_function("ghost", FuncKind::kVMFunc);
  EXPECT_EQ(ErrorOf([&] { never.get(); }), "VM function ghost is declared but never defined");
  ExecBuilder empty;
  empty.emit_function("e", 0);
  empty.end_function("e");
  EXPECT_EQ(ErrorOf([&] { empty.get(); }), "VM function e has no instructions");
}

TEST(VmExecBuilder, ControlFlowIsCheckedByValidate) {
  // f(c): if c { r1 = one() } else { r1 = two() }; ret r1
  ExecBuilder b;
  b.emit_function("f", 1, {"c"});
  b.emit_if(b.r(0), 3);
  b.emit_call("one", {}, 1);
  b.emit_goto(2);
  b.emit_call("two", {}, 1);
  b.emit_ret(b.r(1));
  b.end_function("f");
  const Executable e = b.get();
  EXPECT_THAT(e.as_text(), HasSubstr("  if    %0, 3\n  call  one              in:              "
                                     "dst: %1\n  goto  2\n"));
  ExpectRoundTrips(e);
  auto with_jump = [](Word goto_offset, Word if_offset) {
    ExecBuilder j;
    j.emit_function("f", 1);
    j.emit_if(j.r(0), if_offset);
    j.emit_goto(goto_offset);
    j.emit_ret(j.r(0));
    j.end_function("f");
    return ErrorOf([&] { j.get(); });
  };
  EXPECT_EQ(with_jump(1, 2), "");
  EXPECT_THAT(with_jump(0, 2), HasSubstr("goto offset 0 (must not be 0)"));
  EXPECT_THAT(with_jump(2, 2), HasSubstr("goto offset 2 lands outside the function"));
  EXPECT_THAT(with_jump(-2, 2), HasSubstr("goto offset -2 lands outside the function"));
  EXPECT_THAT(with_jump(1, 1), HasSubstr("if false offset 1 must be greater than 1"));
  EXPECT_THAT(with_jump(1, 3), HasSubstr("if false offset 3 lands outside the function"));
}

TEST(VmExecBuilder, ImportsAreRecordedOnce) {
  ExecBuilder b;
  b.add_import("libadd.so");
  b.add_import("libmul.so");
  b.add_import("libadd.so");
  const Executable e = b.get();
  EXPECT_EQ(e.imports, (std::vector<std::string>{"libadd.so", "libmul.so"}));
  EXPECT_EQ(e.as_text(), "kiln_vm 1\n\nimport \"libadd.so\"\nimport \"libmul.so\"\n");
  ExpectRoundTrips(e);
}

TEST(VmExecBuilder, OperandsEncodeTheirKinds) {
  EXPECT_EQ(ExecBuilder::r(3).word, encode_arg(ArgKind::kRegister, 3));
  EXPECT_EQ(ExecBuilder::vm_state().word, encode_arg(ArgKind::kRegister, kVMRegister));
  EXPECT_EQ(ExecBuilder::void_arg().word, encode_arg(ArgKind::kRegister, kVoidRegister));
  EXPECT_EQ(ExecBuilder::imm(-9).word, encode_arg(ArgKind::kImmediate, -9));
  EXPECT_THROW(ExecBuilder::imm(kMaxArgValue + 1), ValueError);
  ExecBuilder b;
  EXPECT_EQ(b.f("x").word, encode_arg(ArgKind::kFuncIdx, 0));
  EXPECT_EQ(b.f("y").word, encode_arg(ArgKind::kFuncIdx, 1));
  EXPECT_EQ(b.f("x").word, encode_arg(ArgKind::kFuncIdx, 0));
}

}  // namespace
}  // namespace kiln::vm
