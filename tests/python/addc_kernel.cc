// SPDX-License-Identifier: Apache-2.0
// libaddc.so: addc(a, c) writes c = a + KILN_TEST_ADDEND on float32 host tensors. Built several
// times with different addends into folders of their own (tests/CMakeLists.txt), so that
// libraries with the same file name and the same symbol names differ only in a constant: the
// many-libraries test (tests/python/test_many_libraries.py) checks that each runs its own code.
#include <cstdint>
#include <string>

#include "kiln/sdk/kernel.hpp"

#ifndef KILN_TEST_ADDEND
#error "build with -DKILN_TEST_ADDEND=<an integer>"
#endif

namespace {

// Checks that `t` (borrowed) is a float32 host tensor; throws kiln::sdk::Error otherwise.
void expect_float32(const DLTensor* t, const char* what) {
  if (t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1) {
    throw kiln::sdk::Error(KILN_ERROR_TYPE, std::string(what) + " must be float32");
  }
}

void addc(DLTensor* a, DLTensor* c) {
  expect_float32(a, "a");
  expect_float32(c, "c");
  const int64_t n = kiln::sdk::numel(a);
  if (kiln::sdk::numel(c) != n) throw kiln::sdk::Error(KILN_ERROR_VALUE, "a and c differ");
  const float* src =
      reinterpret_cast<const float*>(static_cast<const char*>(a->data) + a->byte_offset);
  float* dst = reinterpret_cast<float*>(static_cast<char*>(c->data) + c->byte_offset);
  // A named body (an lvalue): parallel_for must take it as well as a temporary lambda.
  const auto add = [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = src[i] + static_cast<float>(KILN_TEST_ADDEND);
  };
  kiln::sdk::parallel_for(0, n, 256, add);
}

}  // namespace

KILN_EXPORT_FUNCTION(addc, addc);
KILN_KERNEL_LIBRARY("addc", "addc");
