// SPDX-License-Identifier: Apache-2.0
// libstamp.so: stamp(out) writes KILN_TEST_STAMP into every element of a float32 host tensor.
// tests/rpc/CMakeLists.txt builds it twice, with the values 1 and 2, into two folders under the
// same file name, so that two libraries share a file name and every symbol name and differ in
// one constant: same_name_test.cc uploads, exports and loads both under one name and checks
// that each call answers with its own library's value.
#include <cstdint>

#include "kiln/sdk/kernel.hpp"

#ifndef KILN_TEST_STAMP
#error "build with -DKILN_TEST_STAMP=<a number>"
#endif

namespace {

void stamp(DLTensor* out) {
  if (out->dtype.code != kDLFloat || out->dtype.bits != 32 || out->dtype.lanes != 1) {
    throw kiln::sdk::Error(KILN_ERROR_TYPE, "stamp: out must be float32");
  }
  float* data = reinterpret_cast<float*>(static_cast<char*>(out->data) + out->byte_offset);
  const int64_t n = kiln::sdk::numel(out);
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(KILN_TEST_STAMP);
}

}  // namespace

KILN_EXPORT_FUNCTION(stamp, stamp);
KILN_KERNEL_LIBRARY("stamp", "stamp");
