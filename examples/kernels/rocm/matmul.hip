// SPDX-License-Identifier: Apache-2.0
// matmul: c = a x b for row-major float32 matrices a [m, k], b [k, n], c [m, n] (as
// examples/kernels/matmul.cc), tiled through shared memory: each block computes a
// kTile x kTile tile of c, loading matching tiles of a and b into shared memory in turn.
// Metadata: args [tensor, tensor, tensor, int32 m, int32 n, int32 k],
// launch [blockIdx.x, blockIdx.y, threadIdx.x, threadIdx.y];
// block = (16, 16), grid = (ceil(n / 16), ceil(m / 16)). Any m, n, k >= 0 work.
#include <hip/hip_runtime.h>

namespace {
constexpr int kTile = 16;
constexpr int kThreads = kTile * kTile;
}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
    matmul(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int m,
           int n, int k) {
  __shared__ float tile_a[kTile][kTile];
  __shared__ float tile_b[kTile][kTile + 1];  // padded: no bank conflicts on the column reads
  // The kernel is written for kTile x kTile blocks; any other shape would skip or repeat
  // elements, so such a launch computes nothing rather than something wrong.
  if (blockDim.x != kTile || blockDim.y != kTile) return;
  const int tx = static_cast<int>(threadIdx.x);
  const int ty = static_cast<int>(threadIdx.y);
  const int row = static_cast<int>(blockIdx.y) * kTile + ty;
  const int col = static_cast<int>(blockIdx.x) * kTile + tx;
  float sum = 0.0f;
  for (int k0 = 0; k0 < k; k0 += kTile) {
    tile_a[ty][tx] = (row < m && k0 + tx < k) ? a[row * k + k0 + tx] : 0.0f;
    tile_b[ty][tx] = (k0 + ty < k && col < n) ? b[(k0 + ty) * n + col] : 0.0f;
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) sum += tile_a[ty][kk] * tile_b[kk][tx];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = sum;
}
