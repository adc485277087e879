// SPDX-License-Identifier: Apache-2.0
// vector_add: out[i] = a[i] + alpha * b[i] for i < n, one thread per element (the device
// conformance kernel; examples/kernels/vector_add.cc is the CPU version). The product is
// rounded before the sum (__fmul_rn, no fused multiply-add), as the CPU computes it, so both
// give the same bits. Compiles with nvcc and with NVRTC (no host headers).
extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ out, float alpha, int n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + __fmul_rn(alpha, b[i]);
}
