// SPDX-License-Identifier: Apache-2.0
#include "kiln/dtype.h"

#include <charconv>
#include <string>
#include <system_error>

#include "kiln/error.h"

namespace kiln {

namespace {

struct NamedType {
  std::string_view name;
  DataType type;
};

// Every name parse() accepts, in the order the error message lists them.
constexpr NamedType kNamedTypes[] = {
    {"bool", DataType(KILN_DL_BOOL, 8)},   {"int8", DataType(kDLInt, 8)},
    {"int16", DataType(kDLInt, 16)},       {"int32", DataType(kDLInt, 32)},
    {"int64", DataType(kDLInt, 64)},       {"uint8", DataType(kDLUInt, 8)},
    {"uint16", DataType(kDLUInt, 16)},     {"uint32", DataType(kDLUInt, 32)},
    {"uint64", DataType(kDLUInt, 64)},     {"float16", DataType(kDLFloat, 16)},
    {"bfloat16", DataType(kDLBfloat, 16)}, {"float32", DataType(kDLFloat, 32)},
    {"float64", DataType(kDLFloat, 64)},
};

std::string AcceptedNames() {
  std::string out;
  for (const NamedType& t : kNamedTypes) {
    if (!out.empty()) out += ", ";
    out += t.name;
  }
  return out;
}

// Throws the ValueError for a bad dtype text: "unknown dtype 'x'" when `detail` is empty,
// else "invalid dtype 'x': <detail>", followed by the accepted names.
[[noreturn]] void ThrowBadText(std::string_view text, std::string_view detail) {
  std::string message = detail.empty()
                            ? "unknown dtype '" + std::string(text) + "'"
                            : "invalid dtype '" + std::string(text) + "': " + std::string(detail);
  message += " (expected one of " + AcceptedNames() + ", optionally with lanes as in 'int8x4')";
  throw ValueError(message);
}

}  // namespace

namespace detail {

void throw_bad_dtype(const char* what, unsigned bits, unsigned lanes) {
  if (lanes == 0) {
    throw ValueError(std::string("dtype ") + what + std::to_string(bits) +
                     " with 0 lanes: lanes must be at least 1");
  }
  throw ValueError(
      std::string("there is no ") + std::to_string(bits) + "-bit " + what + " dtype (expected " +
      (std::string_view(what) == "float" ? "16, 32 or 64" : "8, 16, 32 or 64") + " bits)");
}

}  // namespace detail

DataType DataType::parse(std::string_view text) {
  // The lanes suffix starts at the last 'x' ("int8x4"); no base name contains an 'x'.
  size_t x = text.rfind('x');
  std::string_view base = text.substr(0, x);
  const NamedType* named = nullptr;
  for (const NamedType& t : kNamedTypes) {
    if (t.name == base) named = &t;
  }
  if (named == nullptr) ThrowBadText(text, "");
  uint16_t lanes = 1;
  if (x != std::string_view::npos) {
    std::string_view digits = text.substr(x + 1);
    if (digits.empty()) ThrowBadText(text, "missing lanes after 'x'");
    for (char c : digits) {
      if (c < '0' || c > '9') ThrowBadText(text, "lanes must be a decimal number");
    }
    if (digits.front() == '0' && digits.size() > 1) {
      ThrowBadText(text, "lanes must be written without leading zeros");
    }
    unsigned long value = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec != std::errc() || end != digits.data() + digits.size() || value == 0 || value > 65535) {
      ThrowBadText(text, "lanes must be in 1..65535");
    }
    lanes = static_cast<uint16_t>(value);
  }
  return DataType(named->type.code, named->type.bits, lanes);
}

std::string DataType::str() const {
  std::string out;
  switch (code) {
    case KILN_DL_BOOL:
      out = bits == 8 ? "bool" : "bool" + std::to_string(bits);
      break;
    case kDLInt:
      out = "int" + std::to_string(bits);
      break;
    case kDLUInt:
      out = "uint" + std::to_string(bits);
      break;
    case kDLFloat:
      out = "float" + std::to_string(bits);
      break;
    case kDLBfloat:
      out = "bfloat" + std::to_string(bits);
      break;
    case kDLComplex:
      out = "complex" + std::to_string(bits);
      break;
    case kDLOpaqueHandle:
      out = "handle" + std::to_string(bits);
      break;
    default:
      out = "code" + std::to_string(code) + "_" + std::to_string(bits);
      break;
  }
  if (lanes != 1) out += "x" + std::to_string(lanes);
  return out;
}

std::ostream& operator<<(std::ostream& os, const DataType& dtype) { return os << dtype.str(); }

}  // namespace kiln
