// SPDX-License-Identifier: Apache-2.0
#include "run/elements.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/c/abi.h"
#include "kiln/error.h"

namespace kiln::run::detail {
namespace {

// A binary floating-point format narrower than double: explicit fraction bits, exponent bits
// and the smallest normal exponent.
struct SmallFloat {
  int fraction_bits;
  int exponent_bits;
  int min_exponent;
  int max_exponent() const { return (1 << exponent_bits) - 2 + min_exponent - 1; }
};

constexpr SmallFloat kHalf{10, 5, -14};
constexpr SmallFloat kBfloat16{7, 8, -126};

// `value` rounded to the nearest value of `f` (ties to even), infinity on overflow.
double round_small(double value, const SmallFloat& f) {
  if (!std::isfinite(value) || value == 0) return value;
  int e = 0;
  std::frexp(value, &e);  // |value| = m * 2^e with m in [0.5, 1)
  const int exponent = std::max(e - 1, f.min_exponent);
  const double quantum = std::ldexp(1.0, exponent - f.fraction_bits);
  const double rounded = std::nearbyint(value / quantum) * quantum;  // exact scaling by 2^k
  if (std::fabs(rounded) >= std::ldexp(1.0, f.max_exponent() + 1)) {
    return std::copysign(std::numeric_limits<double>::infinity(), value);
  }
  return rounded;
}

uint32_t encode_small(double value, const SmallFloat& f) {
  const double rounded = round_small(value, f);
  const uint32_t sign = std::signbit(rounded) ? 1u << (f.fraction_bits + f.exponent_bits) : 0u;
  const uint32_t all_ones = (1u << f.exponent_bits) - 1;
  if (std::isnan(rounded)) return (all_ones << f.fraction_bits) | (1u << (f.fraction_bits - 1));
  if (std::isinf(rounded)) return sign | (all_ones << f.fraction_bits);
  const double magnitude = std::fabs(rounded);
  if (magnitude == 0) return sign;
  int e = 0;
  std::frexp(magnitude, &e);
  const int exponent = e - 1;
  if (exponent < f.min_exponent) {  // subnormal
    return sign | static_cast<uint32_t>(std::ldexp(magnitude, f.fraction_bits - f.min_exponent));
  }
  const auto fraction = static_cast<uint32_t>(std::ldexp(magnitude, f.fraction_bits - exponent) -
                                              std::ldexp(1.0, f.fraction_bits));
  return sign | (static_cast<uint32_t>(exponent - f.min_exponent + 1) << f.fraction_bits) |
         fraction;
}

double decode_small(uint32_t bits, const SmallFloat& f) {
  const bool negative = ((bits >> (f.fraction_bits + f.exponent_bits)) & 1u) != 0;
  const uint32_t all_ones = (1u << f.exponent_bits) - 1;
  const uint32_t exponent = (bits >> f.fraction_bits) & all_ones;
  const uint32_t fraction = bits & ((1u << f.fraction_bits) - 1);
  double value = 0;
  if (exponent == all_ones) {
    value = fraction != 0 ? std::numeric_limits<double>::quiet_NaN()
                          : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    value = std::ldexp(static_cast<double>(fraction), f.min_exponent - f.fraction_bits);
  } else {
    value = std::ldexp(static_cast<double>(fraction + (1u << f.fraction_bits)),
                       static_cast<int>(exponent) - 1 + f.min_exponent - f.fraction_bits);
  }
  return negative ? -value : value;
}

// The neighbour of `value` (a value of `f`) in the direction `up`.
double step_small(double value, bool up, const SmallFloat& f) {
  if (std::isnan(value)) return value;
  const uint32_t sign_bit = 1u << (f.fraction_bits + f.exponent_bits);
  if (value == 0) return decode_small(up ? 1u : (sign_bit | 1u), f);
  const uint32_t bits = encode_small(value, f);
  const bool grows = (value > 0) == up;  // the magnitude grows
  if (std::isinf(value) && grows) return value;
  return decode_small(grows ? bits + 1 : bits - 1, f);
}

template <typename T>
T read_lane(const void* data, int64_t index) {
  T value;
  std::memcpy(&value, static_cast<const char*>(data) + index * static_cast<int64_t>(sizeof(T)),
              sizeof(T));
  return value;
}

template <typename T>
void write_lane(void* data, int64_t index, T value) {
  std::memcpy(static_cast<char*>(data) + index * static_cast<int64_t>(sizeof(T)), &value,
              sizeof(T));
}

// The shortest "%g" text that reads back as `value` in the 16-bit float `dtype` (numpy prints
// float16 that way: 0.1 as "0.1", not as the float32 "0.099975586").
std::string shortest_16bit(double value, DataType dtype) {
  if (!std::isfinite(value)) return fmt::format("{}", value);
  for (int precision = 1; precision < 17; ++precision) {
    std::string text = fmt::format("{:.{}g}", value, precision);
    if (round_to(dtype, std::strtod(text.c_str(), nullptr)) == value) return text;
  }
  return fmt::format("{}", value);
}

[[noreturn]] void no_access(DataType dtype) {
  throw ValueError(fmt::format("elements of dtype {} cannot be read or written", dtype.str()));
}

}  // namespace

bool has_element_access(DataType dtype) {
  if (dtype.lanes == 0) return false;
  switch (dtype.code) {
    case kDLInt:
    case kDLUInt:
      return dtype.bits == 8 || dtype.bits == 16 || dtype.bits == 32 || dtype.bits == 64;
    case kDLFloat:
      return dtype.bits == 16 || dtype.bits == 32 || dtype.bits == 64;
    case kDLBfloat:
      return dtype.bits == 16;
    case KILN_DL_BOOL:
      return dtype.bits == 8;
    default:
      return false;
  }
}

bool is_integral(DataType dtype) {
  return dtype.code == kDLInt || dtype.code == kDLUInt || dtype.code == KILN_DL_BOOL;
}

size_t lane_bytes(DataType dtype) { return dtype.code == KILN_DL_BOOL ? 1 : dtype.bits / 8; }

double lowest_value(DataType dtype) {
  if (dtype.code == kDLUInt || dtype.code == KILN_DL_BOOL) return 0;
  if (dtype.code == kDLInt) return -std::ldexp(1.0, dtype.bits - 1);
  return -highest_value(dtype);
}

double highest_value(DataType dtype) {
  switch (dtype.code) {
    case KILN_DL_BOOL:
      return 1;
    case kDLInt:
      return std::ldexp(1.0, dtype.bits - 1) - 1;  // int64: rounds to 2^63
    case kDLUInt:
      return std::ldexp(1.0, dtype.bits) - 1;  // uint64: rounds to 2^64
    case kDLBfloat:
      return decode_small(0x7f7f, kBfloat16);
    case kDLFloat:
      if (dtype.bits == 16) return 65504.0;
      if (dtype.bits == 32) return std::numeric_limits<float>::max();
      return std::numeric_limits<double>::max();
    default:
      no_access(dtype);
  }
}

double load_element(const void* data, DataType dtype, int64_t index) {
  switch (dtype.code) {
    case KILN_DL_BOOL:
      return read_lane<uint8_t>(data, index) != 0 ? 1.0 : 0.0;
    case kDLInt:
      switch (dtype.bits) {
        case 8:
          return read_lane<int8_t>(data, index);
        case 16:
          return read_lane<int16_t>(data, index);
        case 32:
          return read_lane<int32_t>(data, index);
        case 64:
          return static_cast<double>(read_lane<int64_t>(data, index));
      }
      break;
    case kDLUInt:
      switch (dtype.bits) {
        case 8:
          return read_lane<uint8_t>(data, index);
        case 16:
          return read_lane<uint16_t>(data, index);
        case 32:
          return read_lane<uint32_t>(data, index);
        case 64:
          return static_cast<double>(read_lane<uint64_t>(data, index));
      }
      break;
    case kDLFloat:
      switch (dtype.bits) {
        case 16:
          return float16_value(read_lane<uint16_t>(data, index));
        case 32:
          return read_lane<float>(data, index);
        case 64:
          return read_lane<double>(data, index);
      }
      break;
    case kDLBfloat:
      if (dtype.bits == 16) return bfloat16_value(read_lane<uint16_t>(data, index));
      break;
  }
  no_access(dtype);
}

void store_element(void* data, DataType dtype, int64_t index, double value) {
  switch (dtype.code) {
    case KILN_DL_BOOL:
      return write_lane<uint8_t>(data, index, value != 0 ? 1 : 0);
    case kDLInt:
    case kDLUInt:
      if (dtype.code == kDLUInt && dtype.bits == 64) {
        return write_lane<uint64_t>(data, index, static_cast<uint64_t>(value));
      }
      return store_integer(data, dtype, index, static_cast<int64_t>(value));
    case kDLFloat:
      switch (dtype.bits) {
        case 16:
          return write_lane<uint16_t>(data, index, float16_bits(value));
        case 32:
          return write_lane<float>(data, index, static_cast<float>(value));
        case 64:
          return write_lane<double>(data, index, value);
      }
      break;
    case kDLBfloat:
      if (dtype.bits == 16) return write_lane<uint16_t>(data, index, bfloat16_bits(value));
      break;
  }
  no_access(dtype);
}

void store_integer(void* data, DataType dtype, int64_t index, int64_t value) {
  switch (dtype.code) {
    case KILN_DL_BOOL:
      return write_lane<uint8_t>(data, index, value != 0 ? 1 : 0);
    case kDLInt:
      switch (dtype.bits) {
        case 8:
          return write_lane<int8_t>(data, index, static_cast<int8_t>(value));
        case 16:
          return write_lane<int16_t>(data, index, static_cast<int16_t>(value));
        case 32:
          return write_lane<int32_t>(data, index, static_cast<int32_t>(value));
        case 64:
          return write_lane<int64_t>(data, index, value);
      }
      break;
    case kDLUInt:
      switch (dtype.bits) {
        case 8:
          return write_lane<uint8_t>(data, index, static_cast<uint8_t>(value));
        case 16:
          return write_lane<uint16_t>(data, index, static_cast<uint16_t>(value));
        case 32:
          return write_lane<uint32_t>(data, index, static_cast<uint32_t>(value));
        case 64:
          return write_lane<uint64_t>(data, index, static_cast<uint64_t>(value));
      }
      break;
    default:
      return store_element(data, dtype, index, static_cast<double>(value));
  }
  no_access(dtype);
}

double round_to(DataType dtype, double value) {
  if (dtype.code == kDLBfloat) return round_small(value, kBfloat16);
  if (dtype.code == kDLFloat && dtype.bits == 16) return round_small(value, kHalf);
  if (dtype.code == kDLFloat && dtype.bits == 32) return static_cast<float>(value);
  return value;
}

double next_up(DataType dtype, double value) {
  if (dtype.code == kDLBfloat) return step_small(value, true, kBfloat16);
  if (dtype.code == kDLFloat && dtype.bits == 16) return step_small(value, true, kHalf);
  if (dtype.code == kDLFloat && dtype.bits == 32) {
    return std::nextafter(static_cast<float>(value), std::numeric_limits<float>::infinity());
  }
  return std::nextafter(value, std::numeric_limits<double>::infinity());
}

double next_down(DataType dtype, double value) {
  if (dtype.code == kDLBfloat) return step_small(value, false, kBfloat16);
  if (dtype.code == kDLFloat && dtype.bits == 16) return step_small(value, false, kHalf);
  if (dtype.code == kDLFloat && dtype.bits == 32) {
    return std::nextafter(static_cast<float>(value), -std::numeric_limits<float>::infinity());
  }
  return std::nextafter(value, -std::numeric_limits<double>::infinity());
}

std::string format_element(const void* data, DataType dtype, int64_t index) {
  switch (dtype.code) {
    case KILN_DL_BOOL:
      return read_lane<uint8_t>(data, index) != 0 ? "true" : "false";
    case kDLInt:
      switch (dtype.bits) {
        case 8:
          return fmt::format("{}", read_lane<int8_t>(data, index));
        case 16:
          return fmt::format("{}", read_lane<int16_t>(data, index));
        case 32:
          return fmt::format("{}", read_lane<int32_t>(data, index));
        case 64:
          return fmt::format("{}", read_lane<int64_t>(data, index));
      }
      break;
    case kDLUInt:
      switch (dtype.bits) {
        case 8:
          return fmt::format("{}", read_lane<uint8_t>(data, index));
        case 16:
          return fmt::format("{}", read_lane<uint16_t>(data, index));
        case 32:
          return fmt::format("{}", read_lane<uint32_t>(data, index));
        case 64:
          return fmt::format("{}", read_lane<uint64_t>(data, index));
      }
      break;
    case kDLFloat:
      if (dtype.bits == 64) return fmt::format("{}", read_lane<double>(data, index));
      if (dtype.bits == 32) return fmt::format("{}", read_lane<float>(data, index));
      if (dtype.bits == 16) return shortest_16bit(load_element(data, dtype, index), dtype);
      break;
    case kDLBfloat:
      if (dtype.bits == 16) return shortest_16bit(load_element(data, dtype, index), dtype);
      break;
  }
  no_access(dtype);
}

std::string format_shape(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string format_index(std::span<const int64_t> shape, int64_t flat) {
  std::vector<int64_t> position(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    const int64_t extent = shape[i] > 0 ? shape[i] : 1;
    position[i] = flat % extent;
    flat /= extent;
  }
  return format_shape(position);
}

uint16_t float16_bits(double value) { return static_cast<uint16_t>(encode_small(value, kHalf)); }
double float16_value(uint16_t bits) { return decode_small(bits, kHalf); }
uint16_t bfloat16_bits(double value) {
  return static_cast<uint16_t>(encode_small(value, kBfloat16));
}
double bfloat16_value(uint16_t bits) { return decode_small(bits, kBfloat16); }

}  // namespace kiln::run::detail
