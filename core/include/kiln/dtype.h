// SPDX-License-Identifier: Apache-2.0
// Element data types of Kiln tensors: a thin value wrapper around DLPack's DLDataType with a
// strict text form ("float32", "int8x4", "bool", ...).
#ifndef KILN_DTYPE_H_
#define KILN_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include "kiln/c/abi.h"

namespace kiln {

namespace detail {
// Throws kiln::ValueError saying that `what` (e.g. "int") has no `bits`-bit variant, or that
// `lanes` is 0. Out of line so the named constructors below stay constexpr.
[[noreturn]] void throw_bad_dtype(const char* what, unsigned bits, unsigned lanes);
}  // namespace detail

// A tensor element type: DLPack type code, bits per lane and lanes per element. Bool uses the
// code KILN_DL_BOOL with 8 bits. A plain value type; converts implicitly to and from
// DLDataType. Default-constructed it is float32.
struct DataType {
  uint8_t code = kDLFloat;  // a DLDataTypeCode, or KILN_DL_BOOL
  uint8_t bits = 32;        // bits per lane
  uint16_t lanes = 1;       // lanes per element (1 for scalars)

  constexpr DataType() = default;
  // Wraps the raw fields as given; no validation (str() of a type parse() rejects still prints
  // something readable).
  constexpr DataType(uint8_t code_in, uint8_t bits_in, uint16_t lanes_in = 1)
      : code(code_in), bits(bits_in), lanes(lanes_in) {}
  // Implicit conversion from DLPack's struct; no validation.
  constexpr DataType(DLDataType t) : code(t.code), bits(t.bits), lanes(t.lanes) {}  // NOLINT
  // Implicit conversion to DLPack's struct.
  constexpr operator DLDataType() const { return DLDataType{code, bits, lanes}; }  // NOLINT

  // Parses the text form: one of bool, int8, int16, int32, int64, uint8, uint16, uint32,
  // uint64, float16, bfloat16, float32, float64, optionally followed by "x<lanes>" with lanes in
  // 1..65535 written without leading zeros ("int8x4"). No aliases, whitespace or other case.
  // Throws kiln::ValueError quoting `text` and listing the accepted names.
  static DataType parse(std::string_view text);

  // The text form, the inverse of parse(): "float32", "int8x4", "bool". Types parse() does not
  // accept print as e.g. "complex64" or "code3_64" (never throws).
  std::string str() const;

  // Bytes per element: (bits * lanes + 7) / 8; bool is 1 byte per lane.
  constexpr size_t bytes() const {
    if (code == KILN_DL_BOOL) return lanes;
    return (static_cast<size_t>(bits) * lanes + 7) / 8;
  }

  // Named constructors. Bool(): 8-bit bool. Int/UInt(bits): bits in {8, 16, 32, 64};
  // Float(bits): bits in {16, 32, 64}; lanes >= 1. Bad bits or lanes throw kiln::ValueError.
  static constexpr DataType Bool(uint16_t lanes = 1) {
    if (lanes == 0) detail::throw_bad_dtype("bool", 8, lanes);
    return DataType(KILN_DL_BOOL, 8, lanes);
  }
  static constexpr DataType Int(unsigned bits, uint16_t lanes = 1) {
    if (!IsIntBits(bits) || lanes == 0) detail::throw_bad_dtype("int", bits, lanes);
    return DataType(kDLInt, static_cast<uint8_t>(bits), lanes);
  }
  static constexpr DataType UInt(unsigned bits, uint16_t lanes = 1) {
    if (!IsIntBits(bits) || lanes == 0) detail::throw_bad_dtype("uint", bits, lanes);
    return DataType(kDLUInt, static_cast<uint8_t>(bits), lanes);
  }
  static constexpr DataType Float(unsigned bits, uint16_t lanes = 1) {
    if ((bits != 16 && bits != 32 && bits != 64) || lanes == 0) {
      detail::throw_bad_dtype("float", bits, lanes);
    }
    return DataType(kDLFloat, static_cast<uint8_t>(bits), lanes);
  }
  static constexpr DataType BFloat16(uint16_t lanes = 1) {
    if (lanes == 0) detail::throw_bad_dtype("bfloat", 16, lanes);
    return DataType(kDLBfloat, 16, lanes);
  }

  // Field-wise equality.
  friend constexpr bool operator==(const DataType& a, const DataType& b) {
    return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
  }

 private:
  static constexpr bool IsIntBits(unsigned bits) {
    return bits == 8 || bits == 16 || bits == 32 || bits == 64;
  }
};

// Writes dtype.str() to `os`.
std::ostream& operator<<(std::ostream& os, const DataType& dtype);

}  // namespace kiln

#endif  // KILN_DTYPE_H_
