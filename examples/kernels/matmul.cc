// SPDX-License-Identifier: Apache-2.0
// libmatmul.so: C = A x B on float32 matrices, cache-blocked and parallel over row tiles.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kiln/sdk/kernel.hpp"
#include "tensor_checks.h"

namespace {

// Tile edge, in elements. A 64 x 64 float tile of B is 16 KiB, so it stays in L1 while a
// row tile of A streams over it; 64 rows per task also give enough tasks for a few cores
// once M reaches a few hundred.
constexpr int64_t kTile = 64;

// True when the byte ranges of `x` and `y` overlap.
bool overlaps(const DLTensor* x, const DLTensor* y) {
  const auto* x0 = kiln::examples::data_of<const char>(x);
  const auto* y0 = kiln::examples::data_of<const char>(y);
  const auto x1 = x0 + kiln::sdk::numel(x) * sizeof(float);
  const auto y1 = y0 + kiln::sdk::numel(y) * sizeof(float);
  return x0 < y1 && y0 < x1;
}

// Computes rows [i0, i1) of C = A x B, with A [M, K], B [K, N], C [M, N] compact row-major.
void matmul_rows(const float* a, const float* b, float* c, int64_t i0, int64_t i1, int64_t n,
                 int64_t k) {
  std::fill(c + i0 * n, c + i1 * n, 0.0f);
  for (int64_t k0 = 0; k0 < k; k0 += kTile) {
    const int64_t k1 = std::min(k0 + kTile, k);
    for (int64_t j0 = 0; j0 < n; j0 += kTile) {
      const int64_t j1 = std::min(j0 + kTile, n);
      for (int64_t i = i0; i < i1; ++i) {
        float* __restrict c_row = c + i * n;
        for (int64_t kk = k0; kk < k1; ++kk) {
          const float a_ik = a[i * k + kk];
          const float* __restrict b_row = b + kk * n;
          // Unit stride over j in both B and C: the loop the compiler vectorises.
          for (int64_t j = j0; j < j1; ++j) c_row[j] += a_ik * b_row[j];
        }
      }
    }
  }
}

// Computes c = a x b. `a` [M, K], `b` [K, N] and `c` [M, N] (borrowed) must be compact 2-D
// float32 host tensors; any M, N, K >= 0 works (K = 0 gives zeros). `c` must not overlap
// `a` or `b`: it is written while they are read. Throws kiln::sdk::Error(KILN_ERROR_VALUE)
// with the shapes otherwise.
void matmul(DLTensor* a, DLTensor* b, DLTensor* c) {
  using kiln::examples::data_of;
  using kiln::examples::shape_string;
  kiln::examples::expect_cpu_float32(a, "a");
  kiln::examples::expect_cpu_float32(b, "b");
  kiln::examples::expect_cpu_float32(c, "c");
  kiln::examples::expect_ndim(a, 2, "a");
  kiln::examples::expect_ndim(b, 2, "b");
  kiln::examples::expect_ndim(c, 2, "c");
  const int64_t m = a->shape[0];
  const int64_t k = a->shape[1];
  const int64_t n = b->shape[1];
  if (b->shape[0] != k || c->shape[0] != m || c->shape[1] != n) {
    throw kiln::sdk::Error(KILN_ERROR_VALUE, "shapes do not match for c = a x b: a " +
                                                 shape_string(a) + ", b " + shape_string(b) +
                                                 ", c " + shape_string(c));
  }
  if (overlaps(c, a) || overlaps(c, b)) {
    throw kiln::sdk::Error(KILN_ERROR_VALUE, "c must not overlap a or b");
  }
  const float* pa = data_of<const float>(a);
  const float* pb = data_of<const float>(b);
  float* pc = data_of<float>(c);
  const int64_t row_tiles = (m + kTile - 1) / kTile;
  // One index per row tile, grain 1: every tile is a task worth ~kTile * N * K flops.
  kiln::sdk::parallel_for(0, row_tiles, 1, [=](int64_t t0, int64_t t1) {
    matmul_rows(pa, pb, pc, t0 * kTile, std::min(t1 * kTile, m), n, k);
  });
}

}  // namespace

KILN_EXPORT_FUNCTION(matmul, matmul);
KILN_KERNEL_LIBRARY("matmul", "matmul");
