// SPDX-License-Identifier: Apache-2.0
// libkiln_conformance_kernels.so: CPU kernels for the conformance suite's own tests
// (tests/conformance/CMakeLists.txt), built as a vendor builds a kernel library.
//
//   spin(out, ns)            the kernel of known duration for the cpu timer test
//                            (kiln-conformance --timing-kernel): busy-waits `ns` nanoseconds on
//                            the steady clock, then writes `ns` to out[0] (int64).
//   vector_add_off_by_one    the conformance kernel out = a + alpha * b with a planted bug: its
//                            loop stops one element short, so the last element is never written
//                            (a module that loads but computes wrong results).
#include <chrono>
#include <cstdint>

#include "kiln/sdk/kernel.hpp"

namespace {

const DLDataType kInt64{kDLInt, 64, 1};
const DLDataType kFloat32{kDLFloat, 32, 1};

template <typename T>
T* data_of(DLTensor* t) {
  return reinterpret_cast<T*>(static_cast<char*>(t->data) + t->byte_offset);
}

// Busy-waits `ns` nanoseconds (not a sleep: a kernel keeps its device busy), then out[0] = ns.
void spin(DLTensor* out, int64_t ns) {
  kiln::sdk::expect_dtype(out, kInt64, "out");
  if (kiln::sdk::numel(out) < 1) throw kiln::sdk::Error(KILN_ERROR_VALUE, "out is empty");
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < until) {
  }
  *data_of<int64_t>(out) = ns;
}

// out[i] = a[i] + alpha * b[i] for every i but the last.
void vector_add_off_by_one(DLTensor* a, DLTensor* b, DLTensor* out, double alpha) {
  kiln::sdk::expect_dtype(a, kFloat32, "a");
  kiln::sdk::expect_dtype(b, kFloat32, "b");
  kiln::sdk::expect_dtype(out, kFloat32, "out");
  const int64_t n = kiln::sdk::numel(out);
  if (kiln::sdk::numel(a) != n || kiln::sdk::numel(b) != n) {
    throw kiln::sdk::Error(KILN_ERROR_VALUE, "lengths differ");
  }
  const auto scale = static_cast<float>(alpha);
  for (int64_t i = 0; i < n - 1; ++i) {
    data_of<float>(out)[i] = data_of<float>(a)[i] + scale * data_of<float>(b)[i];
  }
}

}  // namespace

KILN_EXPORT_FUNCTION(spin, spin);
KILN_EXPORT_FUNCTION(vector_add_off_by_one, vector_add_off_by_one);
KILN_KERNEL_LIBRARY("conformance_kernels", nullptr);
