// SPDX-License-Identifier: Apache-2.0
// KilnAny values built by hand, for tests that call plugin code at the ABI (launch arguments,
// packed calls) without going through kiln::Any.
#ifndef KILN_TESTS_ABI_VALUES_H_
#define KILN_TESTS_ABI_VALUES_H_

#include <cstdint>

#include "kiln/c/abi.h"

namespace kiln::test {

// A tensor argument pointing at `t` (borrowed: `t` must outlive the value).
inline KilnAny tensor_arg(DLTensor* t) {
  KilnAny a{};
  a.type_code = KILN_TYPE_TENSOR;
  a.value.v_tensor = t;
  return a;
}
inline KilnAny int_arg(int64_t v) {
  KilnAny a{};
  a.type_code = KILN_TYPE_INT;
  a.value.v_int64 = v;
  return a;
}
inline KilnAny float_arg(double v) {
  KilnAny a{};
  a.type_code = KILN_TYPE_FLOAT;
  a.value.v_float64 = v;
  return a;
}
// A string argument pointing at `v` (borrowed).
inline KilnAny string_arg(const char* v) {
  KilnAny a{};
  a.type_code = KILN_TYPE_STRING;
  a.value.v_str = v;
  return a;
}

}  // namespace kiln::test

#endif  // KILN_TESTS_ABI_VALUES_H_
