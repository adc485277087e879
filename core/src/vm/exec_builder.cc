// SPDX-License-Identifier: Apache-2.0
// ExecBuilder (SPEC.md §2.16, docs/vm.md "ExecBuilder"): emits functions and instructions with
// user-chosen registers, then formalizes the registers and checks the program in get().
#include "kiln/vm/exec_builder.h"

#include <fmt/format.h>

#include <unordered_map>
#include <utility>

#include "kiln/error.h"
#include "vm/exec_format.h"

namespace kiln::vm {
namespace {

// A VM function declared with declare_function but not yet defined has start_instr -1.
constexpr int64_t kUndefined = -1;

bool is_special(Word r) { return r == kVoidRegister || r == kVMRegister; }

}  // namespace

ExecBuilder::Operand ExecBuilder::c(Constant value) {
  if (const int64_t* i = std::get_if<int64_t>(&value)) {
    if (*i >= -kMaxArgValue && *i <= kMaxArgValue) return imm(*i);
  }
  if (Tensor* t = std::get_if<Tensor>(&value)) {
    if (!t->defined()) throw ValueError("ExecBuilder::c: the tensor constant is undefined");
    // Constants live on the host.
    if (t->device().type != kDLCPU) *t = t->to_host();
  }
  for (size_t i = 0; i < exec_.constants.size(); ++i) {
    if (constants_equal(exec_.constants[i], value)) {
      return {encode_arg(ArgKind::kConstIdx, static_cast<Word>(i))};
    }
  }
  exec_.constants.push_back(std::move(value));
  return {encode_arg(ArgKind::kConstIdx, static_cast<Word>(exec_.constants.size() - 1))};
}

ExecBuilder::Operand ExecBuilder::f(const std::string& name) {
  auto it = exec_.func_map.find(name);
  if (it == exec_.func_map.end()) {
    declare_function(name, FuncKind::kPackedFunc);
    it = exec_.func_map.find(name);
  }
  return {encode_arg(ArgKind::kFuncIdx, it->second)};
}

void ExecBuilder::declare_function(const std::string& name, FuncKind kind) {
  if (kind != FuncKind::kPackedFunc && kind != FuncKind::kVMFunc) {
    throw ValueError(fmt::format("cannot declare function {}: unknown kind {}", name,
                                 static_cast<int32_t>(kind)));
  }
  if (name.empty()) throw ValueError("cannot declare a function with an empty name");
  if (auto it = exec_.func_map.find(name); it != exec_.func_map.end()) {
    if (exec_.func_table[static_cast<size_t>(it->second)].kind != kind) {
      throw ValueError("Function " + name + " already declared in a different kind");
    }
    return;
  }
  FuncInfo info;
  info.kind = kind;
  info.name = name;
  if (kind == FuncKind::kVMFunc) info.start_instr = info.end_instr = kUndefined;
  exec_.func_map.emplace(name, static_cast<int64_t>(exec_.func_table.size()));
  exec_.func_table.push_back(std::move(info));
}

void ExecBuilder::emit_function(const std::string& name, int64_t num_args,
                                std::vector<std::string> param_names) {
  if (current_) {
    throw ValueError(fmt::format(
        "cannot start function {}: function {} is not ended (call end_function(\"{}\"))", name,
        *current_, *current_));
  }
  if (num_args < 0) {
    throw ValueError(fmt::format("function {}: num_args {} is negative", name, num_args));
  }
  if (!param_names.empty() && static_cast<int64_t>(param_names.size()) != num_args) {
    throw ValueError(
        fmt::format("function {}: {} param_names for {} arguments (give one name "
                    "per parameter or none)",
                    name, param_names.size(), num_args));
  }
  declare_function(name, FuncKind::kVMFunc);
  FuncInfo& info = exec_.func_table[static_cast<size_t>(exec_.func_map.at(name))];
  if (info.start_instr != kUndefined) throw ValueError("Function " + name + " already defined");
  info.start_instr = info.end_instr = exec_.num_instructions();
  info.num_args = num_args;
  info.param_names = std::move(param_names);
  current_ = name;
}

namespace {

[[noreturn]] void no_function(const char* what) {
  throw ValueError(
      fmt::format("{}: no function is being emitted (call emit_function first)", what));
}

}  // namespace

void ExecBuilder::emit_call(const std::string& callee, std::vector<Operand> args, Word dst) {
  if (!current_) no_function("emit_call");
  const Word func_idx = arg_value(f(callee).word);
  exec_.instr_offset.push_back(static_cast<Word>(exec_.instr_data.size()));
  exec_.instr_data.push_back(static_cast<Word>(Opcode::kCall));
  exec_.instr_data.push_back(dst);
  exec_.instr_data.push_back(func_idx);
  exec_.instr_data.push_back(static_cast<Word>(args.size()));
  for (const Operand& a : args) exec_.instr_data.push_back(a.word);
}

namespace {

Word register_of(const ExecBuilder::Operand& operand, const char* what) {
  if (arg_kind(operand.word) != ArgKind::kRegister) {
    throw ValueError(
        fmt::format("{} takes a register operand (ExecBuilder::r(k)), got an "
                    "argument of kind {}",
                    what, static_cast<int>(arg_kind(operand.word))));
  }
  return arg_value(operand.word);
}

}  // namespace

void ExecBuilder::emit_ret(Operand result) {
  if (!current_) no_function("emit_ret");
  const Word reg = register_of(result, "emit_ret");
  exec_.instr_offset.push_back(static_cast<Word>(exec_.instr_data.size()));
  exec_.instr_data.push_back(static_cast<Word>(Opcode::kRet));
  exec_.instr_data.push_back(reg);
}

void ExecBuilder::emit_goto(Word pc_offset) {
  if (!current_) no_function("emit_goto");
  exec_.instr_offset.push_back(static_cast<Word>(exec_.instr_data.size()));
  exec_.instr_data.push_back(static_cast<Word>(Opcode::kGoto));
  exec_.instr_data.push_back(pc_offset);
}

void ExecBuilder::emit_if(Operand cond, Word false_offset) {
  if (!current_) no_function("emit_if");
  const Word reg = register_of(cond, "emit_if");
  exec_.instr_offset.push_back(static_cast<Word>(exec_.instr_data.size()));
  exec_.instr_data.push_back(static_cast<Word>(Opcode::kIf));
  exec_.instr_data.push_back(reg);
  exec_.instr_data.push_back(false_offset);
}

void ExecBuilder::end_function(const std::string& name) {
  if (!current_) {
    throw ValueError(fmt::format("end_function(\"{}\"): no function is being emitted", name));
  }
  if (*current_ != name) {
    throw ValueError(
        fmt::format("end_function(\"{}\"): the function being emitted is {}", name, *current_));
  }
  exec_.func_table[static_cast<size_t>(exec_.func_map.at(name))].end_instr =
      exec_.num_instructions();
  current_.reset();
}

void ExecBuilder::add_import(const std::string& library) {
  for (const std::string& lib : exec_.imports) {
    if (lib == library) return;
  }
  exec_.imports.push_back(library);
}

namespace {

// Renumbers the registers of VM function `f` of `exec` (SPEC §2.16) and checks that every
// register is written before it is read.
void formalize(Executable& exec, FuncInfo& f) {
  std::unordered_map<Word, Word> renamed;
  Word next = f.num_args;
  auto check_index = [&](Word r) {
    if (r < 0 || r >= kBeginSpecialReg) {
      throw ValueError(
          fmt::format("register r({}) in VM function \"{}\" is not a valid register "
                      "(use an index below 2^54, vm_state() or void_arg())",
                      r, f.name));
    }
  };
  auto use = [&](Word r) -> Word {
    if (is_special(r)) return r;
    check_index(r);
    if (r < f.num_args) return r;
    const auto it = renamed.find(r);
    if (it == renamed.end()) {
      throw ValueError(
          fmt::format("register r({}) in VM function \"{}\" is used as input while "
                      "it is never defined as a destination",
                      r, f.name));
    }
    return it->second;
  };
  auto define = [&](Word r) -> Word {
    if (is_special(r)) return r;
    check_index(r);
    if (r < f.num_args) return r;
    const auto [it, inserted] = renamed.emplace(r, next);
    if (inserted) ++next;
    return it->second;
  };
  for (int64_t pc = f.start_instr; pc < f.end_instr; ++pc) {
    Word* w = exec.instr_data.data() + exec.instr_offset[static_cast<size_t>(pc)];
    switch (static_cast<Opcode>(w[0])) {
      case Opcode::kCall:
        for (Word j = 0; j < w[3]; ++j) {
          Word& a = w[4 + j];
          if (arg_kind(a) == ArgKind::kRegister)
            a = encode_arg(ArgKind::kRegister, use(arg_value(a)));
        }
        w[1] = define(w[1]);
        break;
      case Opcode::kRet:
      case Opcode::kIf:
        w[1] = use(w[1]);
        break;
      case Opcode::kGoto:
        break;
    }
  }
  f.register_file_size = next;
}

}  // namespace

Executable ExecBuilder::get() const {
  if (current_) {
    throw ValueError(
        fmt::format("function {} is not ended (call end_function(\"{}\"))", *current_, *current_));
  }
  Executable exec = exec_;
  // Lay the code out in function-table order (a function declared before an earlier-defined
  // one was emitted later): the executable's VM functions cover the code in table order.
  exec.instr_offset.clear();
  exec.instr_data.clear();
  for (FuncInfo& f : exec.func_table) {
    if (f.kind != FuncKind::kVMFunc) continue;
    if (f.start_instr == kUndefined) {
      throw ValueError(fmt::format("VM function {} is declared but never defined", f.name));
    }
    if (f.start_instr == f.end_instr) {
      throw ValueError(fmt::format("VM function {} has no instructions", f.name));
    }
    const int64_t start = exec.num_instructions();
    for (int64_t pc = f.start_instr; pc < f.end_instr; ++pc) {
      const size_t begin = static_cast<size_t>(exec_.instr_offset[static_cast<size_t>(pc)]);
      const size_t end = static_cast<size_t>(pc + 1) < exec_.instr_offset.size()
                             ? static_cast<size_t>(exec_.instr_offset[static_cast<size_t>(pc + 1)])
                             : exec_.instr_data.size();
      exec.instr_offset.push_back(static_cast<Word>(exec.instr_data.size()));
      exec.instr_data.insert(exec.instr_data.end(),
                             exec_.instr_data.begin() + static_cast<std::ptrdiff_t>(begin),
                             exec_.instr_data.begin() + static_cast<std::ptrdiff_t>(end));
    }
    f.start_instr = start;
    f.end_instr = exec.num_instructions();
    formalize(exec, f);
  }
  exec.rebuild_func_map();
  exec.validate();
  return exec;
}

}  // namespace kiln::vm
