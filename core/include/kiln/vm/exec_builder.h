// SPDX-License-Identifier: Apache-2.0
// ExecBuilder: builds VM executables in C++ (SPEC.md §2.16), as tests and front ends do.
//
//   ExecBuilder b;
//   b.declare_function("test.vm.add", FuncKind::kPackedFunc);
//   b.emit_function("main", 2, {"x", "y"});
//   b.emit_call("test.vm.add", {b.r(0), b.r(1)}, 2);
//   b.emit_ret(b.r(2));
//   b.end_function("main");
//   Executable exec = b.get();
#ifndef KILN_VM_EXEC_BUILDER_H_
#define KILN_VM_EXEC_BUILDER_H_

#include <optional>
#include <string>
#include <vector>

#include "kiln/vm/executable.h"

namespace kiln::vm {

class ExecBuilder {
 public:
  // An operand: an encoded argument word.
  struct Operand {
    Word word;
  };

  // Register `index`; vm_state() is kVMRegister, void_arg() is kVoidRegister.
  static Operand r(Word index) { return {encode_arg(ArgKind::kRegister, index)}; }
  static Operand vm_state() { return {encode_arg(ArgKind::kRegister, kVMRegister)}; }
  static Operand void_arg() { return {encode_arg(ArgKind::kRegister, kVoidRegister)}; }
  static Operand imm(Word value) { return {encode_arg(ArgKind::kImmediate, value)}; }
  // A constant: integers within ±kMaxArgValue become immediates; other constants are
  // deduplicated structurally (the same string/shape/tensor gives the same index).
  Operand c(Constant value);
  // The function-table entry `name` (declared as a PackedFunc when unknown).
  Operand f(const std::string& name);

  // Declares `name` with `kind` (idempotent for the same kind). Throws ValueError
  // "Function <f> already declared in a different kind".
  void declare_function(const std::string& name, FuncKind kind);
  // Starts the VMFunc `name` taking `num_args` parameters (registers 0..num_args-1). Throws
  // ValueError "Function <f> already defined" when it was defined before.
  void emit_function(const std::string& name, int64_t num_args,
                     std::vector<std::string> param_names = {});
  // Instructions of the current function. `dst` = kVoidRegister drops the result; a callee
  // unknown so far is declared as a PackedFunc.
  void emit_call(const std::string& callee, std::vector<Operand> args, Word dst = kVoidRegister);
  void emit_ret(Operand result);
  void emit_goto(Word pc_offset);
  void emit_if(Operand cond, Word false_offset);
  // Ends the current function (must be `name`).
  void end_function(const std::string& name);
  // Records a kernel library the executable imports (a file name, see Executable::imports).
  void add_import(const std::string& library);

  // Formalizes registers (parameters keep 0..n-1; other destinations are renumbered densely
  // in order of first definition) and checks the program: every register read must have been
  // written earlier in program order ("register r(<k>) in VM function \"<f>\" is used as input
  // while it is never defined as a destination"), then Executable::validate(). Throws
  // ValueError.
  Executable get() const;

 private:
  Executable exec_;
  std::optional<std::string> current_;
};

}  // namespace kiln::vm

#endif  // KILN_VM_EXEC_BUILDER_H_
