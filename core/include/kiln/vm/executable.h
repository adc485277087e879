// SPDX-License-Identifier: Apache-2.0
// The bytecode VM's executable (SPEC.md §2.1, §2.2, §2.15; docs/vm.md): a function table,
// a constant pool, the flat instruction words, and the kernel libraries it imports. An
// Executable is plain data: it is built in C++ (ExecBuilder), assembled from the text form,
// or read from the binary form, and run by a VirtualMachine.
#ifndef KILN_VM_EXECUTABLE_H_
#define KILN_VM_EXECUTABLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/tensor.h"

namespace kiln::vm {

// One word of the instruction stream.
using Word = int64_t;

// The first word of each instruction.
enum class Opcode : Word {
  kCall = 1,  // [1, dst, func_idx, num_args, arg...]: dst = func_pool[func_idx](args...)
  kRet = 2,   // [2, result_reg]
  kGoto = 3,  // [3, pc_offset]: pc += pc_offset (in instructions; never 0)
  kIf = 4,    // [4, cond_reg, false_offset]: cond != 0 ? pc += 1 : pc += false_offset (> 1)
};

// What an argument word of a Call means: the top 8 bits of the word.
enum class ArgKind : uint8_t {
  kRegister = 0,   // the register `value` of the current frame
  kImmediate = 1,  // the integer `value`
  kConstIdx = 2,   // constants[value]
  kFuncIdx = 3,    // the function-pool entry `value`
};

// Registers at or above this index are special.
inline constexpr Word kBeginSpecialReg = Word{1} << 54;
// Reads as None; as a destination, the result is dropped.
inline constexpr Word kVoidRegister = kBeginSpecialReg;
// Reads as the VM context (an opaque pointer to the running VirtualMachine).
inline constexpr Word kVMRegister = kBeginSpecialReg + 1;
// The largest magnitude an argument value may have (56-bit signed).
inline constexpr Word kMaxArgValue = (Word{1} << 55) - 1;

// Argument word encoding: kind in the top 8 bits, value in the low 56 bits (sign-extended
// from bit 55 on decoding). `encode_arg` throws ValueError when |value| > kMaxArgValue.
Word encode_arg(ArgKind kind, Word value);
inline ArgKind arg_kind(Word word) {
  return static_cast<ArgKind>(static_cast<uint64_t>(word) >> 56);
}
inline Word arg_value(Word word) {
  // Shift left then arithmetic-shift right to sign-extend the 56-bit payload.
  return static_cast<Word>(static_cast<uint64_t>(word) << 8) >> 8;
}

// Kinds of function-table entries.
enum class FuncKind : int32_t {
  kPackedFunc = 0,  // resolved at VM init: the executable's imports, then the global registry
  kVMFunc = 1,      // bytecode interpreted by the VM
};

// One entry of the function table.
struct FuncInfo {
  FuncKind kind = FuncKind::kPackedFunc;
  std::string name;
  int64_t start_instr = 0;  // VMFunc: first instruction (index into instr_offset)
  int64_t end_instr = 0;    // VMFunc: one past the last instruction
  int64_t num_args = 0;
  int64_t register_file_size = 0;
  std::vector<std::string> param_names;  // may be empty
  bool operator==(const FuncInfo&) const = default;
};

// A shape constant (distinct from a 1-D int64 tensor).
struct ShapeConstant {
  std::vector<int64_t> dims;
  bool operator==(const ShapeConstant&) const = default;
};

// One constant-pool entry. Tensor constants live on the host (CPU) in an executable; a VM
// copies them to its first device at initialisation.
using Constant =
    std::variant<Tensor, ShapeConstant, std::string, int64_t, double, DataType, Device>;

// Structural equality of constants (tensors: dtype, shape and bytes).
bool constants_equal(const Constant& a, const Constant& b);

// A decoded view of one instruction (words borrowed from the executable).
struct Instruction {
  Opcode op;
  Word dst = kVoidRegister;    // Call
  Word func_idx = 0;           // Call
  std::span<const Word> args;  // Call
  Word reg = 0;                // Ret: result; If: condition
  Word offset = 0;             // Goto: pc offset; If: false offset
};

class Executable {
 public:
  std::vector<FuncInfo> func_table;
  std::map<std::string, int64_t> func_map;  // name -> index in func_table (see rebuild_func_map)
  std::vector<Constant> constants;
  std::vector<Word> instr_offset;  // start word of each instruction
  std::vector<Word> instr_data;    // the flat instruction words
  // Kernel libraries the PackedFunc entries resolve against, as file names ("libmatmul.so"):
  // relative to the executable file when loaded from disk, artifact names inside a package.
  std::vector<std::string> imports;

  // Rebuilds func_map from func_table. Throws ValueError on a duplicate name.
  void rebuild_func_map();
  // Decodes instruction `pc` (0 <= pc < instr_offset.size(); unchecked beyond what validate()
  // guarantees).
  Instruction instruction(int64_t pc) const;
  int64_t num_instructions() const { return static_cast<int64_t>(instr_offset.size()); }

  // Checks every invariant the VM relies on, so that running a validated executable never
  // reads out of bounds: function ranges inside the code, instruction words inside
  // instr_data, every register read or written < register_file_size or special, constant and
  // function indices in range, jumps landing inside their function, Goto offset != 0, If false
  // offset > 1, num_args <= register_file_size. Throws ValueError naming the function, the
  // instruction and the problem.
  void validate() const;

  // The binary form (docs/vm.md): little-endian, magic + version, sections. load_from_bytes
  // bounds-checks every count and length before allocating and validate()s the result; a
  // malformed or truncated input is a ValueError naming the section and offset.
  std::vector<uint8_t> save_to_bytes() const;
  static Executable load_from_bytes(std::span<const uint8_t> bytes);
  // Whether `bytes` start with the binary form's magic (the rest unchecked).
  static bool has_binary_magic(std::span<const uint8_t> bytes);

  // The text form (docs/vm.md). as_text() is canonical: from_text(as_text()) gives an equal
  // executable and as_text() of that is identical. from_text errors are ValueErrors of the
  // form "<source_name>:<line>:<column>: <message>".
  std::string as_text() const;
  static Executable from_text(std::string_view text, const std::string& source_name = "<text>");

  // Statistics in the shape of SPEC.md §2.15 stats().
  std::string stats() const;

  bool operator==(const Executable& other) const;
};

}  // namespace kiln::vm

#endif  // KILN_VM_EXECUTABLE_H_
