// SPDX-License-Identifier: Apache-2.0
// vector_add: out[i] = a[i] + alpha * b[i] for i < n, one thread per element (the device
// conformance kernel; the CPU example is examples/kernels/vector_add.cc).
// Metadata: args [tensor, tensor, tensor, float32, int32], launch [blockIdx.x, threadIdx.x];
// grid.x = ceil(n / block.x), block.x = 256.
#include <hip/hip_runtime.h>

extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ out, float alpha, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = a[i] + alpha * b[i];
}
