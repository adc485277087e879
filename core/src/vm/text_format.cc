// SPDX-License-Identifier: Apache-2.0
// The text form of a VM executable (docs/vm.md "Text form"): the disassembler as_text(), which
// writes the canonical text, and the assembler from_text(), which reads it (and the same with
// other spacing and comments) and reports errors as "<source>:<line>:<column>: <message>".
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "kiln/error.h"
#include "kiln/vm/executable.h"
#include "vm/exec_format.h"

namespace kiln::vm {
namespace {

constexpr int64_t kTextVersion = 1;
constexpr const char* kHeaderWord = "kiln_vm";

// ---------------------------------------------------------------------------------------------
// Writing

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string shape_text(std::span<const int64_t> dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

std::string constant_text(const Constant& c) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Tensor>) {
          static constexpr char kHex[] = "0123456789abcdef";
          const uint8_t* p = static_cast<const uint8_t*>(x.data());
          std::string hex;
          hex.reserve(2 * x.nbytes());
          for (size_t i = 0; i < x.nbytes(); ++i) {
            hex += kHex[p[i] >> 4];
            hex += kHex[p[i] & 15];
          }
          return fmt::format("tensor {} {} hex\"{}\"", x.dtype().str(), shape_text(x.shape()), hex);
        } else if constexpr (std::is_same_v<T, ShapeConstant>) {
          return "shape " + shape_text(x.dims);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return "string " + detail::quote(x);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return "int " + std::to_string(x);
        } else if constexpr (std::is_same_v<T, double>) {
          return "float " + detail::format_double(x);
        } else if constexpr (std::is_same_v<T, DataType>) {
          return "dtype " + x.str();
        } else {
          return "device " + detail::format_device(x);
        }
      },
      c);
}

std::string instruction_text(const Executable& exec, int64_t pc) {
  const Instruction in = exec.instruction(pc);
  switch (in.op) {
    case Opcode::kCall: {
      std::vector<std::string> args;
      for (Word a : in.args) args.push_back(detail::format_arg(exec, a));
      return "  " + pad("call", 6) +
             pad(detail::format_name(exec.func_table[static_cast<size_t>(in.func_idx)].name), 16) +
             " in: " + pad(fmt::format("{}", fmt::join(args, ", ")), 12) +
             " dst: " + detail::format_register(in.dst);
    }
    case Opcode::kRet:
      return "  " + pad("ret", 6) + detail::format_register(in.reg);
    case Opcode::kGoto:
      return "  " + pad("goto", 6) + std::to_string(in.offset);
    case Opcode::kIf:
      return "  " + pad("if", 6) + detail::format_register(in.reg) + ", " +
             std::to_string(in.offset);
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Reading

struct Token {
  enum class Kind { kEnd, kNewline, kWord, kString, kPunct };
  Kind kind = Kind::kEnd;
  std::string text;  // a word; a string's decoded bytes; a punctuation character
  size_t pos = 0;    // byte offset in the source
};

bool is_punct_char(char c) {
  return c == '(' || c == ')' || c == '{' || c == '}' || c == '[' || c == ']' || c == ',' ||
         c == '=' || c == ':' || c == '@' || c == '%';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// One word of an instruction refers to something resolved after the whole text is read.
struct Fixup {
  enum class Kind { kCallee, kFuncArg, kConstArg };
  Kind kind;
  size_t word;       // index in instr_data
  std::string name;  // kCallee, kFuncArg
  int64_t index;     // kConstArg
  size_t pos;
};

class Parser {
 public:
  Parser(std::string_view text, const std::string& source) : text_(text), source_(source) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Executable parse() {
    lex();
    skip_newlines();
    const Token& head = peek();
    if (!is_word(head, kHeaderWord)) {
      fail(head.pos, fmt::format("expected the header '{} {}' (the first line of a Kiln VM text "
                                 "file), found {}",
                                 kHeaderWord, kTextVersion, describe(head)));
    }
    next();
    const Token& version_token = next();
    const int64_t version = parse_int(version_token, "the text form version");
    if (version != kTextVersion) {
      fail(version_token.pos, fmt::format("unsupported text form version {} (this build reads "
                                          "version {})",
                                          version, kTextVersion));
    }
    expect_end_of_line();
    while (true) {
      skip_newlines();
      const Token& t = peek();
      if (t.kind == Token::Kind::kEnd) break;
      if (is_word(t, "import")) {
        next();
        exec_.imports.push_back(expect_string("the import's library name"));
        expect_end_of_line();
      } else if (is_word(t, "const")) {
        parse_constant();
      } else if (is_word(t, "packed_func")) {
        parse_packed_func();
      } else if (is_word(t, "func")) {
        parse_function();
      } else {
        fail(t.pos, fmt::format("expected 'import', 'const', 'packed_func' or 'func', found {}",
                                describe(t)));
      }
    }
    resolve();
    check();
    return std::move(exec_);
  }

 private:
  // --- positions and errors

  [[noreturn]] void fail(size_t pos, const std::string& message) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    const size_t column = pos - line_starts_[line - 1] + 1;
    throw ValueError(fmt::format("{}:{}:{}: {}", source_, line, column, message));
  }
  std::string line_col(size_t pos) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return fmt::format("{}:{}", line, pos - line_starts_[line - 1] + 1);
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::kEnd:
        return "the end of the file";
      case Token::Kind::kNewline:
        return "the end of the line";
      case Token::Kind::kWord:
        return "'" + t.text + "'";
      case Token::Kind::kString:
        return "the string " + detail::quote(t.text.substr(0, 40)) +
               (t.text.size() > 40 ? "..." : "");
      case Token::Kind::kPunct:
        return "'" + t.text + "'";
    }
    return "?";
  }

  // --- lexing

  void lex() {
    size_t i = 0;
    const size_t n = text_.size();
    while (i < n) {
      const char c = text_[i];
      if (c == ' ' || c == '\t' || c == '\r') {
        ++i;
      } else if (c == '#') {
        while (i < n && text_[i] != '\n') ++i;
      } else if (c == '\n') {
        tokens_.push_back({Token::Kind::kNewline, "", i});
        ++i;
      } else if (c == '"') {
        i = lex_string(i);
      } else if (is_punct_char(c)) {
        tokens_.push_back({Token::Kind::kPunct, std::string(1, c), i});
        ++i;
      } else if (detail::is_word_char(c)) {
        const size_t start = i;
        while (i < n && detail::is_word_char(text_[i])) ++i;
        tokens_.push_back({Token::Kind::kWord, std::string(text_.substr(start, i - start)), start});
      } else {
        fail(i,
             fmt::format("unexpected character {}", detail::quote(std::string_view(&text_[i], 1))));
      }
    }
    tokens_.push_back({Token::Kind::kEnd, "", n});
  }

  size_t lex_string(size_t start) {
    std::string out;
    size_t i = start + 1;
    while (true) {
      if (i >= text_.size() || text_[i] == '\n') fail(start, "unterminated string");
      const char c = text_[i];
      if (c == '"') break;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= text_.size()) fail(start, "unterminated string");
      const char e = text_[i + 1];
      switch (e) {
        case '\\':
        case '"':
          out += e;
          i += 2;
          break;
        case 'n':
          out += '\n';
          i += 2;
          break;
        case 't':
          out += '\t';
          i += 2;
          break;
        case 'r':
          out += '\r';
          i += 2;
          break;
        case 'x': {
          const int hi = i + 2 < text_.size() ? hex_value(text_[i + 2]) : -1;
          const int lo = i + 3 < text_.size() ? hex_value(text_[i + 3]) : -1;
          if (hi < 0 || lo < 0) fail(i, "bad escape: \\x takes two hex digits");
          out += static_cast<char>(hi * 16 + lo);
          i += 4;
          break;
        }
        default:
          fail(i, "bad escape '\\" + std::string(1, e) +
                      "' in a string (use \\\\, \\\", \\n, \\t, \\r or \\xHH)");
      }
    }
    tokens_.push_back({Token::Kind::kString, std::move(out), start});
    return i + 1;
  }

  // --- token helpers

  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(index_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() {
    const Token& t = tokens_[index_];
    if (index_ + 1 < tokens_.size()) ++index_;
    return t;
  }
  static bool is_word(const Token& t, std::string_view w) {
    return t.kind == Token::Kind::kWord && t.text == w;
  }
  static bool is_punct(const Token& t, char c) {
    return t.kind == Token::Kind::kPunct && t.text[0] == c;
  }
  void skip_newlines() {
    while (peek().kind == Token::Kind::kNewline) next();
  }
  void expect_end_of_line() {
    const Token& t = peek();
    if (t.kind == Token::Kind::kEnd) return;
    if (t.kind != Token::Kind::kNewline) {
      fail(t.pos, fmt::format("expected the end of the line, found {}", describe(t)));
    }
    next();
  }
  const Token& expect_punct(char c, const char* context) {
    const Token& t = peek();
    if (!is_punct(t, c)) {
      fail(t.pos, fmt::format("expected '{}' {}, found {}", c, context, describe(t)));
    }
    return next();
  }
  const Token& expect_word(std::string_view w, const char* context) {
    const Token& t = peek();
    if (!is_word(t, w)) {
      fail(t.pos, fmt::format("expected '{}' {}, found {}", w, context, describe(t)));
    }
    return next();
  }
  std::string expect_string(const char* what) {
    const Token& t = peek();
    if (t.kind != Token::Kind::kString) {
      fail(t.pos, fmt::format("expected {} as a quoted string, found {}", what, describe(t)));
    }
    return next().text;
  }
  // A name: a bare word or a quoted string.
  std::string expect_name(const char* what) {
    const Token& t = peek();
    if (t.kind != Token::Kind::kWord && t.kind != Token::Kind::kString) {
      fail(t.pos,
           fmt::format("expected {} (a name or a quoted string), found {}", what, describe(t)));
    }
    return next().text;
  }

  int64_t parse_int(const Token& t, const char* what) const {
    if (t.kind != Token::Kind::kWord) {
      fail(t.pos, fmt::format("expected {} (an integer), found {}", what, describe(t)));
    }
    return parse_int_text(t.text, t.pos, what);
  }
  int64_t parse_int_text(std::string_view s, size_t pos, const char* what) const {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) {
      fail(pos, fmt::format("bad number '{}' for {}: it does not fit in 64 bits", s, what));
    }
    if (ec != std::errc() || end != s.data() + s.size()) {
      fail(pos, fmt::format("bad number '{}' for {} (expected a decimal integer)", s, what));
    }
    return v;
  }
  int64_t expect_int(const char* what) { return parse_int(next(), what); }

  std::vector<int64_t> parse_int_list(const char* what) {
    expect_punct('[', fmt::format("to open the {}", what).c_str());
    std::vector<int64_t> dims;
    if (is_punct(peek(), ']')) {
      next();
      return dims;
    }
    while (true) {
      dims.push_back(expect_int(what));
      if (is_punct(peek(), ',')) {
        next();
        continue;
      }
      expect_punct(']', fmt::format("to close the {}", what).c_str());
      return dims;
    }
  }

  DataType parse_dtype() {
    const Token& t = next();
    if (t.kind != Token::Kind::kWord) {
      fail(t.pos, fmt::format("expected a dtype such as float32, found {}", describe(t)));
    }
    try {
      return DataType::parse(t.text);
    } catch (const ValueError& e) {
      fail(t.pos, e.what());
    }
  }

  double parse_float() {
    const Token& t = next();
    if (t.kind != Token::Kind::kWord) {
      fail(t.pos, fmt::format("expected a float, found {}", describe(t)));
    }
    if (t.text == "inf") return std::numeric_limits<double>::infinity();
    if (t.text == "-inf") return -std::numeric_limits<double>::infinity();
    if (t.text == "nan") {
      if (!is_punct(peek(), ':')) return std::numeric_limits<double>::quiet_NaN();
      next();
      const Token& bits_token = next();
      const std::string_view s = bits_token.text;
      uint64_t bits = 0;
      bool ok = bits_token.kind == Token::Kind::kWord && s.size() > 2 && s.size() <= 18 &&
                s.substr(0, 2) == "0x";
      if (ok) {
        const auto [end, ec] = std::from_chars(s.data() + 2, s.data() + s.size(), bits, 16);
        ok = ec == std::errc() && end == s.data() + s.size();
      }
      if (!ok) {
        fail(bits_token.pos, fmt::format("expected the NaN's bits as 0x<16 hex digits>, found {}",
                                         describe(bits_token)));
      }
      const double v = std::bit_cast<double>(bits);
      if (!std::isnan(v)) {
        fail(bits_token.pos, fmt::format("0x{:016x} is not the bit pattern of a NaN", bits));
      }
      return v;
    }
    double v = 0;
    const std::string_view s = t.text;
    const auto [end, ec] =
        std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::general);
    if (ec == std::errc::result_out_of_range) {
      fail(t.pos, fmt::format("bad number '{}': out of the range of a float64", s));
    }
    if (ec != std::errc() || end != s.data() + s.size()) {
      fail(t.pos, fmt::format("bad number '{}' (expected a float such as 1.5, -2.0e-3, inf, -inf "
                              "or nan)",
                              s));
    }
    return v;
  }

  Device parse_device() {
    const Token& name = next();
    if (name.kind != Token::Kind::kWord) {
      fail(name.pos, fmt::format("expected a device such as cpu:0, found {}", describe(name)));
    }
    Device d;
    if (std::optional<int32_t> code = DeviceTypeNames::builtin().find(name.text)) {
      d.type = *code;
    } else if (name.text.size() > 3 && name.text.substr(0, 3) == "dev" &&
               std::all_of(name.text.begin() + 3, name.text.end(),
                           [](char c) { return c >= '0' && c <= '9'; })) {
      const int64_t code =
          parse_int_text(std::string_view(name.text).substr(3), name.pos, "the device type code");
      if (code > std::numeric_limits<int32_t>::max()) {
        fail(name.pos, fmt::format("device type code {} does not fit in 32 bits", code));
      }
      d.type = static_cast<int32_t>(code);
    } else {
      fail(name.pos,
           fmt::format("unknown device type '{}' (known: {}; or dev<code> for a numeric type)",
                       name.text, fmt::join(DeviceTypeNames::builtin().names(), ", ")));
    }
    expect_punct(':', "between the device type and its index");
    const Token& id_token = next();
    const int64_t id = parse_int(id_token, "the device index");
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      fail(id_token.pos, fmt::format("device index {} is out of range", id));
    }
    d.id = static_cast<int32_t>(id);
    return d;
  }

  Tensor parse_tensor() {
    const DataType dtype = parse_dtype();
    const size_t shape_pos = peek().pos;
    std::vector<int64_t> shape = parse_int_list("tensor shape");
    uint64_t numel = 1;
    bool overflow = false;
    for (int64_t d : shape) {
      if (d < 0) fail(shape_pos, fmt::format("negative dimension {} in the tensor shape", d));
      overflow = overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
    }
    uint64_t expected = 0;
    if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(numel, dtype.bytes(), &expected)) {
      fail(shape_pos, fmt::format("the tensor shape {} has too many elements", shape_text(shape)));
    }
    expect_word("hex", "before the tensor's data (hex\"<little-endian bytes>\")");
    const Token& data = peek();
    const std::string hex = expect_string("the tensor's data");
    if (hex.size() % 2 != 0) fail(data.pos, "the tensor's hex data has an odd number of digits");
    if (hex.size() / 2 != expected) {
      fail(data.pos, fmt::format("the tensor's data has {} bytes, shape {} of {} needs {}",
                                 hex.size() / 2, shape_text(shape), dtype.str(), expected));
    }
    std::vector<uint8_t> bytes(hex.size() / 2);
    for (size_t i = 0; i < bytes.size(); ++i) {
      const int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
      if (hi < 0 || lo < 0) {
        fail(data.pos, fmt::format("the tensor's data has a non-hex character near byte {}", i));
      }
      bytes[i] = static_cast<uint8_t>(hi * 16 + lo);
    }
    Tensor t = Tensor::empty_host(std::move(shape), dtype);
    if (!bytes.empty()) std::memcpy(t.data(), bytes.data(), bytes.size());
    return t;
  }

  // --- items

  void parse_constant() {
    const size_t pos = next().pos;  // 'const'
    expect_word("c", "(constants are declared as 'const c[<index>] = <kind> <value>')");
    expect_punct('[', "after 'c'");
    const Token& index_token = next();
    const int64_t index = parse_int(index_token, "the constant index");
    if (index != static_cast<int64_t>(exec_.constants.size())) {
      fail(index_token.pos, fmt::format("expected c[{}]: constants are declared in order from c[0]",
                                        exec_.constants.size()));
    }
    expect_punct(']', "after the constant index");
    expect_punct('=', "after c[<index>]");
    const Token& kind = next();
    Constant value;
    if (is_word(kind, "tensor")) {
      value = parse_tensor();
    } else if (is_word(kind, "shape")) {
      value = ShapeConstant{parse_int_list("shape")};
    } else if (is_word(kind, "string")) {
      value = expect_string("the string constant");
    } else if (is_word(kind, "int")) {
      value = expect_int("the int constant");
    } else if (is_word(kind, "float")) {
      value = parse_float();
    } else if (is_word(kind, "dtype")) {
      value = parse_dtype();
    } else if (is_word(kind, "device")) {
      value = parse_device();
    } else {
      fail(kind.pos, fmt::format("unknown constant kind {} (expected tensor, shape, string, int, "
                                 "float, dtype or device)",
                                 describe(kind)));
    }
    expect_end_of_line();
    exec_.constants.push_back(std::move(value));
    constant_pos_.push_back(pos);
  }

  // Adds `info` to the table, or fails when its name is taken.
  void add_function(FuncInfo info, size_t pos, size_t name_pos) {
    auto [it, inserted] =
        exec_.func_map.emplace(info.name, static_cast<int64_t>(exec_.func_table.size()));
    if (!inserted) {
      fail(name_pos,
           fmt::format("function {} is already declared at {}", detail::format_name(info.name),
                       line_col(function_pos_[static_cast<size_t>(it->second)])));
    }
    exec_.func_table.push_back(std::move(info));
    function_pos_.push_back(pos);
  }

  void parse_packed_func() {
    const size_t pos = next().pos;  // 'packed_func'
    expect_punct('@', "before the function name");
    const size_t name_pos = peek().pos;
    FuncInfo info;
    info.kind = FuncKind::kPackedFunc;
    info.name = expect_name("the function name");
    expect_end_of_line();
    add_function(std::move(info), pos, name_pos);
  }

  void parse_function() {
    const size_t pos = next().pos;  // 'func'
    expect_punct('@', "before the function name");
    const size_t name_pos = peek().pos;
    FuncInfo info;
    info.kind = FuncKind::kVMFunc;
    info.name = expect_name("the function name");
    expect_punct('(', "to open the parameter list");
    if (is_punct(peek(), '%')) {
      // Unnamed parameters: %0, %1, ...
      while (true) {
        next();  // '%'
        const Token& t = next();
        if (!is_word(t, std::to_string(info.num_args))) {
          fail(t.pos, fmt::format("expected %{} (unnamed parameters are %0, %1, ... in order), "
                                  "found {}",
                                  info.num_args, describe(t)));
        }
        ++info.num_args;
        if (!is_punct(peek(), ',')) break;
        next();
        if (!is_punct(peek(), '%')) {
          fail(peek().pos, fmt::format("expected %{}, found {} (parameters are all named or all "
                                       "%<index>)",
                                       info.num_args, describe(peek())));
        }
      }
    } else if (!is_punct(peek(), ')')) {
      while (true) {
        info.param_names.push_back(expect_name("a parameter name"));
        if (!is_punct(peek(), ',')) break;
        next();
      }
      info.num_args = static_cast<int64_t>(info.param_names.size());
    }
    expect_punct(')', "to close the parameter list");
    expect_word("regs", "(the register file size, 'regs=<n>', follows the parameters)");
    expect_punct('=', "after 'regs'");
    info.register_file_size = expect_int("the register file size");
    const Token& brace = peek();
    if (!is_punct(brace, '{')) {
      fail(brace.pos, fmt::format("expected '{{' to open the body of function {}, found {}",
                                  detail::format_name(info.name), describe(brace)));
    }
    next();
    expect_end_of_line();
    info.start_instr = exec_.num_instructions();
    const std::string name = info.name;
    add_function(std::move(info), pos, name_pos);
    const size_t func_index = exec_.func_table.size() - 1;
    while (true) {
      skip_newlines();
      const Token& t = peek();
      if (is_punct(t, '}')) {
        next();
        expect_end_of_line();
        break;
      }
      if (t.kind == Token::Kind::kEnd) {
        fail(t.pos, fmt::format("missing '}}' to close function {} opened at {}",
                                detail::format_name(name), line_col(pos)));
      }
      parse_instruction(func_index);
    }
    exec_.func_table[func_index].end_instr = exec_.num_instructions();
  }

  // Starts an instruction at the current end of the code.
  void begin_instruction() {
    exec_.instr_offset.push_back(static_cast<Word>(exec_.instr_data.size()));
    word_pos_.emplace_back();
  }
  void add_word(Word w, size_t pos) {
    exec_.instr_data.push_back(w);
    word_pos_.back().push_back(pos);
  }

  Word parse_register() {
    const Token& percent = peek();
    if (!is_punct(percent, '%')) {
      fail(percent.pos, fmt::format("expected a register (%<index>, %void or %vm), found {}",
                                    describe(percent)));
    }
    next();
    const Token& t = next();
    if (is_word(t, "void")) return kVoidRegister;
    if (is_word(t, "vm")) return kVMRegister;
    const bool digits =
        t.kind == Token::Kind::kWord && !t.text.empty() &&
        std::all_of(t.text.begin(), t.text.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) {
      fail(percent.pos, fmt::format("bad register '%{}' (expected %<index>, %void or %vm)",
                                    t.kind == Token::Kind::kWord ? t.text : describe(t)));
    }
    const int64_t r = parse_int_text(t.text, t.pos, "a register index");
    if (r >= kBeginSpecialReg) {
      fail(percent.pos, fmt::format("bad register '%{}': register indices are below {}", t.text,
                                    kBeginSpecialReg));
    }
    return r;
  }

  // One argument of a call; fixups for constants and functions.
  Word parse_operand() {
    const Token& t = peek();
    const size_t pos = t.pos;
    if (is_punct(t, '%')) return encode_arg(ArgKind::kRegister, parse_register());
    if (t.kind == Token::Kind::kWord && (t.text == "c" || t.text == "f") &&
        is_punct(peek(1), '[')) {
      const bool is_const = t.text == "c";
      next();
      next();  // '['
      Fixup fix;
      fix.word = exec_.instr_data.size();
      fix.pos = pos;
      if (is_const) {
        fix.kind = Fixup::Kind::kConstArg;
        fix.index = expect_int("the constant index");
      } else {
        fix.kind = Fixup::Kind::kFuncArg;
        fix.name = expect_name("the function name");
      }
      expect_punct(']', is_const ? "after the constant index" : "after the function name");
      fixups_.push_back(std::move(fix));
      return 0;  // patched in resolve()
    }
    if (t.kind == Token::Kind::kWord && t.text.size() > 1 && t.text[0] == 'i') {
      next();
      const int64_t v = parse_int_text(std::string_view(t.text).substr(1), pos, "an immediate");
      if (v > kMaxArgValue || v < -kMaxArgValue) {
        fail(pos, fmt::format("immediate {} is out of range (at most {} in magnitude; use an int "
                              "constant)",
                              v, kMaxArgValue));
      }
      return encode_arg(ArgKind::kImmediate, v);
    }
    fail(pos, fmt::format("bad operand {} (expected %<register>, %void, %vm, i<integer>, "
                          "c[<index>] or f[<name>])",
                          describe(t)));
  }

  void parse_instruction(size_t func_index) {
    const Token& t = peek();
    if (t.kind != Token::Kind::kWord) {
      fail(t.pos,
           fmt::format("expected an instruction (call, ret, goto or if), found {}", describe(t)));
    }
    const size_t pos = t.pos;
    const std::string mnemonic = t.text;
    if (mnemonic == "call") {
      next();
      begin_instruction();
      const size_t callee_pos = peek().pos;
      const std::string callee = expect_name("the callee's name");
      const Token& in = peek();
      if (!is_word(in, "in")) {
        fail(in.pos, fmt::format("expected 'in:' after the callee, found {}", describe(in)));
      }
      next();
      expect_punct(':', "after 'in'");
      std::vector<std::pair<Word, size_t>> args;
      if (!is_word(peek(), "dst")) {
        while (true) {
          const size_t arg_pos = peek().pos;
          // Fixups record the word index they patch: the 4 head words come first.
          const size_t fixups_before = fixups_.size();
          const Word w = parse_operand();
          if (fixups_.size() != fixups_before) fixups_.back().word += 4 + args.size();
          args.emplace_back(w, arg_pos);
          if (!is_punct(peek(), ',')) break;
          next();
        }
      }
      const Token& dst_word = peek();
      if (!is_word(dst_word, "dst")) {
        fail(dst_word.pos, fmt::format("expected ',' or 'dst:' after a call argument, found {}",
                                       describe(dst_word)));
      }
      next();
      expect_punct(':', "after 'dst'");
      const size_t dst_pos = peek().pos;
      const Word dst = parse_register();
      expect_end_of_line();
      add_word(static_cast<Word>(Opcode::kCall), pos);
      add_word(dst, dst_pos);
      fixups_.push_back({Fixup::Kind::kCallee, exec_.instr_data.size(), callee, 0, callee_pos});
      add_word(0, callee_pos);
      add_word(static_cast<Word>(args.size()), callee_pos);
      for (const auto& [w, p] : args) add_word(w, p);
    } else if (mnemonic == "ret") {
      next();
      begin_instruction();
      const size_t reg_pos = peek().pos;
      const Word r = parse_register();
      expect_end_of_line();
      add_word(static_cast<Word>(Opcode::kRet), pos);
      add_word(r, reg_pos);
    } else if (mnemonic == "goto") {
      next();
      begin_instruction();
      const size_t off_pos = peek().pos;
      const int64_t offset = expect_int("the goto offset");
      expect_end_of_line();
      add_word(static_cast<Word>(Opcode::kGoto), pos);
      add_word(offset, off_pos);
    } else if (mnemonic == "if") {
      next();
      begin_instruction();
      const size_t reg_pos = peek().pos;
      const Word r = parse_register();
      expect_punct(',', "between the condition register and the false offset");
      const size_t off_pos = peek().pos;
      const int64_t offset = expect_int("the if false offset");
      expect_end_of_line();
      add_word(static_cast<Word>(Opcode::kIf), pos);
      add_word(r, reg_pos);
      add_word(offset, off_pos);
    } else if (mnemonic == "func" || mnemonic == "packed_func" || mnemonic == "const" ||
               mnemonic == "import") {
      fail(pos, fmt::format("missing '}}' before '{}' to close function {} opened at {}", mnemonic,
                            detail::format_name(exec_.func_table[func_index].name),
                            line_col(function_pos_[func_index])));
    } else {
      fail(pos, fmt::format("unknown instruction '{}' (expected call, ret, goto or if)", mnemonic));
    }
  }

  // Fills in function and constant references now that every declaration is known.
  void resolve() {
    for (const Fixup& fix : fixups_) {
      if (fix.kind == Fixup::Kind::kConstArg) {
        if (fix.index < 0 || static_cast<size_t>(fix.index) >= exec_.constants.size()) {
          fail(fix.pos, fmt::format("undefined constant c[{}] ({} constants are declared)",
                                    fix.index, exec_.constants.size()));
        }
        exec_.instr_data[fix.word] = encode_arg(ArgKind::kConstIdx, fix.index);
        continue;
      }
      const auto it = exec_.func_map.find(fix.name);
      if (it == exec_.func_map.end()) {
        fail(fix.pos,
             fmt::format("undefined function {} (declare it with 'packed_func @{}' or define it "
                         "with 'func @{}')",
                         detail::format_name(fix.name), detail::format_name(fix.name),
                         detail::format_name(fix.name)));
      }
      exec_.instr_data[fix.word] =
          fix.kind == Fixup::Kind::kCallee ? it->second : encode_arg(ArgKind::kFuncIdx, it->second);
    }
  }

  // validate(), with the error placed at the word, instruction, function or constant it is
  // about.
  void check() {
    const std::optional<detail::Problem> problem = detail::find_problem(exec_);
    if (!problem) return;
    size_t pos = 0;
    switch (problem->where) {
      case detail::Problem::Where::kExecutable:
        break;
      case detail::Problem::Where::kFunction:
        pos = function_pos_[static_cast<size_t>(problem->func)];
        break;
      case detail::Problem::Where::kInstruction: {
        const std::vector<size_t>& words = word_pos_[static_cast<size_t>(problem->pc)];
        pos = problem->word >= 0 && static_cast<size_t>(problem->word) < words.size()
                  ? words[static_cast<size_t>(problem->word)]
                  : words[0];
        break;
      }
      case detail::Problem::Where::kConstant:
        pos = constant_pos_[static_cast<size_t>(problem->constant)];
        break;
    }
    std::string message = problem->message;
    if ((problem->where == detail::Problem::Where::kInstruction ||
         problem->where == detail::Problem::Where::kFunction) &&
        problem->func >= 0) {
      message = fmt::format(
          "in function {}: {}",
          detail::format_name(exec_.func_table[static_cast<size_t>(problem->func)].name), message);
    }
    fail(pos, message);
  }

  std::string_view text_;
  const std::string& source_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t index_ = 0;
  Executable exec_;
  std::vector<Fixup> fixups_;
  std::vector<size_t> function_pos_;           // per function: its keyword
  std::vector<size_t> constant_pos_;           // per constant: its 'const'
  std::vector<std::vector<size_t>> word_pos_;  // per instruction: each word's position
};

}  // namespace

std::string Executable::as_text() const {
  validate();
  std::string out = fmt::format("{} {}\n", kHeaderWord, kTextVersion);
  if (!imports.empty()) {
    out += "\n";
    for (const std::string& lib : imports) out += "import " + detail::quote(lib) + "\n";
  }
  if (!constants.empty()) {
    out += "\n";
    for (size_t i = 0; i < constants.size(); ++i) {
      out += fmt::format("const c[{}] = {}\n", i, constant_text(constants[i]));
    }
  }
  for (const FuncInfo& f : func_table) {
    out += "\n";
    if (f.kind == FuncKind::kPackedFunc) {
      out += "packed_func @" + detail::format_name(f.name) + "\n";
      continue;
    }
    std::vector<std::string> params;
    for (int64_t i = 0; i < f.num_args; ++i) {
      params.push_back(f.param_names.empty()
                           ? "%" + std::to_string(i)
                           : detail::format_name(f.param_names[static_cast<size_t>(i)]));
    }
    out += fmt::format("func @{}({}) regs={} {{\n", detail::format_name(f.name),
                       fmt::join(params, ", "), f.register_file_size);
    for (int64_t pc = f.start_instr; pc < f.end_instr; ++pc) {
      out += instruction_text(*this, pc) + "\n";
    }
    out += "}\n";
  }
  return out;
}

Executable Executable::from_text(std::string_view text, const std::string& source_name) {
  return Parser(text, source_name).parse();
}

}  // namespace kiln::vm
