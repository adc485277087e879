// SPDX-License-Identifier: Apache-2.0
// libvector_add.so: out = a + alpha * b on float32 vectors.
#include <cstdint>
#include <string>

#include "kiln/sdk/kernel.hpp"
#include "tensor_checks.h"

namespace {

// Elements per parallel chunk: large enough that scheduling costs stay well below the
// memory traffic of a chunk (64 KiB per operand), small enough to spread big vectors.
constexpr int64_t kGrain = int64_t{1} << 14;

// Computes out[i] = a[i] + alpha * b[i]. `a`, `b` and `out` (borrowed) must be 1-D float32
// host tensors of equal length, compact; `out` may be `a` or `b`. Throws
// kiln::sdk::Error(KILN_ERROR_VALUE) naming the offending argument otherwise.
void vector_add(DLTensor* a, DLTensor* b, DLTensor* out, double alpha) {
  using kiln::examples::data_of;
  kiln::examples::expect_cpu_float32(a, "a");
  kiln::examples::expect_cpu_float32(b, "b");
  kiln::examples::expect_cpu_float32(out, "out");
  kiln::examples::expect_ndim(a, 1, "a");
  kiln::examples::expect_ndim(b, 1, "b");
  kiln::examples::expect_ndim(out, 1, "out");
  const int64_t n = a->shape[0];
  if (b->shape[0] != n || out->shape[0] != n) {
    throw kiln::sdk::Error(KILN_ERROR_VALUE, "lengths differ: a " + std::to_string(n) + ", b " +
                                                 std::to_string(b->shape[0]) + ", out " +
                                                 std::to_string(out->shape[0]));
  }
  const float* pa = data_of<const float>(a);
  const float* pb = data_of<const float>(b);
  float* po = data_of<float>(out);
  const auto scale = static_cast<float>(alpha);
  kiln::sdk::parallel_for(0, n, kGrain, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) po[i] = pa[i] + scale * pb[i];
  });
}

}  // namespace

KILN_EXPORT_FUNCTION(vector_add, vector_add);
KILN_KERNEL_LIBRARY("vector_add", "vector_add");
