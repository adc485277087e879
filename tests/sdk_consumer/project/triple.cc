// An out-of-tree kernel module built with kiln_add_kernel_module().
#include "kiln/sdk/kernel.hpp"

int64_t triple(int64_t x) { return 3 * x; }

void fill(DLTensor* t, double value) {
  kiln::sdk::expect_dtype(t, DLDataType{kDLFloat, 32, 1}, "t");
  auto* data = static_cast<float*>(t->data);
  for (int64_t i = 0; i < kiln::sdk::numel(t); ++i) data[i] = static_cast<float>(value);
}

KILN_EXPORT_FUNCTION(triple, triple);
KILN_EXPORT_FUNCTION(fill, fill);
KILN_KERNEL_LIBRARY("triple", "triple")
