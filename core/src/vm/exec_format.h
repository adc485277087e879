// SPDX-License-Identifier: Apache-2.0
// Private helpers shared by the executable's validation, its binary form and its text form
// (docs/vm.md): the structured result of checking an executable, so that the text assembler
// can point at the line and column of the offending word, and the spellings both the text form
// and stats() use.
#ifndef KILN_CORE_VM_EXEC_FORMAT_H_
#define KILN_CORE_VM_EXEC_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/vm/executable.h"

namespace kiln::vm::detail {

// The largest register file a VM function may declare (2^24 registers). Loading a file never
// allocates registers, but a VM allocates register_file_size slots per frame, so a hostile
// file must not be able to ask for more.
inline constexpr int64_t kMaxRegisterFileSize = int64_t{1} << 24;

// The first broken invariant of an executable, located.
struct Problem {
  enum class Where { kExecutable, kFunction, kInstruction, kConstant };
  Where where = Where::kExecutable;
  int64_t func = -1;      // index in func_table (kFunction, kInstruction when known)
  int64_t pc = -1;        // instruction index (kInstruction)
  int64_t word = -1;      // word within the instruction (kInstruction; -1: the whole instruction)
  int64_t constant = -1;  // constant index (kConstant)
  std::string message;    // what is wrong, without the location
};

// Checks every invariant validate() documents; nullopt when the executable is valid.
std::optional<Problem> find_problem(const Executable& exec);

// "function \"main\" instruction 3 (pc 7): <message>" and the like.
std::string describe(const Executable& exec, const Problem& problem);

// Whether `dtype` is one DataType::parse accepts (and prints back identically).
bool is_valid_dtype(DataType dtype);

// The number of words instruction `pc` takes, or -1 when its opcode or length is out of range
// of instr_data (used before the layout is known to be valid).
int64_t instruction_length(const Executable& exec, int64_t pc);

// Text spellings.
// A double that reads back bit for bit: the shortest decimal ("0.5", "1.0", "-0.0", "1e+300"),
// "inf", "-inf", "nan" (the default quiet NaN) or "nan:0x<16 hex digits>" (any other NaN).
std::string format_double(double value);
// `s` in double quotes with \\, \", \n, \t, \r and \xHH for every other byte outside 0x20..0x7e.
std::string quote(std::string_view s);
// Whether `c` may appear in a bare (unquoted) name or word of the text form.
inline bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '$' || c == '-' || c == '+';
}
// `name` bare when it is a non-empty run of word characters, else quoted.
std::string format_name(std::string_view name);
// "%3", "%void", "%vm".
std::string format_register(Word reg);
// An argument word: "%3", "i-5", "c[2]", "f[name]" ("f[?<index>]" for an index out of range).
std::string format_arg(const Executable& exec, Word word);
// "cpu:0"; a type without a registered name prints as "dev<code>:<id>".
std::string format_device(Device device);

}  // namespace kiln::vm::detail

#endif  // KILN_CORE_VM_EXEC_FORMAT_H_
