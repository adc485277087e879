// SPDX-License-Identifier: Apache-2.0
// Element access for the run layer: reading, writing, rounding and printing tensor elements of
// every scalar dtype (bool, int8..int64, uint8..uint64, float16, bfloat16, float32, float64)
// through doubles, with float16 and bfloat16 converted in software (round to nearest, ties to
// even). Vector types (lanes > 1) are accessed lane by lane: `index` counts lanes. Internal to
// libkiln.
#ifndef KILN_RUN_ELEMENTS_H_
#define KILN_RUN_ELEMENTS_H_

#include <cstdint>
#include <span>
#include <string>

#include "kiln/dtype.h"

namespace kiln::run::detail {

// Whether the lanes of `dtype` are one of the scalar types listed above.
bool has_element_access(DataType dtype);
// Bool or an integer type (the generators then draw whole numbers).
bool is_integral(DataType dtype);
// Bytes of one lane (1 for bool).
size_t lane_bytes(DataType dtype);

// The smallest and largest finite values of the lane type (0 and 1 for bool).
double lowest_value(DataType dtype);
double highest_value(DataType dtype);

// Lane `index` of the array at `data` (borrowed) as a double. Exact except for 64-bit integers
// beyond 2^53. `dtype` must have element access.
double load_element(const void* data, DataType dtype, int64_t index);
// Writes `value` into lane `index`: floats round to nearest (overflow gives infinity); integers
// and bool take the value truncated toward zero, which must be in the type's range.
void store_element(void* data, DataType dtype, int64_t index, double value);
// Writes the whole number `value` (in the type's range) into lane `index` exactly.
void store_integer(void* data, DataType dtype, int64_t index, int64_t value);

// `value` rounded to the nearest value of a float lane type (identity for float64).
double round_to(DataType dtype, double value);
// The next value of a float lane type above / below `value` (which that type represents).
double next_up(DataType dtype, double value);
double next_down(DataType dtype, double value);

// Lane `index` printed exactly in its own precision: "1.5", "0.1" (a float32 0.1), "-3",
// "18446744073709551615", "true", "nan", "inf".
std::string format_element(const void* data, DataType dtype, int64_t index);
// "[2, 3]" ("[]" for a 0-d shape).
std::string format_shape(std::span<const int64_t> shape);
// The row-major position of flat element `flat` in `shape`: "[1, 2]" ("[]" for 0-d).
std::string format_index(std::span<const int64_t> shape, int64_t flat);

// IEEE half and bfloat16 bit patterns to and from doubles.
uint16_t float16_bits(double value);
double float16_value(uint16_t bits);
uint16_t bfloat16_bits(double value);
double bfloat16_value(uint16_t bits);

}  // namespace kiln::run::detail

#endif  // KILN_RUN_ELEMENTS_H_
