// SPDX-License-Identifier: Apache-2.0
// The VM executable: argument encoding, constant equality, decoding, validation and
// statistics (docs/vm.md). The binary form is in binary_format.cc, the text form in
// text_format.cc.
#include "kiln/vm/executable.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "kiln/error.h"
#include "vm/exec_format.h"

namespace kiln::vm {

Word encode_arg(ArgKind kind, Word value) {
  if (value > kMaxArgValue || value < -kMaxArgValue) {
    throw ValueError(fmt::format(
        "argument value {} is out of range: an instruction argument holds a 56-bit signed value "
        "of magnitude at most {}",
        value, kMaxArgValue));
  }
  constexpr uint64_t kPayloadMask = (uint64_t{1} << 56) - 1;
  return static_cast<Word>((static_cast<uint64_t>(kind) << 56) |
                           (static_cast<uint64_t>(value) & kPayloadMask));
}

namespace {

bool tensors_equal(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.get() == b.get()) return true;
  if (a.dtype() != b.dtype() || !std::ranges::equal(a.shape(), b.shape())) return false;
  if (!a.is_contiguous() || !b.is_contiguous()) return false;
  const Tensor ha = a.device().type == kDLCPU ? a : a.to_host();
  const Tensor hb = b.device().type == kDLCPU ? b : b.to_host();
  const size_t n = ha.nbytes();
  return n == 0 || std::memcmp(ha.data(), hb.data(), n) == 0;
}

}  // namespace

bool constants_equal(const Constant& a, const Constant& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b);
        if constexpr (std::is_same_v<T, Tensor>) {
          return tensors_equal(x, y);
        } else if constexpr (std::is_same_v<T, double>) {
          // Bit for bit: NaN equals the same NaN, 0.0 differs from -0.0.
          return std::bit_cast<uint64_t>(x) == std::bit_cast<uint64_t>(y);
        } else {
          return x == y;
        }
      },
      a);
}

void Executable::rebuild_func_map() {
  std::map<std::string, int64_t> map;
  for (size_t i = 0; i < func_table.size(); ++i) {
    auto [it, inserted] = map.emplace(func_table[i].name, static_cast<int64_t>(i));
    if (!inserted) {
      throw ValueError(fmt::format("duplicate function name {} (functions {} and {})",
                                   detail::quote(func_table[i].name), it->second, i));
    }
  }
  func_map = std::move(map);
}

Instruction Executable::instruction(int64_t pc) const {
  const Word* w = instr_data.data() + instr_offset[static_cast<size_t>(pc)];
  Instruction in;
  in.op = static_cast<Opcode>(w[0]);
  switch (in.op) {
    case Opcode::kCall:
      in.dst = w[1];
      in.func_idx = w[2];
      in.args = std::span<const Word>(w + 4, static_cast<size_t>(w[3]));
      break;
    case Opcode::kRet:
      in.reg = w[1];
      break;
    case Opcode::kGoto:
      in.offset = w[1];
      break;
    case Opcode::kIf:
      in.reg = w[1];
      in.offset = w[2];
      break;
  }
  return in;
}

namespace detail {

bool is_valid_dtype(DataType dtype) {
  try {
    return DataType::parse(dtype.str()) == dtype;
  } catch (const ValueError&) {
    return false;
  }
}

int64_t instruction_length(const Executable& exec, int64_t pc) {
  const int64_t size = static_cast<int64_t>(exec.instr_data.size());
  const Word start = exec.instr_offset[static_cast<size_t>(pc)];
  if (start < 0 || start >= size) return -1;
  int64_t base = 0;
  switch (exec.instr_data[static_cast<size_t>(start)]) {
    case static_cast<Word>(Opcode::kCall):
      base = 4;
      break;
    case static_cast<Word>(Opcode::kRet):
    case static_cast<Word>(Opcode::kGoto):
      base = 2;
      break;
    case static_cast<Word>(Opcode::kIf):
      base = 3;
      break;
    default:
      return -1;
  }
  if (base > size - start) return -1;
  if (base == 4) {
    const Word n = exec.instr_data[static_cast<size_t>(start + 3)];
    if (n < 0 || n > size - start - 4) return -1;
    return 4 + n;
  }
  return base;
}

namespace {

const char* constant_kind(const Constant& c) {
  static constexpr const char* kNames[] = {"tensor", "shape", "string", "int",
                                           "float",  "dtype", "device"};
  return kNames[c.index()];
}

const char* opcode_name(Word op) {
  switch (op) {
    case static_cast<Word>(Opcode::kCall):
      return "call";
    case static_cast<Word>(Opcode::kRet):
      return "ret";
    case static_cast<Word>(Opcode::kGoto):
      return "goto";
    case static_cast<Word>(Opcode::kIf):
      return "if";
    default:
      return "?";
  }
}

class Checker {
 public:
  explicit Checker(const Executable& exec) : exec_(exec) {}

  std::optional<Problem> run() {
    if (auto p = check_functions()) return p;
    if (auto p = check_layout()) return p;
    for (int64_t pc = 0; pc < exec_.num_instructions(); ++pc) {
      if (auto p = check_instruction(pc)) return p;
    }
    return check_constants();
  }

 private:
  static Problem executable_problem(std::string message) {
    Problem p;
    p.where = Problem::Where::kExecutable;
    p.message = std::move(message);
    return p;
  }
  static Problem function_problem(size_t func, std::string message) {
    Problem p;
    p.where = Problem::Where::kFunction;
    p.func = static_cast<int64_t>(func);
    p.message = std::move(message);
    return p;
  }
  Problem instruction_problem(int64_t pc, int64_t word, std::string message) const {
    Problem p;
    p.where = Problem::Where::kInstruction;
    p.pc = pc;
    p.word = word;
    if (static_cast<size_t>(pc) < owner_.size()) p.func = owner_[static_cast<size_t>(pc)];
    p.message = std::move(message);
    return p;
  }

  std::optional<Problem> check_functions() {
    const int64_t num_instr = exec_.num_instructions();
    std::map<std::string_view, size_t> seen;
    int64_t next = 0;  // where the next VM function must start
    for (size_t i = 0; i < exec_.func_table.size(); ++i) {
      const FuncInfo& f = exec_.func_table[i];
      if (f.kind != FuncKind::kPackedFunc && f.kind != FuncKind::kVMFunc) {
        return function_problem(i,
                                fmt::format("unknown function kind {} (0: PackedFunc, 1: VMFunc)",
                                            static_cast<int32_t>(f.kind)));
      }
      if (f.name.empty()) return function_problem(i, "the function name is empty");
      auto [it, inserted] = seen.emplace(f.name, i);
      if (!inserted) {
        return function_problem(i, fmt::format("the name is also function {}'s", it->second));
      }
      if (f.kind == FuncKind::kPackedFunc) {
        if (f.start_instr != 0 || f.end_instr != 0 || f.num_args != 0 ||
            f.register_file_size != 0 || !f.param_names.empty()) {
          return function_problem(
              i, fmt::format("a PackedFunc entry must have start_instr, end_instr, num_args and "
                             "register_file_size 0 and no param_names (found {}, {}, {}, {} and "
                             "{} param_names)",
                             f.start_instr, f.end_instr, f.num_args, f.register_file_size,
                             f.param_names.size()));
        }
        continue;
      }
      if (f.num_args < 0) {
        return function_problem(i, fmt::format("num_args {} is negative", f.num_args));
      }
      if (f.register_file_size < f.num_args) {
        return function_problem(i, fmt::format("register_file_size {} is less than num_args {}",
                                               f.register_file_size, f.num_args));
      }
      if (f.register_file_size > kMaxRegisterFileSize) {
        return function_problem(i, fmt::format("register_file_size {} exceeds the limit {}",
                                               f.register_file_size, kMaxRegisterFileSize));
      }
      if (!f.param_names.empty() && static_cast<int64_t>(f.param_names.size()) != f.num_args) {
        return function_problem(i, fmt::format("{} param_names for num_args {} (give one name per "
                                               "parameter or none)",
                                               f.param_names.size(), f.num_args));
      }
      if (f.start_instr >= f.end_instr) {
        return function_problem(i, fmt::format("no instructions (start_instr {}, end_instr {})",
                                               f.start_instr, f.end_instr));
      }
      if (f.start_instr != next) {
        return function_problem(
            i, fmt::format("instructions [{}, {}) do not start at pc {}, where the previous VM "
                           "function's end (the VM functions' ranges must cover the code in "
                           "table order)",
                           f.start_instr, f.end_instr, next));
      }
      if (f.end_instr > num_instr) {
        return function_problem(i, fmt::format("end_instr {} is past the end of the code ({} "
                                               "instructions)",
                                               f.end_instr, num_instr));
      }
      next = f.end_instr;
    }
    if (next != num_instr) {
      return executable_problem(
          fmt::format("instructions from pc {} to {} belong to no VM function", next, num_instr));
    }
    if (exec_.func_map.size() != exec_.func_table.size()) {
      return executable_problem(
          fmt::format("func_map has {} entries for {} functions (call rebuild_func_map())",
                      exec_.func_map.size(), exec_.func_table.size()));
    }
    for (const auto& [name, index] : exec_.func_map) {
      if (index < 0 || static_cast<size_t>(index) >= exec_.func_table.size() ||
          exec_.func_table[static_cast<size_t>(index)].name != name) {
        return executable_problem(
            fmt::format("func_map maps {} to {}, which is not that function's index (call "
                        "rebuild_func_map())",
                        quote(name), index));
      }
    }
    // Every instruction belongs to exactly one VM function now.
    owner_.assign(static_cast<size_t>(num_instr), -1);
    for (size_t i = 0; i < exec_.func_table.size(); ++i) {
      const FuncInfo& f = exec_.func_table[i];
      if (f.kind != FuncKind::kVMFunc) continue;
      for (int64_t pc = f.start_instr; pc < f.end_instr; ++pc) {
        owner_[static_cast<size_t>(pc)] = static_cast<int64_t>(i);
      }
    }
    return std::nullopt;
  }

  std::optional<Problem> check_layout() {
    const int64_t size = static_cast<int64_t>(exec_.instr_data.size());
    int64_t expected = 0;
    for (int64_t pc = 0; pc < exec_.num_instructions(); ++pc) {
      const Word start = exec_.instr_offset[static_cast<size_t>(pc)];
      if (start != expected) {
        return instruction_problem(
            pc, -1,
            fmt::format("starts at word {}, expected {} (instructions are stored back to back "
                        "from word 0)",
                        start, expected));
      }
      if (start >= size) {
        return instruction_problem(
            pc, -1,
            fmt::format("starts at word {}, past the end of instr_data ({} words)", start, size));
      }
      const Word op = exec_.instr_data[static_cast<size_t>(start)];
      const int64_t length = instruction_length(exec_, pc);
      if (length < 0) {
        if (std::string_view(opcode_name(op)) == "?") {
          return instruction_problem(
              pc, 0, fmt::format("unknown opcode {} (1 call, 2 ret, 3 goto, 4 if)", op));
        }
        if (op == static_cast<Word>(Opcode::kCall) && size - start >= 4) {
          const Word n = exec_.instr_data[static_cast<size_t>(start + 3)];
          return instruction_problem(
              pc, 3,
              fmt::format("call with {} arguments, but {} words remain in instr_data after its "
                          "4-word head",
                          n, size - start - 4));
        }
        return instruction_problem(
            pc, -1,
            fmt::format("{} runs past the end of instr_data ({} words)", opcode_name(op), size));
      }
      expected = start + length;
    }
    if (expected != size) {
      return executable_problem(
          fmt::format("instr_data has {} words after the last instruction's end (word {})",
                      size - expected, expected));
    }
    return std::nullopt;
  }

  std::string register_range(int64_t rfs) const {
    return rfs == 0 ? std::string("the function has no registers; only %void and %vm are valid")
                    : fmt::format("valid are %0..%{}, %void and %vm", rfs - 1);
  }

  std::optional<Problem> check_instruction(int64_t pc) const {
    const FuncInfo& f = exec_.func_table[static_cast<size_t>(owner_[static_cast<size_t>(pc)])];
    const int64_t rfs = f.register_file_size;
    auto reg_ok = [&](Word r) {
      return (r >= 0 && r < rfs) || r == kVoidRegister || r == kVMRegister;
    };
    auto bad_reg = [&](int64_t word, const char* what, Word r) {
      return instruction_problem(
          pc, word,
          fmt::format("{} register {} is out of range ({})", what,
                      r >= 0 && r < kBeginSpecialReg ? format_register(r) : std::to_string(r),
                      register_range(rfs)));
    };
    // The next instruction (fall through, If's true branch) must be inside the function.
    auto falls_out = [&]() { return pc + 1 >= f.end_instr; };
    auto target_ok = [&](Word offset) {
      // pc, start and end are at most the number of instructions: no overflow.
      return offset >= f.start_instr - pc && offset < f.end_instr - pc;
    };
    auto bad_target = [&](int64_t word, const char* what, Word offset) {
      return instruction_problem(
          pc, word,
          fmt::format("{} offset {} lands outside the function (pc {} + {} is not in [{}, {}))",
                      what, offset, pc, offset, f.start_instr, f.end_instr));
    };
    const Instruction in = exec_.instruction(pc);
    switch (in.op) {
      case Opcode::kCall: {
        if (!reg_ok(in.dst)) return bad_reg(1, "destination", in.dst);
        const int64_t num_funcs = static_cast<int64_t>(exec_.func_table.size());
        if (in.func_idx < 0 || in.func_idx >= num_funcs) {
          return instruction_problem(pc, 2,
                                     fmt::format("callee function index {} is out of range ({} "
                                                 "functions)",
                                                 in.func_idx, num_funcs));
        }
        for (size_t j = 0; j < in.args.size(); ++j) {
          const int64_t word = 4 + static_cast<int64_t>(j);
          const Word a = in.args[j];
          const Word v = arg_value(a);
          if (v < -kMaxArgValue) {
            return instruction_problem(
                pc, word, fmt::format("argument {} has the out-of-range value {}", j, v));
          }
          switch (arg_kind(a)) {
            case ArgKind::kRegister:
              if (!reg_ok(v)) return bad_reg(word, fmt::format("argument {}", j).c_str(), v);
              break;
            case ArgKind::kImmediate:
              break;
            case ArgKind::kConstIdx:
              if (v < 0 || static_cast<size_t>(v) >= exec_.constants.size()) {
                return instruction_problem(
                    pc, word,
                    fmt::format("argument {}: constant index {} is out of range ({} constants)", j,
                                v, exec_.constants.size()));
              }
              break;
            case ArgKind::kFuncIdx:
              if (v < 0 || v >= num_funcs) {
                return instruction_problem(
                    pc, word,
                    fmt::format("argument {}: function index {} is out of range ({} functions)", j,
                                v, num_funcs));
              }
              break;
            default:
              return instruction_problem(
                  pc, word,
                  fmt::format("argument {} has the unknown kind {} (0 register, 1 immediate, 2 "
                              "constant, 3 function)",
                              j, static_cast<int>(arg_kind(a))));
          }
        }
        if (falls_out()) {
          return instruction_problem(pc, -1,
                                     "call falls through past the end of the function (a "
                                     "function's last instruction must be ret or goto)");
        }
        break;
      }
      case Opcode::kRet:
        if (!reg_ok(in.reg)) return bad_reg(1, "result", in.reg);
        break;
      case Opcode::kGoto:
        if (in.offset == 0) return instruction_problem(pc, 1, "goto offset 0 (must not be 0)");
        if (!target_ok(in.offset)) return bad_target(1, "goto", in.offset);
        break;
      case Opcode::kIf:
        if (!reg_ok(in.reg)) return bad_reg(1, "condition", in.reg);
        if (in.offset <= 1) {
          return instruction_problem(
              pc, 2, fmt::format("if false offset {} must be greater than 1", in.offset));
        }
        if (!target_ok(in.offset)) return bad_target(2, "if false", in.offset);
        if (falls_out()) {
          return instruction_problem(pc, -1,
                                     "if is the function's last instruction: its true branch "
                                     "falls past the end of the function");
        }
        break;
    }
    return std::nullopt;
  }

  std::optional<Problem> check_constants() const {
    for (size_t i = 0; i < exec_.constants.size(); ++i) {
      auto fail = [&](std::string message) {
        Problem p;
        p.where = Problem::Where::kConstant;
        p.constant = static_cast<int64_t>(i);
        p.message = std::move(message);
        return p;
      };
      const Constant& c = exec_.constants[i];
      if (const Tensor* t = std::get_if<Tensor>(&c)) {
        if (!t->defined()) return fail("the tensor is undefined");
        if (t->device().type != kDLCPU) {
          return fail(fmt::format("the tensor is on {}; tensor constants live on the CPU",
                                  t->device().str()));
        }
        if (!is_valid_dtype(t->dtype())) {
          return fail(fmt::format("unsupported tensor dtype {}", t->dtype().str()));
        }
        if (!t->is_contiguous()) return fail("the tensor is not contiguous");
      } else if (const DataType* d = std::get_if<DataType>(&c)) {
        if (!is_valid_dtype(*d)) {
          return fail(fmt::format("not a valid data type (code {}, bits {}, lanes {})", d->code,
                                  d->bits, d->lanes));
        }
      } else if (const Device* dev = std::get_if<Device>(&c)) {
        if (dev->type < 0 || dev->id < 0) {
          return fail(
              fmt::format("negative device type or id (type {}, id {})", dev->type, dev->id));
        }
      }
    }
    return std::nullopt;
  }

  const Executable& exec_;
  std::vector<int64_t> owner_;  // pc -> function index
};

}  // namespace

std::optional<Problem> find_problem(const Executable& exec) { return Checker(exec).run(); }

std::string describe(const Executable& exec, const Problem& problem) {
  std::string where;
  auto func_name = [&](int64_t i) {
    return i >= 0 && static_cast<size_t>(i) < exec.func_table.size()
               ? quote(exec.func_table[static_cast<size_t>(i)].name)
               : std::string("?");
  };
  switch (problem.where) {
    case Problem::Where::kExecutable:
      break;
    case Problem::Where::kFunction:
      where = fmt::format("function {} ({}): ", problem.func, func_name(problem.func));
      break;
    case Problem::Where::kInstruction:
      if (problem.func >= 0) {
        const FuncInfo& f = exec.func_table[static_cast<size_t>(problem.func)];
        where = fmt::format("function {} instruction {} (pc {}): ", quote(f.name),
                            problem.pc - f.start_instr, problem.pc);
      } else {
        where = fmt::format("instruction at pc {}: ", problem.pc);
      }
      break;
    case Problem::Where::kConstant:
      where = fmt::format("constant c[{}] ({}): ", problem.constant,
                          constant_kind(exec.constants[static_cast<size_t>(problem.constant)]));
      break;
  }
  return "invalid VM executable: " + where + problem.message;
}

std::string format_double(double value) {
  if (std::isnan(value)) {
    const uint64_t bits = std::bit_cast<uint64_t>(value);
    if (bits == std::bit_cast<uint64_t>(std::numeric_limits<double>::quiet_NaN())) return "nan";
    return fmt::format("nan:0x{:016x}", bits);
  }
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string quote(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out += ch;
        } else {
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        }
    }
  }
  return out + "\"";
}

std::string format_name(std::string_view name) {
  if (!name.empty() && std::all_of(name.begin(), name.end(), is_word_char)) {
    return std::string(name);
  }
  return quote(name);
}

std::string format_register(Word reg) {
  if (reg == kVoidRegister) return "%void";
  if (reg == kVMRegister) return "%vm";
  return "%" + std::to_string(reg);
}

std::string format_arg(const Executable& exec, Word word) {
  const Word v = arg_value(word);
  switch (arg_kind(word)) {
    case ArgKind::kRegister:
      return format_register(v);
    case ArgKind::kImmediate:
      return "i" + std::to_string(v);
    case ArgKind::kConstIdx:
      return fmt::format("c[{}]", v);
    case ArgKind::kFuncIdx:
      if (v >= 0 && static_cast<size_t>(v) < exec.func_table.size()) {
        return "f[" + format_name(exec.func_table[static_cast<size_t>(v)].name) + "]";
      }
      return fmt::format("f[?{}]", v);
  }
  return fmt::format("?{}", word);
}

std::string format_device(Device device) {
  if (std::optional<std::string> name = DeviceTypeNames::builtin().name_of(device.type)) {
    if (!name->empty() && std::all_of(name->begin(), name->end(), [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_';
        })) {
      return fmt::format("{}:{}", *name, device.id);
    }
  }
  return fmt::format("dev{}:{}", device.type, device.id);
}

}  // namespace detail

void Executable::validate() const {
  if (std::optional<detail::Problem> problem = detail::find_problem(*this)) {
    throw ValueError(detail::describe(*this, *problem));
  }
}

std::string Executable::stats() const {
  std::vector<std::string> items;
  items.reserve(constants.size());
  for (const Constant& c : constants) {
    items.push_back(std::visit(
        [](const auto& x) -> std::string {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, Tensor>) {
            if (!x.defined()) return "undefined";
            if (x.ndim() == 0) return "scalar";
            return fmt::format("[{}]", fmt::join(x.shape(), ", "));
          } else if constexpr (std::is_same_v<T, ShapeConstant>) {
            return fmt::format("shapetuple[{}]", fmt::join(x.dims, ", "));
          } else if constexpr (std::is_same_v<T, std::string>) {
            return detail::quote(x);
          } else if constexpr (std::is_same_v<T, int64_t>) {
            return std::to_string(x);
          } else if constexpr (std::is_same_v<T, double>) {
            return detail::format_double(x);
          } else if constexpr (std::is_same_v<T, DataType>) {
            return x.str();
          } else {
            return detail::format_device(x);
          }
        },
        c));
  }
  std::vector<std::string> names;
  names.reserve(func_table.size());
  for (const FuncInfo& f : func_table) names.push_back(f.name);
  return fmt::format(
      "Kiln VM executable statistics:\n  Constant pool (# {}): [{}]\n  Globals (#{}): [{}]\n",
      constants.size(), fmt::join(items, ", "), func_table.size(), fmt::join(names, ", "));
}

bool Executable::operator==(const Executable& other) const {
  if (func_table != other.func_table || instr_offset != other.instr_offset ||
      instr_data != other.instr_data || imports != other.imports ||
      constants.size() != other.constants.size()) {
    return false;
  }
  for (size_t i = 0; i < constants.size(); ++i) {
    if (!constants_equal(constants[i], other.constants[i])) return false;
  }
  return true;
}

}  // namespace kiln::vm
