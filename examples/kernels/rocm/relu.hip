// SPDX-License-Identifier: Apache-2.0
// relu: out[i] = max(in[i], 0) for i < n, NaN passing through (as examples/kernels/relu.cc).
// Metadata: args [tensor, tensor, int32], launch [blockIdx.x, threadIdx.x];
// grid.x = ceil(n / block.x), block.x = 256.
#include <hip/hip_runtime.h>

extern "C" __global__ void relu(const float* __restrict__ in, float* __restrict__ out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    const float x = in[i];
    out[i] = x < 0.0f ? 0.0f : x;  // not fmaxf: NaN stays NaN
  }
}
