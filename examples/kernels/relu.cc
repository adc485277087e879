// SPDX-License-Identifier: Apache-2.0
// librelu.so: out = max(in, 0) on float32 tensors of any shape.
#include <cstdint>
#include <string>

#include "kiln/sdk/kernel.hpp"
#include "tensor_checks.h"

namespace {

// Elements per parallel chunk (see vector_add.cc).
constexpr int64_t kGrain = int64_t{1} << 14;

// Writes max(in, 0) element-wise into `out`. `in` and `out` (borrowed) must be compact
// float32 host tensors with the same number of elements (their shapes may differ, e.g. a
// flattened output); `out` may be `in`. NaN stays NaN. Throws
// kiln::sdk::Error(KILN_ERROR_VALUE) otherwise.
void relu(DLTensor* in, DLTensor* out) {
  using kiln::examples::data_of;
  kiln::examples::expect_cpu_float32(in, "in");
  kiln::examples::expect_cpu_float32(out, "out");
  const int64_t n = kiln::sdk::numel(in);
  if (kiln::sdk::numel(out) != n) {
    throw kiln::sdk::Error(KILN_ERROR_VALUE, "in has " + std::to_string(n) + " elements " +
                                                 kiln::examples::shape_string(in) +
                                                 " but out has " +
                                                 std::to_string(kiln::sdk::numel(out)) + " " +
                                                 kiln::examples::shape_string(out));
  }
  const float* src = data_of<const float>(in);
  float* dst = data_of<float>(out);
  kiln::sdk::parallel_for(0, n, kGrain, [=](int64_t begin, int64_t end) {
    // `x < 0 ? 0 : x` rather than std::max so that NaN passes through unchanged.
    for (int64_t i = begin; i < end; ++i) dst[i] = src[i] < 0.0f ? 0.0f : src[i];
  });
}

}  // namespace

KILN_EXPORT_FUNCTION(relu, relu);
KILN_KERNEL_LIBRARY("relu", "relu");
