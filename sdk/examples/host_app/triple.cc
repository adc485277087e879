// SPDX-License-Identifier: Apache-2.0
// A CPU kernel module built with kiln_add_kernel_module(): two functions the host app calls.
#include "kiln/sdk/kernel.hpp"

// A scalar function: what a call through the packed convention costs, with nothing else.
int64_t triple(int64_t x) { return 3 * x; }

// A tensor function: fills a float32 tensor, checking its dtype first (a wrong one is a
// kiln::TypeError at the caller, naming the argument).
void fill(DLTensor* t, double value) {
  kiln::sdk::expect_dtype(t, DLDataType{kDLFloat, 32, 1}, "t");
  auto* data = static_cast<float*>(t->data);
  for (int64_t i = 0; i < kiln::sdk::numel(t); ++i) data[i] = static_cast<float>(value);
}

KILN_EXPORT_FUNCTION(triple, triple);
KILN_EXPORT_FUNCTION(fill, fill);
// The library's name and its entry function (Module::entry()).
KILN_KERNEL_LIBRARY("triple", "triple")
