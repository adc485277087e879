// SPDX-License-Identifier: Apache-2.0
// vector_add: out[i] = a[i] + alpha * b[i] for i < n, one work-item per element (the device
// conformance kernel; examples/kernels/vector_add.cc is the CPU version).
// Launch: blockIdx.x = ceil(n / block), threadIdx.x = block (e.g. 256).

// Round the product and the sum separately, as the CPU kernel does, so results match exactly.
#pragma OPENCL FP_CONTRACT OFF

__kernel void vector_add(__global const float* a, __global const float* b, __global float* out,
                         const float alpha, const int n) {
  const size_t i = get_global_id(0);
  if (n > 0 && i < (size_t)n) out[i] = a[i] + alpha * b[i];
}
