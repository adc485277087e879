// SPDX-License-Identifier: Apache-2.0
// libbias_add.so: out[i, j] = x[i, j] + bias[j] on float32 matrices (a dense layer's bias).
#include <cstdint>
#include <string>

#include "kiln/sdk/kernel.hpp"
#include "tensor_checks.h"

namespace {

// Rows per parallel chunk: a few hundred KiB of traffic each for typical layer widths.
constexpr int64_t kGrainRows = 64;

// Adds `bias` (1-D, length n) to every row of `x` (m x n) into `out` (m x n). All borrowed,
// compact float32 host tensors; `out` may be `x`. Throws kiln::sdk::Error(KILN_ERROR_VALUE)
// naming the argument whose rank or extent does not fit.
void bias_add(DLTensor* x, DLTensor* bias, DLTensor* out) {
  using kiln::examples::data_of;
  kiln::examples::expect_cpu_float32(x, "x");
  kiln::examples::expect_cpu_float32(bias, "bias");
  kiln::examples::expect_cpu_float32(out, "out");
  kiln::examples::expect_ndim(x, 2, "x");
  kiln::examples::expect_ndim(bias, 1, "bias");
  kiln::examples::expect_ndim(out, 2, "out");
  const int64_t m = x->shape[0];
  const int64_t n = x->shape[1];
  if (bias->shape[0] != n || out->shape[0] != m || out->shape[1] != n) {
    throw kiln::sdk::Error(KILN_ERROR_VALUE, "shapes do not fit: x " +
                                                 kiln::examples::shape_string(x) + ", bias " +
                                                 kiln::examples::shape_string(bias) + ", out " +
                                                 kiln::examples::shape_string(out));
  }
  const float* px = data_of<const float>(x);
  const float* pb = data_of<const float>(bias);
  float* po = data_of<float>(out);
  kiln::sdk::parallel_for(0, m, kGrainRows, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j = 0; j < n; ++j) po[i * n + j] = px[i * n + j] + pb[j];
    }
  });
}

}  // namespace

KILN_EXPORT_FUNCTION(bias_add, bias_add);
KILN_KERNEL_LIBRARY("bias_add", "bias_add");
